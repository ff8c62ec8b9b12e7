"""What a handler actor sends back through Ray: one plain tuple per attempt, in order.

Ray pickles a named tuple by reference to its class (2.1 µs per outcome round trip against 0.16
for a plain tuple, issue 15), so the handler base class answers with tuples and the silo rebuilds
``Outcome`` from them.
"""

from __future__ import annotations

import asyncio
import time

from cluster.model.attempt import Attempt, JobContext, Outcome
from cluster.model.wire import datetime_to_us, pack
from handlers import JobHandler
from tests.runtime.harness import job


class FailsOdd(JobHandler):
    async def execute_job(self, ctx: JobContext) -> None:
        if ctx.job.data["k"] % 2:
            raise ValueError(f"odd {ctx.job.data['k']}")


def _batch(n: int) -> list[tuple]:
    jobs = [job(data={"k": k}) for k in range(n)]
    return [tuple(Attempt(pack(j.to_wire()), f"run-{k}", 1, datetime_to_us(j.due), 1)) for k, j in enumerate(jobs)]


def test_outcomes_go_back_as_plain_tuples_in_order() -> None:
    out = asyncio.run(FailsOdd().timeshard_deliver(_batch(4), timeout=5.0, lease_end=time.time() + 60))
    assert all(type(o) is tuple for o in out)
    outcomes = [Outcome(*o) for o in out]
    assert [o.run_id for o in outcomes] == ["run-0", "run-1", "run-2", "run-3"]
    assert [o.succeeded for o in outcomes] == [True, False, True, False]
    assert outcomes[1].error == "odd 1" and outcomes[1].error_type == "ValueError"


def test_work_arriving_after_the_senders_lease_is_refused_as_plain_tuples() -> None:
    out = asyncio.run(FailsOdd().timeshard_deliver(_batch(2), timeout=5.0, lease_end=time.time() - 1))
    assert all(type(o) is tuple for o in out)
    assert all(Outcome(*o).refused for o in out)
