"use strict";
// Named jobs: one server page at a time, by cursor. cursors[i] is the "after" of page i + 1
// (null: the first page); forward pushes the answer's next, back pops. Filters start over.
(() => {
  let cursors = [null], total = null, wantCount = true, opened = null, timer = null;
  let filters = null, list = null, detail = null;
  const scope = () => "namespace=" + encodeURIComponent(filters.ns.value) + "&app_id=" + encodeURIComponent(filters.app.value);
  const secs = v => v == null ? "" : (v < 1 ? Math.round(v * 1000) + " ms" : v.toFixed(1) + " s");

  function restart() { cursors = [null]; total = null; wantCount = true; ts.refresh(); }

  function build(section) {
    const bar = document.createElement("div");
    const input = (id, placeholder) => {
      const i = document.createElement("input");
      i.id = id; i.placeholder = placeholder;
      // Debounced: one request once typing pauses, not one per key.
      i.oninput = () => { clearTimeout(timer); timer = setTimeout(restart, 300); };
      bar.append(i);
      return i;
    };
    filters = {ns: input("f-ns", "namespace (default)"), app: input("f-app", "app_id (default)"),
               prefix: input("f-prefix", "name prefix")};
    for (const i of Object.values(filters)) i.setAttribute("aria-label", i.placeholder);
    list = document.createElement("div");
    list.id = "jobs-table";
    detail = document.createElement("div");
    detail.id = "job-detail";
    detail.hidden = true;
    section.append(bar, list, detail);
  }

  function pager(d) {
    const nav = document.createElement("p");
    nav.className = "pager";
    const first = (cursors.length - 1) * d.size + 1;
    nav.append("page " + cursors.length + " (jobs " + (d.items.length ? first + "-" + (first + d.items.length - 1) : "none") +
               (total == null ? "" : " of " + total) + ") ");
    for (const [label, show, move] of [["<", cursors.length > 1, () => cursors.pop()],
                                       [">", d.next != null, () => cursors.push(d.next)]]) {
      if (!show) continue;
      const b = document.createElement("button");
      b.textContent = label;
      b.dataset.page = label === "<" ? "prev" : "next";
      b.onclick = () => { move(); ts.refresh(); };
      nav.append(b);
    }
    return nav;
  }

  // Pause asks why (the note shows with the pause); the others ask for confirmation. Both are
  // recorded by the server with who acted.
  async function act(action, name) {
    let note = null;
    if (action === "pause") {
      note = prompt("pause " + name + "? Why (shown with the pause, optional):", "");
      if (note === null) return;
    } else if (!confirm(action + " " + name + "?")) return;
    const r = await ts.post("api/jobs/" + encodeURIComponent(name) + "/" + action + "?" + scope(), note);
    ts.say(action + " " + name + ": " + (r.ok ? "done" : r.body), !r.ok);
    if (action === "delete" && r.ok && opened === name) opened = null;
    if (action === "delete") wantCount = true;
    ts.refresh();
  }

  function showDetail(j) {
    const s = j.status, html = ts.html;
    const counters = [["successful", s.successful], ["failed", s.failed], ["interrupted", s.interrupted],
      ["consecutive failures", s.consecutive_failures], ["attempts at this occurrence", s.attempts],
      ["excluded", s.excluded], ["overlap skipped", s.overlap_skipped]];
    const fires = (s.next_fires || []).map(t => html`<li>${t}</li>`);
    ts.render(detail, html`<h2>${j.name} <button data-close>close</button></h2>
      <p class='muted'>${j.target} · ${j.schedule || "one-shot at " + j.due} · generation ${j.generation} · put ${j.updated_at}</p>
      ${s.paused ? html`<p class='paused'>paused since ${s.paused_since} by ${s.paused_by}${s.paused_note ? ": " + s.paused_note : ""}</p>` : ""}
      ${s.staged ? html`<p class='staged'>staged since ${s.staged.since}: waiting for ${s.staged.target}</p>` : ""}
      ${s.finished ? html`<p class='finished'>finished: nothing left to fire</p>` : ""}
      ${ts.table([["counter", "counter"], ["value", "value"]], counters.map(([k, v]) => ({counter: k, value: v})), false,
                 r => ({counter: r.counter}))}
      <h2>next fire times</h2><ul class='next-fires'>${fires.length ? fires : html`<li class='none'>none</li>`}</ul>
      ${s.current_attempt ? html`<p>running: attempt ${s.current_attempt.attempt} since ${s.current_attempt.started_at}</p>` : ""}
      <h2>recent attempts</h2>${ts.table([["scheduled_for", "scheduled for"], ["started", "started"],
        ["lateness", "lateness", r => secs(r.lateness_s)], ["duration", "duration", r => secs(r.duration_s)],
        ["outcome", "outcome", r => r.outcome + (r.triggered ? " (triggered)" : "")], ["error", "error"]],
        s.history || [], false, r => ({run: r.run_id}))}`);
    detail.hidden = false;
    detail.dataset.job = j.name;
    detail.querySelector("button[data-close]").onclick = () => { opened = null; detail.hidden = true; };
  }

  async function renderDetail() {
    if (opened == null) { detail.hidden = true; return; }
    try {
      showDetail(await ts.get("api/jobs/" + encodeURIComponent(opened) + "?" + scope()));
    } catch (e) {
      detail.hidden = false;
      ts.render(detail, ts.html`<p class='err'>${opened}: ${e.message}</p>`);
    }
  }

  // In the address: ns, app, prefix, after (the page's cursor: back from it goes to the first
  // page) and open (the job whose detail shows).
  function restore(params) {
    filters.ns.value = params.get("ns") || ""; filters.app.value = params.get("app") || "";
    filters.prefix.value = params.get("prefix") || "";
    cursors = params.get("after") ? [null, params.get("after")] : [null];
    opened = params.get("open"); total = null; wantCount = true;
  }

  ts.page("jobs", "Named jobs", async section => {
    if (!filters) { build(section); restore(ts.params()); }
    const fetchPage = () => {
      const after = cursors[cursors.length - 1];
      return ts.get("api/jobs?" + scope() + "&prefix=" + encodeURIComponent(filters.prefix.value) +
                    (after == null ? "" : "&after=" + encodeURIComponent(after)) + (wantCount ? "&count=1" : ""));
    };
    let d = await fetchPage();
    while (!d.items.length && cursors.length > 1) { cursors.pop(); d = await fetchPage(); }  // its jobs were deleted
    if (wantCount) { total = d.total; wantCount = false; }
    const html = ts.html;
    const button = (r, a) => html`<button data-action='${a}' data-name='${r.name}'>${a}</button>`;
    ts.slot(list, "paging").replaceChildren(pager(d));
    ts.render(ts.slot(list, "rows"), ts.table([["name", "name", r => html`<a href='#jobs' data-open='${r.name}'>${r.name}</a>`],
      ["state", "state", r => r.status.paused ? "paused" : (r.status.finished ? "finished" : "active")],
      ["ok", "ok / failed", r => r.status.successful + " / " + r.status.failed],
      ["next", "next fires", r => (r.status.next_fires || []).slice(0, 3).join(", ")],
      ["last", "last attempt", r => r.status.last_attempt ? r.status.last_attempt.outcome + " " + (r.status.last_attempt.ended_at || "") : ""],
      ["act", "", r => [button(r, r.status.paused ? "resume" : "pause"), button(r, "trigger"), button(r, "delete")]]],
      d.items, false, r => ({job: r.name}),
      "No named jobs in namespace " + (filters.ns.value || "default") + ", app_id " + (filters.app.value || "default") +
      (filters.prefix.value ? " whose name starts with " + filters.prefix.value : "") + "."));
    list.querySelectorAll("button[data-action]").forEach(b => b.onclick = () => act(b.dataset.action, b.dataset.name));
    list.querySelectorAll("a[data-open]").forEach(a => a.onclick = e => { e.preventDefault(); opened = a.dataset.open; renderDetail(); });
    await renderDetail();
    ts.keep({ns: filters.ns.value, app: filters.app.value, prefix: filters.prefix.value,
             after: cursors[cursors.length - 1], open: opened});
  }, params => restore(params));
})();
