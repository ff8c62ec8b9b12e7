"use strict";
// Overview: silos, live charts of fires per second and lateness p50/p99, alerts. The page is built
// once; every refresh rewrites the table, each chart's <svg> and the alerts list in place.
(() => {
  const CHARTS = [["fires_per_s", "fires / s", ""], ["lateness_p50_ms", "lateness p50", " ms"],
    ["lateness_p99_ms", "lateness p99", " ms"]];
  const W = 360, H = 140, L = 48, R = 8, T = 10, B = 22;  // the plot sits inside these margins
  let parts = null;

  function build(section) {
    const html = ts.html;
    ts.render(section, html`<h2>Alerts</h2><ul id='alerts'></ul><h2>Activity</h2><div class='charts'>${
      CHARTS.map(([m, title]) => html`<figure><figcaption>${title}</figcaption><svg class='chart' data-metric='${m}' viewBox='0 0 ${W} ${H}' role='img' aria-label='${title}'></svg></figure>`)
      }</div><h2>Silos <span id='silo-count' class='muted'></span></h2><div id='silos'></div>`);
    parts = {alerts: ts.$("alerts"), silos: ts.$("silos"), count: ts.$("silo-count"),
      charts: section.querySelectorAll("svg.chart")};
  }

  const short = v => Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2);
  const span = s => s >= 90 ? Math.round(s / 60) + " min" : Math.round(s) + " s";

  // One metric over time: a line broken where a point has no value, y from 0 (or the min) to the max.
  function draw(svg, points, metric, unit, keep) {
    const now = points.length ? points[points.length - 1].t : Date.now() / 1000;
    const values = points.map(p => p[metric]).filter(v => v != null);
    const lo = Math.min(0, ...values), hi = Math.max(lo + 1e-9, ...values);
    const first = points.length ? now - points[0].t : 0;
    // The x axis spans the data (at least a minute) until it fills the kept window: a dashboard
    // opened a minute ago draws a line, not a dot at the right edge.
    const width = Math.min(keep, Math.max(60, first));
    const x = t => L + (W - L - R) * (1 - (now - t) / width), y = v => H - B - (H - T - B) * (v - lo) / (hi - lo);
    let d = "", pen = "M";
    for (const p of points) {
      const v = p[metric];
      if (v == null || now - p.t > width) { pen = "M"; continue; }
      d += pen + x(p.t).toFixed(1) + " " + y(v).toFixed(1) + " "; pen = "L";
    }
    const html = ts.html;
    ts.render(svg, html`<line class='axis' x1='${L}' y1='${H - B}' x2='${W - R}' y2='${H - B}'/>${[
      html`<line class='axis' x1='${L}' y1='${T}' x2='${L}' y2='${H - B}'/>`,
      html`<text class='max' x='${L - 4}' y='${T + 8}' text-anchor='end'>${values.length ? short(hi) + unit : "–"}</text>`,
      html`<text class='min' x='${L - 4}' y='${H - B}' text-anchor='end'>${values.length ? short(lo) + unit : ""}</text>`,
      html`<text class='span' x='${L}' y='${H - 6}'>−${span(width)}</text>`,
      html`<text class='span' x='${W - R}' y='${H - 6}' text-anchor='end'>now${points.length ? "" : ": no data yet"}</text>`,
      d ? html`<path class='line' d='${d.trim()}'/>` : ""]}`);
  }

  ts.page("overview", "Overview", async section => {
    const d = await ts.get("api/overview");
    if (!parts || !section.contains(parts.alerts)) build(section);
    const html = ts.html;
    ts.render(parts.alerts, d.alerts.length
      ? html`${d.alerts.map(a => html`<li data-kind='${a.kind}' class='err'><b>${a.kind}</b> ${a.silo}${
          a.shard ? html` · <a href='#shards?name=${encodeURIComponent(a.shard)}' data-shard-link='${a.shard}'>${a.shard}</a>` : ""}: ${a.message}</li>`)}`
      : html`<li class='none muted'>all is well</li>`);
    // Target versus live: live counts the silos that answered this reading; the target is the keeper's.
    const k = d.keeping;
    parts.count.textContent = !k ? "" : k.target == null ? `${k.live} live, no keeper`
      : `${k.live} live, target ${k.target}`;
    parts.count.className = k && k.target != null && k.live < k.target ? "err" : "muted";
    for (const svg of parts.charts) {
      const [metric, , unit] = CHARTS.find(c => c[0] === svg.dataset.metric);
      draw(svg, d.series.points, metric, unit, d.series.keep_s);
    }
    ts.render(parts.silos, ts.table([
      ["silo_id", "silo"], ["incarnation", "incarnation"],
      ["node", "node", r => html`<span title='${r.node}'>${String(r.node || "").slice(0, 12)}</span>`], ["lease_age", "lease age (s)"],
      ["queued", "queued"], ["inflight", "in flight"], ["staged", "staged"],
      ["shards", "shards", r => r.silo_id == null ? r.shards : html`<a href='#shards?silo=${encodeURIComponent(r.silo_id)}' data-silo-link='${r.silo_id}'>${r.shards}</a>`],
      ["quarantined", "quarantined", r => r.quarantined.join(", ")],
      ["clock_late_ms", "clock: late up to (ms)", r => r.clock_late_ms == null ? "–"
        : html`<span title='${r.clock_store === "shared" ? "the store's clock is this host's"
          : `store − host in [${r.clock_offset_ms[0]}, ${r.clock_offset_ms[1]}] ms: jobs fire by the low end, so up to the width late${r.clock_timed_by ? ` (flight timed by: ${r.clock_timed_by})` : ""}`}'>${r.clock_late_ms.toFixed(2)}</span>`],
      ["error", "error", r => html`<span class='err'>${r.error}</span>`]], d.silos, false, r => ({silo: r.silo_id}),
      "No silo found in this namespace: are the silos running (timeshard up), under this --namespace?"));
  });
})();
