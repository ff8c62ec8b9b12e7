"use strict";
(() => {
  let page = 1, filters = null, list = null;
  const scope = () => "namespace=" + encodeURIComponent(filters.ns.value) + "&app_id=" + encodeURIComponent(filters.app.value);

  function build(section) {
    const bar = document.createElement("div");
    const input = (placeholder) => { const i = document.createElement("input"); i.placeholder = placeholder;
      i.oninput = () => { page = 1; ts.refresh(); }; bar.append(i); return i; };
    filters = {ns: input("namespace (default)"), app: input("app_id (default)"), prefix: input("name prefix")};
    filters.ns.id = "f-ns"; filters.app.id = "f-app"; filters.prefix.id = "f-prefix";
    list = document.createElement("div");
    list.id = "jobs-table";
    section.append(bar, list);
  }

  async function act(action, name) {
    if (!confirm(action + " " + name + "?")) return;
    const r = await ts.post("api/jobs/" + encodeURIComponent(name) + "/" + action + "?" + scope());
    ts.say(action + " " + name + ": " + (r.ok ? "done" : r.body), !r.ok);
    ts.refresh();
  }

  ts.page("jobs", "Named jobs", async section => {
    if (!filters) build(section);
    const d = await ts.get("api/jobs?" + scope() + "&prefix=" + encodeURIComponent(filters.prefix.value) + "&page=" + page);
    const button = (r, a) => "<button data-action='" + a + "' data-name='" + ts.esc(r.name) + "'>" + a + "</button>";
    list.innerHTML = ts.table([["name", "name"],
      ["state", "state", r => r.status.paused ? "paused" : (r.status.finished ? "finished" : "active")],
      ["ok", "ok / failed", r => ts.esc(r.status.successful) + " / " + ts.esc(r.status.failed)],
      ["next", "next fires", r => ts.esc((r.status.next_fires || []).slice(0, 3).join(", "))],
      ["last", "last attempt", r => ts.esc(r.status.last_attempt ? JSON.stringify(r.status.last_attempt) : "")],
      ["act", "", r => button(r, r.status.paused ? "resume" : "pause") + button(r, "trigger") + button(r, "delete")]], d.items, false, r => ({job: r.name}));
    list.prepend(ts.pager(d, step => { page += step; ts.refresh(); }));
    list.querySelectorAll("button[data-action]").forEach(b => b.onclick = () => act(b.dataset.action, b.dataset.name));
  });
})();
