"""Lateness on Azurite by how the store's clock is read: off the wire against the SDK's hooks.

    python -m benchmarks.clock [--pairs 3] [--rate 1000] [--seconds 8] [--clocks sdk,wire]

Starts a local Ray and one Azurite, then alternates fresh 3-silo clusters whose store URL says
``?clock=sdk`` or ``?clock=wire`` (``pairs`` of each, in turn, so both see the same machine), and
for each measures handler start minus due time at a steady ``rate`` (``benchmarks.cluster``'s
``steady_lateness``), then each silo's reading of the store's clock from ``status()``. Azurite
stamps its ``Date`` with this host's wall clock, so the true offset is 0: ``-offset_low_s`` is how
far below the truth the low end sits, which is what the clock adds to every job's lateness.
Prints a line per cluster; writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from typing import Any

from benchmarks.cluster import bench_env, handlers, steady_lateness
from benchmarks.report import percentiles
from cluster import Cluster, ClusterOptions

NARROW_S = 8.0  # the silos' intervals narrow from Azure's first whole-second reading meanwhile


async def one_cluster(store_url: str, clock: str, rate: int, seconds: float) -> dict[str, Any]:
    cluster = Cluster.start(f"{store_url}&clock={clock}", silos=3, namespace=f"bench-{uuid.uuid4().hex[:8]}",
                            options=ClusterOptions())
    try:
        with handlers(2) as hs:
            await asyncio.sleep(NARROW_S)
            result, lateness = await steady_lateness(cluster.client(), hs, seconds, 20_000, rate)
            clocks = [(await silo.status.remote())["clock"] for silo in cluster.silos]
    finally:
        cluster.shutdown(graceful=False)
    return {"clock": clock, "early": result["early"], "lateness_ms": percentiles(lateness),
            "silos": [{"below_truth_ms": -c["offset_low_s"] * 1e3, "width_ms": c["width_s"] * 1e3,
                       "round_trip_ms": c["round_trip_s"] * 1e3, "timed_by": c.get("timed_by")} for c in clocks]}


def line(r: dict[str, Any]) -> str:
    late = r["lateness_ms"]
    silos = ", ".join(f"{s['below_truth_ms']:.2f}/{s['width_ms']:.2f}/{s['round_trip_ms']:.2f} {s['timed_by']}"
                      for s in r["silos"])
    return (f"clock={r['clock']:<4} lateness p50 {late['p50']:.2f} p99 {late['p99']:.2f} max {late['max']:.2f} ms, "
            f"early {r['early']} | per silo: low end below truth / width / round trip (ms): {silos}")


async def main_async(args: argparse.Namespace) -> None:
    with bench_env(["azure"]) as env:
        store_url = env.store_url("azure")
        for _ in range(args.pairs):
            for clock in args.clocks:
                print(line(await one_cluster(store_url, clock, args.rate, args.seconds)), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.clock", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rate", type=int, default=1_000, help="jobs due per second")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--clocks", type=lambda s: s.split(","), default=["sdk", "wire"])
    asyncio.run(main_async(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
