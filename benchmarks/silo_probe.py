"""Where a running silo's time goes while named jobs fire: spans and cProfile inside the silo.

Run inside each silo actor by ``benchmarks.named_fire --phases`` through Ray's ``__ray_call__``
(so the silo's own code is unchanged): ``start`` wraps a few methods of the firing path and
the registry buckets' owner side with wall-clock timers and turns cProfile on in the silo's
event-loop thread; ``stop`` turns it off and returns what it saw as plain values, and the CPU
time the silo's process used in between (``cpu_s``: all its threads, the store's included).

The spans (each: calls, items where it takes a list, total wall seconds, the slowest call):

- ``send``: ``Firing._send``, from a batch's hooks to its outcomes; ``admitted``: its hooks'
  admission of each run, one after another; ``started_hooks``: ``attempt_started`` of each;
- ``verdict``: ``Clearance.verdict`` at an attempt's start, split into ``verdict_hit`` (cleared
  ahead of its due time: from memory) and ``verdict_miss`` (asked of the bucket's owner now);
- ``judge``: one job judged by its bucket's owner (ahead of its due time, or at it: a miss);
- ``owner_verdict`` / ``owner_records``: a bucket owner answering a fence verdict / appending
  status changes (or retired lists); ``complete_one``: an outcome off the common path (a
  failure, a refusal, a retry);
- ``lag``: the event loop late to wake a 5 ms sleep by over 20 ms (items: ms late), in the timeline;
- ``deliver``: the transport's call to the handler; ``complete``: ``Outcomes.complete_batch``.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats
import time
from collections.abc import Callable
from typing import Any

_SPANS: dict[str, list[float]] = {}  # name -> [calls, items, seconds, slowest]
_TIMELINE: list[tuple[float, float, str, int]] = []  # (wall start, wall end, name, items) of the list-taking spans
_PROFILE: list[cProfile.Profile] = []
_LAG: list[asyncio.Task[None]] = []
_CPU: list[float] = []  # the silo process's CPU time at ``start``
_INSTALLED: list[bool] = []


def _note(name: str, started: float, items: int) -> None:
    took = time.perf_counter() - started
    span = _SPANS.setdefault(name, [0, 0, 0.0, 0.0])
    span[0] += 1
    span[1] += items
    span[2] += took
    span[3] = max(span[3], took)


def _timed(owner: Any, method: str, name: str, items: Callable[[tuple[Any, ...]], int] | None = None) -> None:
    inner = getattr(owner, method)

    async def timed(*args: Any, **kwargs: Any) -> Any:
        started, wall = time.perf_counter(), time.time()
        try:
            return await inner(*args, **kwargs)
        finally:
            _note(name, started, items(args) if items is not None else 0)
            if items is not None:
                _TIMELINE.append((wall, time.time(), name, items(args)))

    setattr(owner, method, timed)


def _install() -> None:
    from cluster.named import fence, owned
    from cluster.runtime import firing, outcomes

    _timed(firing.Firing, "_send", "send", lambda a: len(a[3]))
    _timed(firing.Firing, "_admitted", "admitted", lambda a: len(a[1]))
    _timed(outcomes.Outcomes, "complete_batch", "complete", lambda a: len(a[1]))
    _timed(fence.Clearance, "_judge", "judge")
    # The owner's calls are bound at its start (``OwnerCalls._calls``): what they call is wrapped.
    _timed(owned.OwnerCalls, "_verdict", "owner_verdict")
    _timed(owned.OwnerCalls, "_records", "owner_records", lambda a: len(a[1]))
    _timed(outcomes.Outcomes, "complete", "complete_one")
    calls = firing.call_hooks

    async def call_hooks(hooks: Any, method: str, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return await calls(hooks, method, *args)
        finally:
            _note(f"{method}_hooks", started, 1)

    firing.call_hooks = call_hooks
    verdict = fence.Clearance.verdict

    async def timed_verdict(self: Any, key: str, job_id: str, *args: Any) -> Any:
        hit = self.shard_of(job_id) is not None
        started = time.perf_counter()
        try:
            return await verdict(self, key, job_id, *args)
        finally:
            _note("verdict_hit" if hit else "verdict_miss", started, 1)

    fence.Clearance.verdict = timed_verdict  # type: ignore[method-assign,assignment]


async def _lag() -> None:
    """Note each time the loop wakes a 5 ms sleep over 20 ms late: something held it."""
    while True:
        wall, started = time.time(), time.perf_counter()
        await asyncio.sleep(0.005)
        late = time.perf_counter() - started - 0.005
        if late > 0.02:
            _TIMELINE.append((wall, time.time(), "lag", int(1e3 * late)))


def _loop(actor: Any) -> asyncio.AbstractEventLoop:
    loop: asyncio.AbstractEventLoop = actor._ready.get_loop()
    return loop


def start(actor: Any, profile: bool = True) -> str:
    """Reset the spans (installing them the first time) and, if ``profile``, start cProfile in the silo's loop thread."""
    if not _INSTALLED:
        _install()
        _INSTALLED.append(True)
    _SPANS.clear()
    _TIMELINE.clear()
    _CPU[:] = [time.process_time()]
    _on_loop(actor, lambda: _LAG.append(asyncio.get_running_loop().create_task(_lag())))
    if profile:
        prof = cProfile.Profile()
        _PROFILE[:] = [prof]
        _on_loop(actor, prof.enable)
    import cluster
    return str(cluster.__file__)


def stop(actor: Any, top: int = 30) -> dict[str, Any]:
    """The spans since ``start``, and cProfile's ``top`` functions by own time."""
    out: dict[str, Any] = {"cpu_s": round(time.process_time() - _CPU[0], 3) if _CPU else None, "spans": {name: {"calls": int(c), "items": int(n), "s": round(s, 3),
                                            "slowest_ms": round(1e3 * m, 1)}
                                     for name, (c, n, s, m) in sorted(_SPANS.items())},
                           "timeline": sorted(_TIMELINE)}
    lags, _LAG[:] = list(_LAG), []
    _on_loop(actor, lambda: _cancel(lags))
    if _PROFILE:
        prof = _PROFILE.pop()
        _on_loop(actor, prof.disable)
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
        out["profile_tottime"] = text.getvalue().splitlines()[:top + 12]
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(top)
        out["profile_cumulative"] = text.getvalue().splitlines()[:top + 12]
    return out


def _on_loop(actor: Any, fn: Callable[[], None]) -> None:
    """Run ``fn`` in the silo's event-loop thread (cProfile profiles the thread that enables it)."""
    loop = _loop(actor)
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        fn()
        return
    done = asyncio.run_coroutine_threadsafe(_call(fn), loop)
    done.result(timeout=10)


def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()


async def _call(fn: Callable[[], None]) -> None:
    fn()


__all__ = ["start", "stop"]
