"""Dispatch ahead: jobs travel to their handler before they are due and start there, never early.

A silo sends due jobs up to ``dispatch_ahead`` before their due time, with one ``Ahead`` per
batch; the handler waits until each job is due and only then starts it. The Ray call's transit,
and the silo's own timer and batch work, are then behind the job rather than added to its
lateness.

Why nothing starts early. Due times are *store* time. The silo's clock reads its host's
monotonic clock plus the *low* end of the measured ``store - host`` interval
(``cluster.runtime.skew``), so whatever it reads, the store's time is at least that: at the
instant the silo reads ``sent_us``, store time >= ``sent_us``. It then reads its monotonic clock,
``sent_mono``, a moment later: store time at ``sent_mono`` is still >= ``sent_us``. A job due at
``due_us`` is so at most ``due_us - sent_us`` of store time away, whenever the handler looks.

- **Any host** (the rule that always holds): the handler notes its own monotonic time when the
  batch arrives, after the silo read ``sent_us``, and starts the job once its monotonic clock has
  moved ``(due_us - sent_us) * (1 + DRIFT)`` on from there. Store time has then moved at least
  ``due_us - sent_us`` since ``sent_us`` was read (``DRIFT`` bounds how much faster than the
  store's one host's clock may tick), so the job is due. Transit only makes it later; neither
  host's wall clock takes part.
- **The same host** (``domain`` equal: one kernel boot and one time namespace, so both processes
  read the one ``CLOCK_MONOTONIC``): the handler starts the job once its monotonic clock reads
  ``sent_mono + (due_us - sent_us) * (1 + DRIFT)``: the same argument measured from the silo's
  reading instead of the arrival, which takes transit out of lateness.

The lease fences these jobs at their start, not at their arrival: the handler refuses a job
whose sender's lease ended before it was due to start (the wall-clock ``lease_end``, which the
silo sends ``max_clock_skew`` early, as the handler's clock may run that far behind the store's;
and on the same host also the exact monotonic ``lease_mono``).
"""

from __future__ import annotations

import os
from typing import NamedTuple

from cluster.model.skew import DRIFT


class Ahead(NamedTuple):
    """What a silo tells a handler about a batch sent ahead, as a plain tuple on the wire."""

    sent_us: int  # the silo's store clock (µs) when it sent the batch: store time was at least this
    sent_mono: float  # the silo's monotonic clock (s), read just after ``sent_us``
    domain: str  # whose monotonic clock ``sent_mono`` is on (``monotonic_domain``); "" if unknown
    lease_mono: float  # the sender's lease ends at this monotonic time (same domain only)


def monotonic_domain() -> str:
    """Which ``CLOCK_MONOTONIC`` this process reads: "<boot id>/<time namespace>", "" if unknown.

    Processes that agree on it read one clock (Linux: the kernel's monotonic clock since boot,
    shifted only per time namespace). Elsewhere "" and no two processes ever count as sharing.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        return ""
    try:
        space = str(os.stat("/proc/self/ns/time").st_ino)
    except OSError:
        space = "-"  # a kernel without time namespaces: every process reads the one clock
    return f"{boot}/{space}" if boot else ""


def start_at(ahead: Ahead, received_mono: float, domain: str, due_us: int) -> float:
    """The monotonic time (s, this process's clock) at or after which a job due at ``due_us`` may start.

    ``received_mono`` is this process's monotonic clock read when the batch arrived (or later);
    ``domain`` is this process's ``monotonic_domain()``.
    """
    wait = max(0, due_us - ahead.sent_us) * (1 + DRIFT) / 1e6
    if domain and domain == ahead.domain:
        return ahead.sent_mono + wait
    return received_mono + wait


def lease_over(ahead: Ahead | None, domain: str, mono: float, wall: float, lease_end: float | None) -> bool:
    """Whether the sender's lease has ended, by the handler's clocks at ``mono`` and ``wall`` (s).

    Ended *at* ``lease_end``, as the sender's lease itself (``Lease.valid``): a peer may take
    its shards from that instant on.
    """
    if lease_end is not None and wall >= lease_end:
        return True
    return ahead is not None and bool(domain) and domain == ahead.domain and mono >= ahead.lease_mono
