"use strict";
// The dashboard's core: tabs, tables, pagers, fetch and the refresh loop. Each page's script
// registers itself with ts.page(id, title, render); render() fills the page's <section>.
const ts = (() => {
  const pages = [];
  let current = null;
  const $ = id => document.getElementById(id);
  const esc = v => String(v == null ? "" : v).replace(/[&<>"']/g, c => "&#" + c.charCodeAt(0) + ";");

  function page(id, title, render) { pages.push({id, title, render}); }

  // cols: [key, heading, optional cell renderer returning HTML]; each cell has class=key.
  // sortable adds data-sort to headings; rowData(r) gives a row's data-* attributes ({silo: "s0"}).
  function table(cols, rows, sortable, rowData) {
    let h = "<table><tr>" + cols.map(c => "<th" + (sortable ? " data-sort='" + c[0] + "'" : "") + ">" + esc(c[1]) + "</th>").join("") + "</tr>";
    for (const r of rows) {
      const data = rowData ? Object.entries(rowData(r)).map(([k, v]) => " data-" + k + "='" + esc(v) + "'").join("") : "";
      h += "<tr" + data + ">" + cols.map(c => "<td class='" + c[0] + "'>" + (c[2] ? c[2](r) : esc(r[c[0]])) + "</td>").join("") + "</tr>";
    }
    return h + "</table>";
  }

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

  async function get(url) {
    const r = await fetch(url, {credentials: "same-origin"});
    if (!r.ok) throw new Error(r.status + " " + await r.text());
    return r.json();
  }

  async function post(url) {
    const r = await fetch(url, {method: "POST", credentials: "same-origin"});
    return {ok: r.ok, body: r.ok ? await r.json() : await r.text()};
  }

  function say(text, error) { $("status").textContent = text; $("status").className = error ? "err" : "muted"; }

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
    }
    location.hash = p.id;
    refresh();
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
    show(pages.find(p => "#" + p.id === location.hash) || pages[0]);
    setInterval(refresh, 2000);
    document.addEventListener("visibilitychange", refresh);
  }

  return {$, esc, page, table, pager, get, post, say, refresh, start};
})();
