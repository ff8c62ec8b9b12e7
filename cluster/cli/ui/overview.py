"""The overview page: one row per silo, live charts of fires per second and lateness, and alerts.

The charts' points and the statuses come from the app's ``Sampler`` (``cluster.cli.ui.sampler``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from cluster.cli.job_text import NICENESS_ADVICE, niced
from cluster.cli.jobs import keeping_summary
from cluster.cli.ui.sampler import SAMPLER, Event
from cluster.cli.ui.source import UiSource

# A silo whose lease is older than this many heartbeat intervals has missed at least two beats:
# well past the jitter of a slow store write, so the alert does not come and go with it.
MISSED_BEATS = 3


def alerts(statuses: Sequence[Mapping[str, Any]], events: Sequence[Event] = (),
           wall: float | None = None, keeping: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """What an operator should look at, each ``{kind, silo, shard?, message}``: fewer silos live
    than the keeper's target (``keeping``, as ``keeping_summary`` gives it), the trouble the
    statuses show now, then the ``events`` of the last minutes (``wall``: now, to say how long ago)."""
    out: list[dict[str, Any]] = []

    def alert(kind: str, silo: Any, message: str, shard: str | None = None) -> None:
        out.append({"kind": kind, "silo": silo, **({"shard": shard} if shard is not None else {}), "message": message})

    target = keeping.get("target") if keeping else None
    if keeping and target is not None and keeping["live"] < target:
        waiting = (keeping.get("keeper") or {}).get("waiting")
        alert("below_target", None, f"{keeping['live']} silo(s) live, target {target}"
              + (f": {waiting}" if waiting else ": the keeper starts the missing ones"))

    for s in statuses:
        silo = s.get("silo_id")
        if s.get("error"):
            alert("silo_down", silo, f"status did not answer: {s['error']}")
            continue
        shards = {str(shard.get("name")): shard for shard in s.get("shards") or ()}
        for name in s.get("quarantined") or ():
            deaths = shards.get(name, {}).get("owner_deaths")
            alert("quarantined", silo, "fires in small batches: its owners kept dying while it fired"
                  + (f" ({deaths} in a row)" if deaths else ""), name)
        for name, parked in sorted((s.get("parked") or {}).items()):
            alert("parked", silo, f"{len(parked)} job(s) parked after killing their owners: "
                  f"{', '.join(parked[:3])}{' ...' if len(parked) > 3 else ''}; "
                  f"release with `timeshard release-quarantine {name}`", name)
        for name, damage in sorted((s.get("damaged") or {}).items()):
            alert("damaged", silo, f"log damaged: {damage.get('lost')} record(s) lost; copy kept as "
                  f"{damage.get('kept_as')}", name)
        for name, shard in sorted(shards.items()):
            if shard.get("unreadable"):
                alert("unreadable", silo, f"{shard['unreadable']} record(s) cannot be decoded (kept, never run)", name)
        clock = s.get("clock") or {}
        if clock.get("exceeded"):
            alert("clock_skew", silo, f"clock off the store's by {clock.get('offset_low_s')}..{clock.get('offset_high_s')} s, "
                  f"beyond max_clock_skew {clock.get('max_clock_skew_s')} s")
        if niced(s):
            alert("niced", silo, f"runs at niceness {niced(s)}: {NICENESS_ADVICE}")
        lapsed = heartbeat_missed(s)
        if lapsed:
            alert("heartbeat", silo, lapsed)
    for event in events:
        seconds = None if wall is None else max(0.0, wall - event.wall)
        ago = "" if seconds is None else f" ({seconds:.0f} s ago)" if seconds < 90 else f" ({seconds / 60:.0f} min ago)"
        alert(event.kind, event.silo, event.message + ago)
    return out


def heartbeat_missed(s: Mapping[str, Any]) -> str | None:
    """Why a silo's heartbeat looks missed: its lease lapsed, or it is older than ``MISSED_BEATS``
    heartbeat intervals; None while it beats."""
    age, left, beat = s.get("lease_age"), s.get("lease_left"), s.get("heartbeat_interval_s")
    if age is None:
        return "no heartbeat has renewed the lease yet"
    if left is not None and left <= 0:
        return f"lease lapsed {-left:.1f} s ago (last renewed {age:.1f} s ago): not firing"
    if beat and age > MISSED_BEATS * beat:
        return f"lease last renewed {age:.1f} s ago, {age / beat:.0f} heartbeat intervals"
    return None


def silo_row(s: dict[str, Any]) -> dict[str, Any]:
    """What the overview's table shows of one silo's ``status()`` (its damage and counters reach the page
    as alerts and charts)."""
    silo_id, _, incarnation = str(s.get("owner") or "").partition("#")
    return {
        "silo_id": s.get("silo_id"), "incarnation": incarnation or None, "node": s.get("node"),
        "lease_age": s.get("lease_age"), "lease_left": s.get("lease_left"),
        "queued": s.get("queued"), "inflight": s.get("inflight"), "staged": s.get("staged"),
        "shards": len(s.get("shards") or ()), "quarantined": list(s.get("quarantined") or ()),
        **clock_cells(s.get("clock") or {}), "error": s.get("error"),
    }


def clock_cells(clock: Mapping[str, Any]) -> dict[str, Any]:
    """The silo's reading of the store's clock, in ms: how late it makes jobs at most (the width of
    the interval holding ``store - host``; None while unmeasured), the interval, the store's kind, and
    how the last reading's flight was timed (``kernel``, ``loop``, ``sdk``)."""
    low, high, late = clock.get("offset_low_s"), clock.get("offset_high_s"), clock.get("lateness_up_to_s")
    return {"clock_late_ms": None if late is None else round(late * 1e3, 3),
            "clock_offset_ms": None if low is None or high is None else [round(low * 1e3, 3), round(high * 1e3, 3)],
            "clock_store": clock.get("store_clock"), "clock_timed_by": clock.get("timed_by")}


def routes(source: UiSource, page_size: int) -> list[web.RouteDef]:
    async def overview(request: web.Request) -> web.Response:
        sampler = request.app[SAMPLER]
        reading = await sampler.latest()
        keeping = keeping_summary(reading.keeping, list(reading.statuses)) if source.keeping is not None else None
        return web.json_response({"silos": [silo_row(s) for s in reading.statuses], "sampled_at": reading.wall,
                                  "series": sampler.series.to_json(), "keeping": keeping,
                                  "alerts": alerts(reading.statuses, sampler.series.events(), reading.wall, keeping)})

    async def about(request: web.Request) -> web.Response:
        """Where the silos are, for the header: an operator with two tabs open must tell prod from staging."""
        return web.json_response({"namespace": source.namespace, "ray_address": source.address})

    return [web.get("/api/overview", overview), web.get("/api/about", about)]
