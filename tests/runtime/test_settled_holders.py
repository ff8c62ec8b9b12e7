"""A silo refusing a retried schedule call says which holder its refusal settles: itself, when it
holds a shard the earlier try may reach, and no other (simulator seed 1111935, every kind: three
live holders each refused for want of the others' proof, for 61 s; the client now names each
refusing holder settled, as flow steps do, see tests/model/test_routing.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cluster.model.errors import EarlierTryUnsettled
from storage import MemoryStore
from tests.runtime.harness import item, job, make_parts
from tests.runtime.test_scheduling import copies


async def test_a_refusal_settles_the_refusing_holder_itself_and_no_other() -> None:
    store = MemoryStore()
    a, b, c = [await make_parts(store, name) for name in "abc"]
    j = job(due=timedelta(hours=1))
    (earlier,) = await a.scheduling.schedule([item(j)])  # landed in "a#1"'s shard; the client never heard
    await b.scheduling.schedule([item(job(due=timedelta(hours=1)))])  # "b#1" holds a shard of the window too
    settles = []
    for parts in (a, b, c):
        with pytest.raises(EarlierTryUnsettled) as refused:
            await parts.scheduling.schedule([item(j)], suspects=["a", "b"])
        settles.append(refused.value.settles)
    assert settles == ["a#1", "b#1", None]  # c holds nothing the earlier try may reach
    assert await c.scheduling.schedule([item(j)], suspects=["a", "b"], settled=["a#1", "b#1"]) == [earlier]
    assert await copies(store, j.id) == [earlier]
