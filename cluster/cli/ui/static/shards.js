"use strict";
// Shards: loaded and dormant ones apart, each table sorted and paged on the server.
(() => {
  const lists = [{id: "shards-loaded", title: "Loaded", loaded: "true", sort: "name", page: 1},
    {id: "shards-dormant", title: "Dormant", loaded: "false", sort: "name", page: 1}];
  // Windows are microseconds since the epoch (UTC).
  const when = us => us == null ? "" : ts.time(new Date(us / 1000), false);
  const COLS = [["name", "shard"], ["window_start", "window", r => ts.html`${when(r.window_start)} – ${when(r.window_end)}`],
    ["owner", "owner"], ["state", "state"], ["jobs", "jobs", r => r.jobs < 0 ? "" : r.jobs],
    ["adopted_count", "adopted"], ["generation", "generation"]];

  // Narrowed by a link: one shard (from an alert) or one silo's shards (from the overview).
  let only = {name: "", silo: ""}, bar = null;

  async function fill(div, list) {
    const d = await ts.get("api/shards?loaded=" + list.loaded + "&sort=" + encodeURIComponent(list.sort) + "&page=" + list.page +
                           "&name=" + encodeURIComponent(only.name) + "&silo=" + encodeURIComponent(only.silo));
    ts.render(ts.slot(div, "rows"), ts.html`<h2>${list.title}</h2>${ts.table(COLS, d.items, list.sort, r => ({shard: r.name}),
      "No " + list.title.toLowerCase() + " shards: " + (list.loaded === "true" ? "no silo has a shard within its lookahead." : "no silo owns a shard beyond its lookahead."))}`);
    ts.slot(div, "paging").replaceChildren(ts.pager(d, step => { list.page += step; ts.refresh(); }));
    div.querySelectorAll("th[data-sort]").forEach(th => th.onclick = () => {
      const s = th.dataset.sort;
      list.sort = list.sort === s ? "-" + s : s; list.page = 1; ts.refresh();
    });
  }

  // In the address: ls/lp (loaded: sort, page) and ds/dp (dormant).
  const KEYS = [["ls", "lp"], ["ds", "dp"]];
  function restore(params) {
    only = {name: params.get("name") || "", silo: params.get("silo") || ""};
    lists.forEach((list, i) => {
      list.sort = params.get(KEYS[i][0]) || "name";
      list.page = Math.max(1, parseInt(params.get(KEYS[i][1]), 10) || 1);
    });
  }

  function narrowed(section) {
    if (!bar) {
      bar = document.createElement("p"); bar.id = "shards-only"; section.prepend(bar);
    }
    bar.hidden = !only.name && !only.silo;
    if (bar.hidden) return;
    const all = document.createElement("button");
    all.textContent = "show all shards";
    all.onclick = () => { only = {name: "", silo: ""}; lists.forEach(l => { l.page = 1; }); ts.refresh(); };
    bar.replaceChildren(only.name ? "shard " + only.name + " only " : "the shards of silo " + only.silo + " only ", all);
  }

  ts.page("shards", "Shards", async section => {
    if (!section.childElementCount) restore(ts.params());
    narrowed(section);
    for (const list of lists) {
      let div = ts.$(list.id);
      if (!div) { div = document.createElement("div"); div.id = list.id; section.append(div); }
      await fill(div, list);
    }
    const state = {name: only.name, silo: only.silo};
    lists.forEach((list, i) => {
      state[KEYS[i][0]] = list.sort === "name" ? "" : list.sort;
      state[KEYS[i][1]] = list.page === 1 ? "" : list.page;
    });
    ts.keep(state);
  }, restore);
})();
