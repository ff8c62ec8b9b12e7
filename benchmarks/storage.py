"""Benchmark of the storage layer on memory, file and Azure (an Azurite it starts itself).

    python -m benchmarks.storage [--quick] [--stores memory,file,azure]

Per store: sequential single-record appends/s (one writer awaiting each append), group-
committed records/s (64 concurrent writers on one log), replay records/s of a 1,000,000-record
log (read + decode + iterate), and, on Azure in full mode, one run across the real 50,000-block
limit of an append blob. Writes storage.json and storage.png
(where: ``benchmarks.report``; into benchmarks/results/ with ``--publish``).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from benchmarks._azurite import Azurite
from benchmarks.report import Report, add_publish_flag, machine_info, report_for
from storage import AZURE_MAX_BLOCKS, LogOptions, LogWriter, NotFound, Store, open_store, read_log
from storage.generations import generation_name
from storage.records import encode_frame
from storage.urls import CONNECTION_STRING_ENV

GOAL_GROUP_RECORDS_PER_S = 20_000
GOAL_GROUP_OVER_SEQUENTIAL = 100
GOAL_REPLAY_RECORDS_PER_S = 500_000
WRITERS = 64


def _record(i: int) -> dict[str, Any]:
    # About the size of a small job operation.
    return {"op": "add", "id": f"{i:016x}", "due": 1_800_000_000 + i, "attempt": 0}


@asynccontextmanager
async def _opened(kind: str, azurite: Azurite | None, scratch: Path) -> AsyncIterator[Store]:
    if kind == "memory":
        url, env = "memory://", {}
    elif kind == "file":
        url, env = f"file://{scratch / 'file-store'}", {}
    else:
        assert azurite is not None
        url, env = f"azure://bench-{int(time.time())}", {CONNECTION_STRING_ENV: azurite.connection_string}
    async with open_store(url, environ=env) as store:
        yield store


async def sequential(store: Store, n: int) -> dict[str, float]:
    writer = await LogWriter.create(store, "sequential", {})
    for i in range(20):  # warm the connection pool and caches before timing
        await writer.append(_record(i))
    start = time.perf_counter()
    for i in range(n):
        await writer.append(_record(i))
    elapsed = time.perf_counter() - start
    return {"records": n, "seconds": elapsed, "records_per_s": n / elapsed}


async def group_commit(store: Store, per_writer: int, window: int = 1) -> dict[str, float]:
    """64 writers, each awaiting its appends ``window`` at a time (1 = one in flight each)."""
    writer = await LogWriter.create(store, f"group-{window}", {})
    await writer.append(_record(-1))

    async def one(w: int) -> None:
        for i in range(0, per_writer, window):
            await asyncio.gather(*(writer.append(_record(w * per_writer + j))
                                   for j in range(i, min(per_writer, i + window))))

    blocks = writer.blocks_written
    start = time.perf_counter()
    await asyncio.gather(*(one(w) for w in range(WRITERS)))
    elapsed = time.perf_counter() - start
    n, blocks = WRITERS * per_writer, writer.blocks_written - blocks
    return {"records": n, "writers": WRITERS, "in_flight_per_writer": window, "seconds": elapsed, "records_per_s": n / elapsed,
            "blocks": blocks, "records_per_block": n / blocks}


async def replay(store: Store, n: int) -> dict[str, float]:
    writer = await LogWriter.create(store, "replay", {})
    batch = 50_000
    for start in range(0, n, batch):
        await writer.append_many(_record(i) for i in range(start, min(n, start + batch)))
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        state = await read_log(store, "replay")
        count = sum(1 for _ in state.records())
        best = min(best, time.perf_counter() - started)
        assert count == n and state.decoded.torn is None
    return {"records": n, "bytes": state.size, "blocks": state.blocks, "seconds": best, "records_per_s": n / best}


async def cross_block_limit(store: Store, azurite: Azurite, report: Report) -> dict[str, Any]:
    """Fill a real append blob to 50,000 blocks, then keep writing through the writer.

    The filler blocks are empty frames (valid, zero records), appended by 32 unconditional
    writers so the fill takes about a minute instead of 50,000 sequential round trips.
    """
    from azure.storage.blob.aio import BlobServiceClient

    base, filler = "limit", encode_frame(0, [])
    name = generation_name(base, 0)
    seed = await LogWriter.create(store, base, {"owner": "bench"})
    await seed.append("before the limit")
    target = AZURE_MAX_BLOCKS - 40
    started = time.perf_counter()
    async with BlobServiceClient.from_connection_string(azurite.connection_string) as client:
        blob = client.get_container_client(store.container).get_blob_client(name)  # type: ignore[attr-defined]
        left = target - 1

        async def fill() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await blob.append_block(filler)

        async def progress() -> None:
            while left > 0:
                await asyncio.sleep(10)
                report.progress(f"  filling: {target - left:,} of {target:,} blocks")

        ticker = asyncio.create_task(progress())
        await asyncio.gather(*(fill() for _ in range(32)))
        ticker.cancel()
    fill_s = time.perf_counter() - started
    state = await read_log(store, base)
    report.progress(f"  filled to {state.blocks:,} blocks in {fill_s:.0f}s; writing across the limit")
    live: list[Any] = list(state.records())
    # rotate_blocks above the blob's own limit: the writer meets Azure's refusal (409
    # BlockCountExceedsLimit) and rotates then, proving that path against the real limit.
    writer = await LogWriter.claim(store, state, {"owner": "bench2"}, snapshot=lambda: list(live),
                                   options=LogOptions(rotate_blocks=AZURE_MAX_BLOCKS + 10))

    async def one(w: int) -> None:
        for i in range(100):  # about 100 blocks of 64: well past the 40 left
            record = f"w{w}-{i}"
            live.append(record)
            await writer.append(record)

    blocks_before = writer.blocks
    started = time.perf_counter()
    await asyncio.gather(*(one(w) for w in range(WRITERS)))
    cross_s = time.perf_counter() - started
    try:
        await store.stat(name)
        old_deleted = False
    except NotFound:
        old_deleted = True
    after = list((await read_log(store, base)).records())
    ok = sorted(map(str, after)) == sorted(map(str, live)) and len(after) == len(set(map(str, after)))
    return {"blocks_before": blocks_before, "limit": AZURE_MAX_BLOCKS, "fill_seconds": fill_s,
            "rotations": writer.rotations, "generation_after": writer.generation,
            "records_after": len(after), "all_records_once": ok, "old_generation_deleted": old_deleted,
            "crossing_seconds": cross_s}


async def run_store(kind: str, args: argparse.Namespace, azurite: Azurite | None, scratch: Path,
                    report: Report) -> dict[str, Any]:
    seq_n = {"memory": 20_000, "file": 500, "azure": 500}[kind]
    per_writer = {"memory": 2_000, "file": 200, "azure": 500}[kind]
    replay_n = 1_000_000
    if args.quick:
        seq_n, per_writer, replay_n = seq_n // 10, per_writer // 10, 100_000
    result: dict[str, Any] = {}
    async with _opened(kind, azurite, scratch) as store:
        report.progress(f"{kind}: {seq_n:,} sequential appends")
        result["sequential"] = await sequential(store, seq_n)
        report.progress(f"{kind}: {WRITERS} writers x {per_writer:,} records, group-committed")
        result["group"] = await group_commit(store, per_writer)
        report.progress(f"{kind}: {WRITERS} writers x {per_writer * 4:,} records, 8 in flight each")
        result["group_pipelined"] = await group_commit(store, per_writer * 4, window=8)
        report.progress(f"{kind}: replay of {replay_n:,} records")
        result["replay"] = await replay(store, replay_n)
        if kind == "azure" and not args.quick:
            report.progress("azure: crossing the real 50,000-block limit")
            assert azurite is not None
            result["block_limit"] = await cross_block_limit(store, azurite, report)
    result["group_over_sequential"] = result["group"]["records_per_s"] / result["sequential"]["records_per_s"]
    return result


async def main_async(args: argparse.Namespace, report: Report) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="timeshard-bench-") as tmp:
        scratch = Path(tmp)
        for kind in args.stores:
            if kind == "azure":
                with Azurite() as azurite:
                    results[kind] = await run_store(kind, args, azurite, scratch, report)
            else:
                results[kind] = await run_store(kind, args, None, scratch, report)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs; skips the 50,000-block crossing")
    parser.add_argument("--stores", default="memory,file,azure", type=lambda s: s.split(","))
    add_publish_flag(parser)
    args = parser.parse_args(argv)
    report = report_for("storage", parser, args)
    report.data["machine"] = machine_info()
    results = asyncio.run(main_async(args, report))
    report.data["stores"] = results
    report.table(
        ["store", "sequential rec/s", "group rec/s", "recs/block", "group/seq", "group x8 rec/s", "replay rec/s"],
        [[kind, f"{r['sequential']['records_per_s']:,.0f}", f"{r['group']['records_per_s']:,.0f}",
          f"{r['group']['records_per_block']:,.1f}", f"{r['group_over_sequential']:,.0f}x",
          f"{r['group_pipelined']['records_per_s']:,.0f}",
          f"{r['replay']['records_per_s']:,.0f}"] for kind, r in results.items()],
    )
    if "block_limit" in results.get("azure", {}):
        limit = results["azure"]["block_limit"]
        print(f"azure 50,000-block crossing: from {limit['blocks_before']:,} blocks, {limit['rotations']} rotation(s), "
              f"generation {limit['generation_after']}, {limit['records_after']:,} records, "
              f"all once: {limit['all_records_once']}")
        crossed = limit["all_records_once"] and limit["rotations"] >= 1 and limit["old_generation_deleted"]
        report.goal("azure block-limit crossing: rotated, nothing lost (1 = yes)", float(crossed), 1,
                    higher_is_better=True)
    if "azure" in results:
        azure = results["azure"]
        report.goal("azure group commit records/s", azure["group"]["records_per_s"], GOAL_GROUP_RECORDS_PER_S,
                    higher_is_better=True)
        report.goal("azure group / sequential", azure["group_over_sequential"], GOAL_GROUP_OVER_SEQUENTIAL,
                    higher_is_better=True)
        report.goal("azure group commit records/s, 8 in flight per writer", azure["group_pipelined"]["records_per_s"],
                    GOAL_GROUP_RECORDS_PER_S, higher_is_better=True)
        report.goal("azure replay records/s", azure["replay"]["records_per_s"], GOAL_REPLAY_RECORDS_PER_S,
                    higher_is_better=True)
    report.bars("timeshard storage (records/s, log scale)", [
        ("sequential appends/s", {k: r["sequential"]["records_per_s"] for k, r in results.items()}, None),
        (f"group commit, {WRITERS} writers x 8 in flight",
         {k: r["group_pipelined"]["records_per_s"] for k, r in results.items()}, GOAL_GROUP_RECORDS_PER_S),
        (f"group commit, {WRITERS} writers x 1", {k: r["group"]["records_per_s"] for k, r in results.items()},
         GOAL_GROUP_RECORDS_PER_S),
        ("replay records/s", {k: r["replay"]["records_per_s"] for k, r in results.items()},
         GOAL_REPLAY_RECORDS_PER_S),
    ])
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main())
