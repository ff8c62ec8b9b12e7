"use strict";
(() => {
  let sort = "name", page = 1;
  ts.page("shards", "Shards", async section => {
    const d = await ts.get("api/shards?sort=" + encodeURIComponent(sort) + "&page=" + page);
    section.innerHTML = ts.table([["name", "shard"], ["owner", "owner"], ["state", "state"], ["loaded", "loaded"],
      ["jobs", "jobs"], ["window_start", "window"], ["adopted_count", "adopted"]], d.items, true, r => ({shard: r.name}));
    section.prepend(ts.pager(d, step => { page += step; ts.refresh(); }));
    section.querySelectorAll("th[data-sort]").forEach(th => th.onclick = () => {
      const s = th.dataset.sort;
      sort = sort === s ? "-" + s : s; page = 1; ts.refresh();
    });
  });
})();
