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

  async function act(action, name) {
    if (!confirm(action + " " + name + "?")) return;
    const r = await ts.post("api/jobs/" + encodeURIComponent(name) + "/" + action + "?" + scope());
    ts.say(action + " " + name + ": " + (r.ok ? "done" : r.body), !r.ok);
    if (action === "delete" && r.ok && opened === name) opened = null;
    if (action === "delete") wantCount = true;
    ts.refresh();
  }

  function showDetail(j) {
    const s = j.status;
    const counters = [["successful", s.successful], ["failed", s.failed], ["interrupted", s.interrupted],
      ["consecutive failures", s.consecutive_failures], ["attempts at this occurrence", s.attempts],
      ["excluded", s.excluded], ["overlap skipped", s.overlap_skipped]];
    let h = "<h2>" + ts.esc(j.name) + " <button data-close>close</button></h2>";
    h += "<p class='muted'>" + ts.esc(j.target) + " · " + ts.esc(j.schedule || "one-shot at " + j.due) +
         " · generation " + ts.esc(j.generation) + " · put " + ts.esc(j.updated_at) + "</p>";
    if (s.paused) h += "<p class='paused'>paused since " + ts.esc(s.paused_since) + " by " + ts.esc(s.paused_by) +
                       (s.paused_note ? ": " + ts.esc(s.paused_note) : "") + "</p>";
    if (s.staged) h += "<p class='staged'>staged since " + ts.esc(s.staged.since) + ": waiting for " + ts.esc(s.staged.target) + "</p>";
    if (s.finished) h += "<p class='finished'>finished: nothing left to fire</p>";
    h += ts.table([["counter", "counter"], ["value", "value"]], counters.map(([k, v]) => ({counter: k, value: v})), false,
                  r => ({counter: r.counter}));
    h += "<h2>next fire times</h2><ul class='next-fires'>" +
         ((s.next_fires || []).map(t => "<li>" + ts.esc(t) + "</li>").join("") || "<li class='none'>none</li>") + "</ul>";
    if (s.current_attempt) h += "<p>running: attempt " + ts.esc(s.current_attempt.attempt) + " since " + ts.esc(s.current_attempt.started_at) + "</p>";
    h += "<h2>recent attempts</h2>" + ts.table([["scheduled_for", "scheduled for"], ["started", "started"],
      ["lateness", "lateness", r => secs(r.lateness_s)], ["duration", "duration", r => secs(r.duration_s)],
      ["outcome", "outcome", r => ts.esc(r.outcome + (r.triggered ? " (triggered)" : ""))], ["error", "error"]],
      s.history || [], false, r => ({run: r.run_id}));
    detail.innerHTML = h;
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
      detail.innerHTML = "<p class='err'>" + ts.esc(opened) + ": " + ts.esc(e.message) + "</p>";
    }
  }

  ts.page("jobs", "Named jobs", async section => {
    if (!filters) build(section);
    const fetchPage = () => {
      const after = cursors[cursors.length - 1];
      return ts.get("api/jobs?" + scope() + "&prefix=" + encodeURIComponent(filters.prefix.value) +
                    (after == null ? "" : "&after=" + encodeURIComponent(after)) + (wantCount ? "&count=1" : ""));
    };
    let d = await fetchPage();
    while (!d.items.length && cursors.length > 1) { cursors.pop(); d = await fetchPage(); }  // its jobs were deleted
    if (wantCount) { total = d.total; wantCount = false; }
    const button = (r, a) => "<button data-action='" + a + "' data-name='" + ts.esc(r.name) + "'>" + a + "</button>";
    list.innerHTML = ts.table([["name", "name", r => "<a href='#jobs' data-open='" + ts.esc(r.name) + "'>" + ts.esc(r.name) + "</a>"],
      ["state", "state", r => r.status.paused ? "paused" : (r.status.finished ? "finished" : "active")],
      ["ok", "ok / failed", r => ts.esc(r.status.successful) + " / " + ts.esc(r.status.failed)],
      ["next", "next fires", r => ts.esc((r.status.next_fires || []).slice(0, 3).join(", "))],
      ["last", "last attempt", r => ts.esc(r.status.last_attempt ? r.status.last_attempt.outcome + " " + (r.status.last_attempt.ended_at || "") : "")],
      ["act", "", r => button(r, r.status.paused ? "resume" : "pause") + button(r, "trigger") + button(r, "delete")]], d.items, false, r => ({job: r.name}));
    list.prepend(pager(d));
    list.querySelectorAll("button[data-action]").forEach(b => b.onclick = () => act(b.dataset.action, b.dataset.name));
    list.querySelectorAll("a[data-open]").forEach(a => a.onclick = e => { e.preventDefault(); opened = a.dataset.open; renderDetail(); });
    await renderDetail();
  });
})();
