"use strict";
// Flows: a paged table of flows; opening one draws its DAG (svg#flow-dag), one box per step
// coloured by state with its attempts and next retry, and an arrow per dependency.
(() => {
  let page = 1, filters = null, list = null, detail = null, open = null;
  const STATES = ["running", "succeeded", "halted", "cancelled"];
  const COLOURS = {pending: "#e4e4e4", running: "#9cc4ff", retrying: "#ffd27a", succeeded: "#9ddc9d",
                   failed: "#f29c9c", cancelled: "#c8c8c8"};
  const BOX = {w: 180, h: 62, gapX: 64, gapY: 18, pad: 12};
  const when = iso => iso ? new Date(iso).toLocaleString() : "";

  function build(section) {
    const bar = document.createElement("div");
    const state = document.createElement("select");
    state.id = "f-flow-state";
    for (const s of [""].concat(STATES)) state.add(new Option(s || "any state", s));
    const prefix = document.createElement("input");
    prefix.id = "f-flow-prefix"; prefix.placeholder = "name prefix";
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
    if (!confirm("cancel flow " + name + "? No step starts any more; a running attempt finishes first.")) return;
    const r = await ts.post("api/flows/" + encodeURIComponent(name) + "/cancel");
    ts.say("cancel " + name + ": " + (r.ok ? "done" : r.body), !r.ok);
    ts.refresh();
  }

  const cancelButton = f => f.state === "running"
    ? "<button data-flow-action='cancel' data-name='" + ts.esc(f.name) + "'>cancel</button>" : "";

  // Layer of a step = length of the longest path from a root to it; within a layer, steps sit
  // near the mean row of their parents, so edges cross less.
  function layout(steps) {
    const by = Object.fromEntries(steps.map(s => [s.name, s]));
    const layer = {};
    const depth = (name, seen) => {
      if (name in layer) return layer[name];
      if (seen.has(name) || !by[name]) return 0;  // a cycle or unknown name cannot come from the server
      seen.add(name);
      layer[name] = Math.max(-1, ...by[name].depends_on.map(d => depth(d, seen))) + 1;
      return layer[name];
    };
    steps.forEach(s => depth(s.name, new Set()));
    const columns = [];
    steps.forEach(s => (columns[layer[s.name]] = columns[layer[s.name]] || []).push(s));
    const row = {};
    for (const column of columns) {
      const mean = s => s.depends_on.length ? s.depends_on.reduce((t, d) => t + row[d], 0) / s.depends_on.length : 0;
      column.map((s, i) => [mean(s), i, s]).sort((a, b) => a[0] - b[0] || a[1] - b[1]).forEach(([, , s], i) => { row[s.name] = i; });
    }
    const place = {};
    for (const s of steps) {
      place[s.name] = {x: BOX.pad + layer[s.name] * (BOX.w + BOX.gapX), y: BOX.pad + row[s.name] * (BOX.h + BOX.gapY)};
    }
    const tallest = Math.max(1, ...columns.map(c => c.length));
    return {place, width: 2 * BOX.pad + columns.length * (BOX.w + BOX.gapX) - BOX.gapX,
            height: 2 * BOX.pad + tallest * (BOX.h + BOX.gapY) - BOX.gapY};
  }

  function retryText(s) {
    if (!s.next_retry) return "";
    const secs = Math.round((new Date(s.next_retry) - Date.now()) / 1000);
    return "retry " + new Date(s.next_retry).toLocaleTimeString() + (secs > 0 ? " (in " + secs + "s)" : "");
  }

  function draw(svg, flow) {
    const {place, width, height} = layout(flow.steps);
    svg.setAttribute("width", width); svg.setAttribute("height", height);
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    let h = "";
    for (const s of flow.steps) {
      for (const d of s.depends_on) {
        const a = place[d], b = place[s.name];
        if (!a || !b) continue;
        const x1 = a.x + BOX.w, y1 = a.y + BOX.h / 2, x2 = b.x, y2 = b.y + BOX.h / 2, mid = (x1 + x2) / 2;
        // The curve, then its arrowhead drawn in the same path (no <marker>, which the page would have to reference by URL).
        h += "<path class='edge' data-from='" + ts.esc(d) + "' data-to='" + ts.esc(s.name) + "' d='M" + x1 + "," + y1 +
          " C" + mid + "," + y1 + " " + mid + "," + y2 + " " + x2 + "," + y2 +
          " M" + (x2 - 8) + "," + (y2 - 5) + " L" + x2 + "," + y2 + " L" + (x2 - 8) + "," + (y2 + 5) + "' fill='none' stroke='#667' stroke-width='1.5'/>";
      }
    }
    for (const s of flow.steps) {
      const p = place[s.name];
      const tip = [s.name + ": " + s.state, "job " + s.job_id, s.started_at && "started " + when(s.started_at),
                   s.ended_at && "ended " + when(s.ended_at), s.error && "error: " + s.error].filter(Boolean).join("\n");
      h += "<g class='step' data-step='" + ts.esc(s.name) + "' data-state='" + ts.esc(s.state) + "' transform='translate(" + p.x + "," + p.y + ")' font-size='12'>" +
        "<title>" + ts.esc(tip) + "</title>" +
        "<rect width='" + BOX.w + "' height='" + BOX.h + "' rx='6' fill='" + (COLOURS[s.state] || "#fff") + "' stroke='#556'/>" +
        "<text class='name' x='8' y='17' font-weight='bold'>" + ts.esc(s.name) + "</text>" +
        "<text class='state' x='8' y='34'>" + ts.esc(s.state) + " · attempts " + ts.esc(s.attempts) + "</text>" +
        "<text class='retry' x='8' y='51'>" + ts.esc(retryText(s)) + "</text></g>";
    }
    svg.innerHTML = h;
  }

  async function showFlow() {
    let flow;
    try {
      flow = await ts.get("api/flows/" + encodeURIComponent(open));
    } catch (e) {
      detail.innerHTML = "<h2>" + ts.esc(open) + "</h2><p class='err'>" + ts.esc(e.message) + "</p>";
      return;
    }
    if (!detail.querySelector("svg#flow-dag")) {
      detail.innerHTML = "<h2></h2><p class='flow-head'></p><div class='dag'><svg id='flow-dag'></svg></div><div class='flow-steps'></div>";
    }
    detail.querySelector("h2").textContent = "Flow " + flow.name;
    const head = detail.querySelector(".flow-head");
    head.innerHTML = "state <b class='state'>" + ts.esc(flow.state) + "</b>" +
      (flow.halted_by ? " · halted by " + ts.esc(flow.halted_by) : "") + " · created " + ts.esc(when(flow.created_at)) +
      (flow.ended_at ? " · ended " + ts.esc(when(flow.ended_at)) : "") + " · " + flow.steps_done + "/" + flow.steps_total + " steps done " +
      cancelButton(flow) + "<button data-flow-action='close'>close</button>";
    draw(detail.querySelector("svg#flow-dag"), flow);
    detail.querySelector(".flow-steps").innerHTML = ts.table([["name", "step"], ["state", "state"], ["attempts", "attempts"],
      ["next_retry", "next retry", s => ts.esc(when(s.next_retry))], ["started_at", "started", s => ts.esc(when(s.started_at))],
      ["ended_at", "ended", s => ts.esc(when(s.ended_at))], ["depends_on", "depends on", s => ts.esc(s.depends_on.join(", "))],
      ["error", "error"], ["job_id", "job id"]], flow.steps, false, s => ({"flow-step": s.name}));
    wire(detail);
  }

  function wire(root) {
    root.querySelectorAll("a[data-open-flow]").forEach(a => a.onclick = ev => {
      ev.preventDefault(); open = a.dataset.openFlow; detail.hidden = false; ts.refresh();
    });
    root.querySelectorAll("button[data-flow-action='cancel']").forEach(b => b.onclick = () => cancel(b.dataset.name));
    root.querySelectorAll("button[data-flow-action='close']").forEach(b => b.onclick = () => {
      open = null; detail.hidden = true; detail.innerHTML = "";
    });
  }

  ts.page("flows", "Flows", async section => {
    if (!filters) build(section);
    const d = await ts.get("api/flows?state=" + encodeURIComponent(filters.state.value) +
      "&prefix=" + encodeURIComponent(filters.prefix.value) + "&page=" + page);
    list.innerHTML = ts.table([
      ["name", "name", f => "<a href='#flows' data-open-flow='" + ts.esc(f.name) + "'>" + ts.esc(f.name) + "</a>"],
      ["state", "state"], ["created_at", "created", f => ts.esc(when(f.created_at))],
      ["ended_at", "ended", f => ts.esc(when(f.ended_at))], ["halted_by", "halted by"],
      ["steps", "steps done", f => ts.esc(f.steps_done + " / " + f.steps_total)],
      ["act", "", cancelButton]], d.items, false, f => ({flow: f.name}));
    if (d.damaged && d.damaged.length) {  // a flow whose log cannot be read: named, never hiding the rest
      list.insertAdjacentHTML("beforeend", "<h2 class='err'>Damaged flow logs</h2><ul id='flows-damaged'>" +
        d.damaged.map(f => "<li data-flow-damaged='" + ts.esc(f.name) + "'><b>" + ts.esc(f.name) + "</b> " + ts.esc(f.reason) + "</li>").join("") +
        "</ul>");
    }
    list.prepend(ts.pager(d, step => { page += step; ts.refresh(); }));
    wire(list);
    if (open !== null) await showFlow();
  });
})();
