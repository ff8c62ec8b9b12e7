"use strict";
// Flows: a paged table of flows; opening one draws its DAG (svg#flow-dag), one box per step
// coloured by state with its attempts and next retry, and an arrow per dependency.
(() => {
  let page = 1, filters = null, list = null, detail = null, open = null;
  const STATES = ["running", "succeeded", "halted", "cancelled"];
  const COLOURS = {pending: "#e4e4e4", running: "#9cc4ff", retrying: "#ffd27a", succeeded: "#9ddc9d",
                   failed: "#f29c9c", cancelled: "#c8c8c8"};
  const BOX = {w: 180, h: 62, gapX: 64, gapY: 18, pad: 12};
  const when = iso => ts.time(iso);

  function build(section) {
    const bar = document.createElement("div");
    const state = document.createElement("select");
    state.id = "f-flow-state";
    for (const s of [""].concat(STATES)) state.add(new Option(s || "any state", s));
    const prefix = document.createElement("input");
    prefix.id = "f-flow-prefix"; prefix.placeholder = "name prefix";
    state.setAttribute("aria-label", "flow state"); prefix.setAttribute("aria-label", "flow name prefix");
    state.onchange = prefix.oninput = () => { page = 1; ts.refresh(); };
    bar.append(state, prefix);
    filters = {state, prefix};
    list = document.createElement("div");
    list.id = "flows-table";
    detail = document.createElement("div");
    detail.id = "flow-detail"; detail.hidden = true;
    section.append(bar, list, detail);
  }

  async function cancel(name) {
    const note = prompt("cancel flow " + name + "? No step starts any more; a running attempt finishes first. Why (optional):", "");
    if (note === null) return;
    const r = await ts.post("api/flows/" + encodeURIComponent(name) + "/cancel", note);
    ts.say("cancel " + name + ": " + (r.ok ? "done" : r.body), !r.ok);
    ts.refresh();
  }

  const cancelButton = f => f.state === "running"
    ? ts.html`<button data-flow-action='cancel' data-name='${f.name}'>cancel</button>` : "";

  // Layer of a step = length of the longest path from a root to it; within a layer, steps sit
  // near the mean row of their parents, so edges cross less. Steps are keyed in Maps: a step may
  // be named __proto__ or toString, which a plain object would read as its own machinery.
  function layout(steps) {
    const by = new Map(steps.map(s => [s.name, s]));
    const layer = new Map();
    const depth = (name, seen) => {
      if (layer.has(name)) return layer.get(name);
      if (seen.has(name) || !by.has(name)) return 0;  // a cycle or unknown name cannot come from the server
      seen.add(name);
      layer.set(name, Math.max(-1, ...by.get(name).depends_on.map(d => depth(d, seen))) + 1);
      return layer.get(name);
    };
    steps.forEach(s => depth(s.name, new Set()));
    const columns = [];
    steps.forEach(s => (columns[layer.get(s.name)] = columns[layer.get(s.name)] || []).push(s));
    const row = new Map();
    for (const column of columns.filter(Boolean)) {
      const mean = s => s.depends_on.length ? s.depends_on.reduce((t, d) => t + (row.get(d) || 0), 0) / s.depends_on.length : 0;
      column.map((s, i) => [mean(s), i, s]).sort((a, b) => a[0] - b[0] || a[1] - b[1]).forEach(([, , s], i) => { row.set(s.name, i); });
    }
    const place = new Map();
    for (const s of steps) {
      place.set(s.name, {x: BOX.pad + layer.get(s.name) * (BOX.w + BOX.gapX), y: BOX.pad + row.get(s.name) * (BOX.h + BOX.gapY)});
    }
    const tallest = Math.max(1, ...columns.map(c => c ? c.length : 0));
    return {place, width: 2 * BOX.pad + columns.length * (BOX.w + BOX.gapX) - BOX.gapX,
            height: 2 * BOX.pad + tallest * (BOX.h + BOX.gapY) - BOX.gapY};
  }

  function retryText(s) {
    if (!s.next_retry) return "";
    const secs = Math.round((new Date(s.next_retry) - Date.now()) / 1000);
    return "retry " + (secs > 0 ? ts.fromNow(new Date(s.next_retry).getTime()) : "due");
  }

  function draw(svg, flow) {
    const {place, width, height} = layout(flow.steps);
    const html = ts.html;
    svg.setAttribute("width", width); svg.setAttribute("height", height);
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    const edges = [], boxes = [];
    for (const s of flow.steps) {
      for (const d of s.depends_on) {
        const a = place.get(d), b = place.get(s.name);
        if (!a || !b) continue;
        const x1 = a.x + BOX.w, y1 = a.y + BOX.h / 2, x2 = b.x, y2 = b.y + BOX.h / 2, mid = (x1 + x2) / 2;
        // The curve, then its arrowhead drawn in the same path (no <marker>, which the page would have to reference by URL).
        const path = "M" + x1 + "," + y1 + " C" + mid + "," + y1 + " " + mid + "," + y2 + " " + x2 + "," + y2 +
          " M" + (x2 - 8) + "," + (y2 - 5) + " L" + x2 + "," + y2 + " L" + (x2 - 8) + "," + (y2 + 5);
        edges.push(html`<path class='edge' data-from='${d}' data-to='${s.name}' d='${path}' fill='none' stroke='#667' stroke-width='1.5'/>`);
      }
    }
    for (const s of flow.steps) {
      const p = place.get(s.name);
      const tip = [s.name + ": " + s.state, "job " + s.job_id + (s.shard ? " in " + s.shard : ""), s.started_at && "started " + ts.timeText(s.started_at),
                   s.ended_at && "ended " + ts.timeText(s.ended_at), s.error && "error: " + s.error].filter(Boolean).join("\n");
      const fill = Object.hasOwn(COLOURS, s.state) ? COLOURS[s.state] : "#fff";
      boxes.push(html`<g class='step' data-step='${s.name}' data-state='${s.state}' transform='translate(${p.x},${p.y})' font-size='12'>${[
        html`<title>${tip}</title><rect width='${BOX.w}' height='${BOX.h}' rx='6' fill='${fill}' stroke='#556'/>`,
        html`<text class='name' x='8' y='17' font-weight='bold'>${s.name}</text>`,
        html`<text class='state' x='8' y='34'>${s.state} · attempts ${s.attempts}</text>`,
        html`<text class='retry' x='8' y='51'>${retryText(s)}</text>`]}</g>`);
    }
    ts.render(svg, html`${edges}${boxes}`);
  }

  async function showFlow() {
    const html = ts.html;
    let flow;
    try {
      flow = await ts.get("api/flows/" + encodeURIComponent(open));
    } catch (e) {
      ts.render(detail, html`<h2>${open}</h2><p class='err'>${e.message}</p>`);
      return;
    }
    if (!detail.querySelector("svg#flow-dag")) {
      ts.render(detail, html`<h2></h2><p class='flow-head'></p><div class='dag'><svg id='flow-dag'></svg></div><div class='flow-steps'></div>`);
    }
    detail.querySelector("h2").textContent = "Flow " + flow.name;
    ts.render(detail.querySelector(".flow-head"), html`state <b class='state'>${flow.state}</b>${
      flow.halted_by ? " · halted by " + flow.halted_by : ""} · created ${when(flow.created_at)}${
      flow.ended_at ? html` · ended ${when(flow.ended_at)}` : ""} · ${flow.steps_done}/${flow.steps_total} steps done ${
      cancelButton(flow)}<button data-flow-action='close'>close</button>`);
    draw(detail.querySelector("svg#flow-dag"), flow);
    ts.render(detail.querySelector(".flow-steps"), ts.table([["name", "step"], ["state", "state"], ["attempts", "attempts"],
      ["next_retry", "next retry", s => when(s.next_retry)], ["started_at", "started", s => when(s.started_at)],
      ["ended_at", "ended", s => when(s.ended_at)], ["depends_on", "depends on", s => s.depends_on.join(", ")],
      ["error", "error"], ["job_id", "job id", jobLink]], flow.steps, false, s => ({"flow-step": s.name})));
    wire(detail);
  }

  // A step's job lives in a shard: the link opens the shards page on that one shard.
  function jobLink(s) {
    return s.shard ? ts.html`<a href='#shards?name=${encodeURIComponent(s.shard)}' data-job-shard='${s.shard}'
      title='in shard ${s.shard}'>${s.job_id}</a>` : s.job_id;
  }

  function wire(root) {
    root.querySelectorAll("a[data-open-flow]").forEach(a => a.onclick = ev => {
      ev.preventDefault(); open = a.dataset.openFlow; detail.hidden = false; ts.refresh();
    });
    root.querySelectorAll("button[data-flow-action='cancel']").forEach(b => b.onclick = () => cancel(b.dataset.name));
    root.querySelectorAll("button[data-flow-action='close']").forEach(b => b.onclick = () => {
      open = null; detail.hidden = true; detail.replaceChildren();
    });
  }

  // In the address: state, prefix, page and open (the flow whose DAG shows).
  function restore(params) {
    filters.state.value = STATES.includes(params.get("state")) ? params.get("state") : "";
    filters.prefix.value = params.get("prefix") || "";
    page = Math.max(1, parseInt(params.get("page"), 10) || 1);
    open = params.get("open");
    detail.hidden = open === null;
    if (open === null) detail.replaceChildren();
  }

  ts.page("flows", "Flows", async section => {
    if (!filters) { build(section); restore(ts.params()); }
    const d = await ts.get("api/flows?state=" + encodeURIComponent(filters.state.value) +
      "&prefix=" + encodeURIComponent(filters.prefix.value) + "&page=" + page);
    const html = ts.html;
    ts.slot(list, "paging").replaceChildren(ts.pager(d, step => { page += step; ts.refresh(); }));
    ts.render(ts.slot(list, "rows"), ts.table([
      ["name", "name", f => html`<a href='#flows' data-open-flow='${f.name}'>${f.name}</a>`],
      ["state", "state"], ["created_at", "created", f => when(f.created_at)],
      ["ended_at", "ended", f => when(f.ended_at)], ["halted_by", "halted by"],
      ["steps", "steps done", f => f.steps_done + " / " + f.steps_total],
      ["act", "", cancelButton]], d.items, false, f => ({flow: f.name}),
      "No flows" + (filters.state.value ? " in state " + filters.state.value : "") +
      (filters.prefix.value ? " whose name starts with " + filters.prefix.value : "") + "."));
    // A flow whose log cannot be read: named, never hiding the rest.
    ts.render(ts.slot(list, "damaged"), d.damaged && d.damaged.length
      ? html`<h2 class='err'>Damaged flow logs</h2><ul id='flows-damaged'>${
        d.damaged.map(f => html`<li data-flow-damaged='${f.name}'><b>${f.name}</b> ${f.reason}</li>`)}</ul>` : html``);
    wire(list);
    if (open !== null) await showFlow();
    ts.keep({state: filters.state.value, prefix: filters.prefix.value, page: page === 1 ? "" : page, open});
  }, params => restore(params));
})();
