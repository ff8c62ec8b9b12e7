"use strict";
ts.page("overview", "Overview", async section => {
  const d = await ts.get("api/overview");
  section.innerHTML = "<h2>Silos</h2>" + ts.table([
    ["silo_id", "silo"], ["incarnation", "incarnation"], ["node", "node"], ["lease_age", "lease age (s)"],
    ["queued", "queued"], ["inflight", "in flight"], ["staged", "staged"], ["shards", "shards"],
    ["quarantined", "quarantined", r => ts.esc(r.quarantined.join(", "))],
    ["error", "error", r => "<span class=err>" + ts.esc(r.error) + "</span>"]], d.silos, false, r => ({silo: r.silo_id}));
});
