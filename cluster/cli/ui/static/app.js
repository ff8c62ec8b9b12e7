"use strict";
// The dashboard's core: tabs, tables, pagers, fetch and the refresh loop. Each page's script
// registers itself with ts.page(id, title, render); render() fills the page's <section>.
//
// Markup is built only with the html`...` template: every value it interpolates is escaped unless
// it is itself markup that html`...` built. ts.render(element, markup) is the one place markup
// reaches the document, and it refuses anything else (a string built by hand), so a name such as
// <img src=x onerror=...> renders as text by construction, not by remembering to escape it.
const ts = (() => {
  const pages = [];
  let current = null;
  const $ = id => document.getElementById(id);
  const TIMEOUT_MS = 10000;  // a cluster that does not answer in this long is shown as such
  const csrf = (document.querySelector("meta[name='timeshard-csrf']") || {}).content || "";

  const esc = v => String(v == null ? "" : v).replace(/[&<>"'`=]/g, c => "&#" + c.charCodeAt(0) + ";");
  // Markup html`...` built; only this module can make one.
  // Joining markup with + would turn it into a string (and escape it): that mistake throws at once.
  class Html {
    constructor(text) { this.text = text; Object.freeze(this); }
    toString() { throw new TypeError("markup joined with +: put it inside html`...` instead"); }
  }
  const piece = v => v instanceof Html ? v.text : Array.isArray(v) ? v.map(piece).join("") : esc(v);
  function html(strings, ...values) {
    let out = strings[0];
    values.forEach((v, i) => { out += piece(v) + strings[i + 1]; });
    return new Html(out);
  }
  // Refreshes update in place: markup equal to what the element shows leaves it alone; text the
  // user is selecting in it stays until the selection ends; the focused control (known by its
  // data-* attributes) has the focus back after a redraw. Returns whether it redrew.
  const shown = new WeakMap();
  function render(element, markup) {
    if (!(markup instanceof Html)) throw new TypeError("ts.render takes markup built by html`...`, not " + typeof markup);
    const last = shown.get(element);
    if (last && last.text === markup.text && last.first === element.firstChild) return false;
    const selection = document.getSelection();
    if (last && selection && !selection.isCollapsed && element.contains(selection.anchorNode)) return false;
    const focused = focusKey(element);
    element.innerHTML = markup.text;
    shown.set(element, {text: markup.text, first: element.firstChild});
    const again = focused && element.querySelector(focused);
    if (again) again.focus();
    return true;
  }
  function focusKey(element) {
    const active = document.activeElement;
    if (!active || active === element || !element.contains(active)) return null;
    const data = [...active.attributes].filter(a => a.name.startsWith("data-"));
    return data.length ? active.localName + data.map(a => "[" + a.name + "=\"" + CSS.escape(a.value) + "\"]").join("") : null;
  }
  // The child of parent with class name, made (in call order) the first time: a part of a page
  // (its pager, its rows) that refreshes on its own.
  function slot(parent, name) {
    let found = [...parent.children].find(c => c.classList.contains(name));
    if (!found) { found = document.createElement("div"); found.className = name; parent.append(found); }
    return found;
  }

  // One time style everywhere: local or UTC (the header's switch, remembered by the browser), with
  // how far from now. As <time datetime=ISO>, its title the other zone.
  let zone = localStorage.getItem("timeshard-zone") === "utc" ? "utc" : "local";
  const pad = n => String(n).padStart(2, "0");
  function fromNow(ms) {
    const s = Math.round((ms - Date.now()) / 1000), a = Math.abs(s);
    if (a < 1) return "now";
    const text = a < 60 ? a + " s" : a < 5400 ? Math.round(a / 60) + " min" : a < 129600 ? Math.round(a / 3600) + " h" : Math.round(a / 86400) + " d";
    return s > 0 ? "in " + text : text + " ago";
  }
  function stamp(d, utc) {
    const p = utc ? [d.getUTCFullYear(), d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds()]
                  : [d.getFullYear(), d.getMonth() + 1, d.getDate(), d.getHours(), d.getMinutes(), d.getSeconds()];
    return p[0] + "-" + pad(p[1]) + "-" + pad(p[2]) + " " + pad(p[3]) + ":" + pad(p[4]) + ":" + pad(p[5]) + (utc ? " UTC" : "");
  }
  // The same as plain text (for a tooltip).
  function timeText(value) {
    const d = value instanceof Date ? value : new Date(value);
    return value == null || value === "" || isNaN(d.getTime()) ? "" : stamp(d, zone === "utc") + " (" + fromNow(d.getTime()) + ")";
  }
  // value: ISO text, a Date or ms since the epoch; relative: add "(in 5 min)" / "(3 h ago)".
  function time(value, relative = true) {
    if (value == null || value === "") return html``;
    const d = value instanceof Date ? value : new Date(value);
    if (isNaN(d.getTime())) return html`${value}`;
    const shown = stamp(d, zone === "utc") + (relative ? " (" + fromNow(d.getTime()) + ")" : "");
    return html`<time datetime='${d.toISOString()}' title='${stamp(d, zone !== "utc")}'>${shown}</time>`;
  }
  function showZone() { $("zone").textContent = "times: " + (zone === "utc" ? "UTC" : "local"); }

  // restore(params), when given, sets the page's state (filters, page, what is open) from the address.
  function page(id, title, render, restore) { pages.push({id, title, render, restore}); }

  // State in the address: #TAB?key=value&..., so a link can be shared and survives a reload.
  function hashParts() {
    const h = location.hash.slice(1), i = h.indexOf("?");
    return i < 0 ? [h, ""] : [h.slice(0, i), h.slice(i + 1)];
  }
  const params = () => new URLSearchParams(hashParts()[1]);
  let written = null;  // the address this page wrote last: its own hashchange is not a navigation
  function keep(values) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(values)) if (v != null && v !== "") q.set(k, v);
    const text = "#" + current.id + (q.toString() ? "?" + q : "");
    if (text !== location.hash) { written = text; history.replaceState(null, "", text); }
  }

  // cols: [key, heading, optional cell renderer returning html`...` or a value]; each cell has class=key.
  // sortable adds data-sort to headings; rowData(r) gives a row's data-* attributes ({silo: "s0"});
  // empty says in words why there is no row (one cell across the table).
  // sortable: the current sort ("jobs", "-jobs"), which sets aria-sort; each heading is a button.
  function table(cols, rows, sortable, rowData, empty) {
    const order = c => typeof sortable !== "string" ? "none" : sortable === c ? "ascending" : sortable === "-" + c ? "descending" : "none";
    const head = cols.map(c => sortable
      ? html`<th data-sort='${c[0]}' aria-sort='${order(c[0])}'><button type='button' class='sort'>${c[1]}</button></th>`
      : html`<th>${c[1]}</th>`);
    if (!rows.length && empty) {
      return html`<table><tr>${head}</tr><tr class='empty'><td class='none muted' colspan='${cols.length}'>${empty}</td></tr></table>`;
    }
    const body = rows.map(r => {
      const data = rowData ? Object.entries(rowData(r)).map(([k, v]) => html` data-${attr(k)}='${v}'`) : [];
      return html`<tr${data}>${cols.map(c => html`<td class='${c[0]}'>${c[2] ? c[2](r) : r[c[0]]}</td>`)}</tr>`;
    });
    return html`<table><tr>${head}</tr>${body}</table>`;
  }
  // A data-* attribute's name: letters, digits and dashes only (the names are ours, never a user's).
  const attr = name => { if (!/^[a-z][a-z0-9-]*$/.test(name)) throw new Error("bad attribute " + name); return new Html(name); };

  // A pager for a server page {page, pages, total}; its buttons call move(-1) / move(1).
  function pager(p, move) {
    const nav = document.createElement("p");
    nav.className = "pager";
    nav.append("page " + p.page + " of " + p.pages + " (" + p.total + ") ");
    for (const [step, label, show] of [[-1, "<", p.page > 1], [1, ">", p.page < p.pages]]) {
      if (!show) continue;
      const b = document.createElement("button");
      b.textContent = label;
      b.onclick = () => move(step);
      nav.append(b);
    }
    return nav;
  }

  // A request that gives up after TIMEOUT_MS: a dead cluster must not look alive.
  async function call(url, options) {
    try {
      return await fetch(url, {credentials: "same-origin", signal: AbortSignal.timeout(TIMEOUT_MS), ...options});
    } catch (e) {
      if (e.name === "TimeoutError" || e.name === "AbortError") throw new Error("no answer within " + TIMEOUT_MS / 1000 + " s");
      throw new Error("cannot reach the dashboard: " + e.message);
    }
  }

  // An error's reason: the server says it in {"error": ...}.
  async function reason(r) {
    const text = await r.text();
    try { return r.status + " " + (JSON.parse(text).error || text); } catch (e) { return r.status + " " + text; }
  }

  async function get(url) {
    const r = await call(url, {});
    if (!r.ok) throw new Error(await reason(r));
    return r.json();
  }

  // A state-changing request: the anti-forgery header proves it comes from this page; note says why.
  async function post(url, note) {
    try {
      const r = await call(url, {method: "POST", headers: {"Content-Type": "application/json", "X-Timeshard-CSRF": csrf},
                                 body: JSON.stringify(note ? {note} : {})});
      return {ok: r.ok, body: r.ok ? await r.json() : await reason(r)};
    } catch (e) { return {ok: false, body: e.message}; }
  }

  function say(text, error) { $("status").textContent = text; $("status").className = error ? "err" : "muted"; }

  // Stale: nothing has answered for STALE_MS (a refresh that failed, or one still waiting). A
  // banner says since when, and every action button is disabled: a dead cluster must not look
  // alive with working buttons. The next good refresh re-renders the page and lifts both.
  const STALE_MS = TIMEOUT_MS;
  let lastGood = Date.now(), stale = false;
  const ACTIONS = "button[data-action], button[data-flow-action='cancel']";
  function watch() {
    const since = Date.now() - lastGood;
    stale = since >= STALE_MS;
    $("stale").hidden = !stale;
    if (stale) {
      $("stale").textContent = "No answer for " + Math.round(since / 1000) + " s (last update " +
        new Date(lastGood).toLocaleTimeString() + "): what you see may be out of date, and actions are disabled.";
    }
    document.body.classList.toggle("is-stale", stale);
    document.querySelectorAll(ACTIONS).forEach(b => { b.disabled = stale; });
  }
  function fresh() { lastGood = Date.now(); watch(); }

  // One refresh at a time: a tick or a click during one asks for one more right after it, so a
  // slow server never sees requests pile up behind each other.
  let running = false, again = false;
  async function refresh() {
    if (document.hidden) return;  // a tab in the background costs the silos nothing
    if (running) { again = true; return; }
    running = true;
    try {
      do {
        again = false;
        try {
          await current.render($(current.id));
          fresh();
          say("updated " + new Date().toLocaleTimeString());
        } catch (e) { say(String(e), true); }
      } while (again);
    } finally { running = false; }
  }

  function show(p) {
    current = p;
    for (const q of pages) {
      $(q.id).hidden = q !== p;
      $("tab-" + q.id).classList.toggle("on", q === p);
      $("tab-" + q.id).setAttribute("aria-selected", String(q === p));
    }
    if (hashParts()[0] !== p.id) { written = "#" + p.id; location.hash = p.id; }
    refresh();
  }

  // Back, forward, or a link pasted into this tab: show what the address names.
  function navigated() {
    if (location.hash === written) return;
    written = location.hash;
    const p = pages.find(q => q.id === hashParts()[0]) || pages[0];
    if (p.restore && $(p.id).childElementCount) p.restore(params());
    if (p !== current) show(p); else refresh();
  }

  function start() {
    for (const p of pages) {
      const b = document.createElement("button");
      b.id = "tab-" + p.id; b.dataset.tab = p.id; b.textContent = p.title; b.onclick = () => show(p);
      $("tabs").append(b);
      const s = document.createElement("section");
      s.id = p.id; s.hidden = true;
      $("pages").append(s);
    }
    showZone();
    $("zone").onclick = () => {
      zone = zone === "utc" ? "local" : "utc";
      localStorage.setItem("timeshard-zone", zone);
      showZone(); refresh();
    };
    written = location.hash;
    show(pages.find(p => p.id === hashParts()[0]) || pages[0]);
    window.addEventListener("hashchange", navigated);
    setInterval(refresh, 2000);
    setInterval(watch, 1000);
    document.addEventListener("visibilitychange", () => { if (!document.hidden) lastGood = Math.max(lastGood, Date.now() - 2000); refresh(); });
    get("api/about").then(a => {
      $("where").textContent = [a.namespace && "namespace " + a.namespace, a.ray_address && "Ray " + a.ray_address].filter(Boolean).join(" · ");
    }, () => {});
  }

  const isStale = () => stale;
  return {$, html, render, slot, page, table, pager, get, post, say, refresh, start, isStale, params, keep, time, timeText, fromNow};
})();
