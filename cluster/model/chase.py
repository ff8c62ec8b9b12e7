"""How long a client follows a job from shard to shard to the silo that holds it.

A recurring job moves on to the shard of each occurrence's window, and every shard it left
answers "moved" on to the next for as long as it is kept (``retry_window`` after its window,
60 s by default). A handle from the job's first schedule call (a named job's entry keeps that
one) walks the whole chain: one shard per window the job ran through, thirty for ``@every 1s``
on 2 s windows after a minute. A fixed count of sixteen hops gave up on such a chain on a
healthy one-silo cluster (``timeshard delete`` of a named job that had run for 42 s: "could not
reach the owner ... in 16 hops").

So a chase is bounded by time, not hops. An answer naming somewhere not seen before in this
chase is progress and is followed at once, however many there are; one that brings nothing new
(the same owner named again, a released shard, an owner the client does not know, a shard met
before) is asked again after a backoff; and the chase gives up once ``CHASE_S`` have passed,
not counting the time silos took to answer (``Chase.ask``): a cancel waits at the job's silo
for an attempt in flight to end, however long it runs, and its answer may still be a move to
follow (the attempt carried a recurring job on to its next window). Time is the event loop's,
so a simulation's virtual loop runs it in virtual time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Hashable
from typing import TypeVar

__all__ = ["CHASE_S", "HOP_DELAY_S", "MAX_HOP_DELAY_S", "Chase"]

T = TypeVar("T")

#: Seconds a client keeps following a job before it gives up (``ClusterUnavailable``): longer
#: than a dead owner's lease takes to run out and its shard to be adopted.
CHASE_S = 30.0
#: Backoff between asks that brought nothing new, doubling up to the second.
HOP_DELAY_S, MAX_HOP_DELAY_S = 0.2, 1.0


class Chase:
    """One client call's following of a job: what it met so far, its backoff, and its deadline."""

    def __init__(self, limit_s: float = CHASE_S) -> None:
        self._loop = asyncio.get_running_loop()
        self._started = self._loop.time()
        self._deadline = self._started + limit_s
        self._met: set[Hashable] = set()
        self._delay = HOP_DELAY_S
        self.hops = 0
        self.last: object = None  # the last answer, for the error a chase that gave up raises

    def going(self) -> bool:
        """Whether to ask (once more): always the first time, then while time is left."""
        return self.hops == 0 or self._loop.time() < self._deadline

    async def ask(self, call: Awaitable[T]) -> T:
        """A silo's answer to ``call``; the time it took moves the deadline on. Counted, a cancel
        that waited 45 s for a recurring job's run to end gave up on the move it answered, and
        the next occurrence lived on; a silo that does not answer is the transport's to bound."""
        asked = self._loop.time()
        try:
            return await call
        finally:
            self._deadline += self._loop.time() - asked

    def answered(self, answer: object) -> None:
        """Count one ask and note its ``answer``."""
        self.hops += 1
        self.last = answer

    async def onward(self, where: Hashable) -> None:
        """Go on to ``where`` (a shard, or a shard and its owner): at once if this chase has not
        been there yet, else after the backoff, since asking there again brought nothing new."""
        if where in self._met:
            await self.back_off()
        self._met.add(where)

    async def back_off(self) -> None:
        """Wait before asking again, doubling the wait; never past the deadline."""
        await asyncio.sleep(max(0.0, min(self._delay, self._deadline - self._loop.time())))
        self._delay = min(2 * self._delay, MAX_HOP_DELAY_S)

    def gave_up(self) -> str:
        """Why the chase ended without an answer, for the caller's error."""
        spent = self._loop.time() - self._started
        return f"in {spent:.1f} s ({self.hops} hops; last answered {self.last!r})"
