"use strict";
// Named jobs: one server page at a time, by cursor. cursors[i] is the "after" of page i + 1
// (null: the first page); forward pushes the answer's next, back pops. Filters start over.
(() => {
  let cursors = [null], total = null, wantCount = true, opened = null, timer = null;
  let filters = null, list = null, detail = null;
  const scope = () => "namespace=" + encodeURIComponent(filters.ns.value) + "&app_id=" + encodeURIComponent(filters.app.value);
  const secs = v => v == null ? "" : (v < 1 ? Math.round(v * 1000) + " ms" : v.toFixed(1) + " s");

  const failing = r => r.status.consecutive_failures > 0 || (r.status.last_attempt && r.status.last_attempt.outcome === "failed");

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
    // Failing only: jobs whose last attempt failed, or failing again and again (read page by page
    // on the server, at most 1000 definitions a request).
    const label = document.createElement("label");
    filters.failing = document.createElement("input");
    filters.failing.type = "checkbox"; filters.failing.id = "f-failing";
    filters.failing.onchange = restart;
    label.append(filters.failing, " failing only");
    bar.append(label);
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
    nav.append(d.failing
      ? "page " + cursors.length + " of the failing jobs (" + d.items.length + " here, " + d.scanned + " jobs read" +
        (d.next == null ? ", to the end" : "") + ") "
      : "page " + cursors.length + " (jobs " + (d.items.length ? first + "-" + (first + d.items.length - 1) : "none") +
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
    const fires = (s.next_fires || []).map(t => html`<li>${ts.time(t)}</li>`);
    ts.render(detail, html`<h2>${j.name} <button data-close>close</button></h2>
      <p class='muted'>${j.target} · ${j.schedule ? j.schedule : html`one-shot at ${ts.time(j.due)}`} · generation ${j.generation} · put ${ts.time(j.updated_at)}</p>
      ${s.paused ? html`<p class='paused'>paused since ${ts.time(s.paused_since)} by ${s.paused_by}${s.paused_note ? ": " + s.paused_note : ""}</p>` : ""}
      ${s.staged ? html`<p class='staged'>staged since ${ts.time(s.staged.since)}: waiting for ${s.staged.target}</p>` : ""}
      ${s.finished ? html`<p class='finished'>finished: nothing left to fire</p>` : ""}
      ${ts.table([["counter", "counter"], ["value", "value"]], counters.map(([k, v]) => ({counter: k, value: v})), false,
                 r => ({counter: r.counter}))}
      <h2>next fire times</h2><ul class='next-fires'>${fires.length ? fires : html`<li class='none'>none</li>`}</ul>
      ${s.current_attempt ? html`<p>running: attempt ${s.current_attempt.attempt} since ${ts.time(s.current_attempt.started_at)}</p>` : ""}
      <h2>recent attempts</h2>${ts.table([["scheduled_for", "scheduled for", r => ts.time(r.scheduled_for)],
        ["started", "started", r => ts.time(r.started)],
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
    filters.failing.checked = params.get("failing") === "1";
    cursors = params.get("after") ? [null, params.get("after")] : [null];
    opened = params.get("open"); total = null; wantCount = true;
  }

  ts.page("jobs", "Named jobs", async section => {
    if (!filters) { build(section); restore(ts.params()); }
    const fetchPage = () => {
      const after = cursors[cursors.length - 1];
      return ts.get("api/jobs?" + scope() + "&prefix=" + encodeURIComponent(filters.prefix.value) +
                    (after == null ? "" : "&after=" + encodeURIComponent(after)) +
                    (filters.failing.checked ? "&failing=1" : wantCount ? "&count=1" : ""));
    };
    let d = await fetchPage();
    if (d.failing) wantCount = false;
    while (!d.items.length && cursors.length > 1) { cursors.pop(); d = await fetchPage(); }  // its jobs were deleted
    if (wantCount) { total = d.total; wantCount = false; }
    const html = ts.html;
    const button = (r, a) => html`<button data-action='${a}' data-name='${r.name}'>${a}</button>`;
    ts.slot(list, "paging").replaceChildren(pager(d));
    const state = r => r.status.paused ? "paused" : r.status.finished ? "finished" : failing(r) ? "failing" : "active";
    // The last attempts' outcomes, oldest first: a failing streak shows at a glance.
    const strip = r => html`<span class='strip'>${(r.status.recent || []).slice().reverse().map(a =>
      html`<i data-outcome='${a.outcome}' title='${a.outcome + (a.triggered ? " (triggered)" : "") + " · " + (a.scheduled_for || "")}'></i>`)}</span>`;
    ts.render(ts.slot(list, "rows"), ts.table([["name", "name", r => html`<a href='#jobs' data-open='${r.name}'>${r.name}</a>`],
      ["schedule", "schedule", r => r.schedule ? r.schedule : html`once at ${ts.time(r.due, false)}`], ["target", "target"],
      ["state", "state", r => state(r)],
      ["recent", "recent attempts", strip],
      ["ok", "ok / failed", r => r.status.successful + " / " + r.status.failed],
      ["next", "next fire", r => ts.time((r.status.next_fires || [])[0])],
      ["last", "last attempt", r => r.status.last_attempt ? html`${r.status.last_attempt.outcome} ${ts.time(r.status.last_attempt.ended_at)}` : ""],
      ["act", "", r => [button(r, r.status.paused ? "resume" : "pause"), button(r, "trigger"), button(r, "delete")]]],
      d.items, false, r => ({job: r.name}),
      (d.failing ? "No failing jobs" + (d.next == null ? "" : " among these " + d.scanned + " (go on with >)") : "No named jobs") +
      " in namespace " + (filters.ns.value || "default") + ", app_id " + (filters.app.value || "default") +
      (filters.prefix.value ? " whose name starts with " + filters.prefix.value : "") + "."));
    list.querySelectorAll("td.state").forEach(td => { if (td.textContent === "failing") td.dataset.failing = ""; });
    list.querySelectorAll("button[data-action]").forEach(b => b.onclick = () => act(b.dataset.action, b.dataset.name));
    list.querySelectorAll("a[data-open]").forEach(a => a.onclick = e => { e.preventDefault(); opened = a.dataset.open; renderDetail(); });
    await renderDetail();
    ts.keep({ns: filters.ns.value, app: filters.app.value, prefix: filters.prefix.value, failing: filters.failing.checked ? "1" : "",
             after: cursors[cursors.length - 1], open: opened});
  }, params => restore(params));
})();
