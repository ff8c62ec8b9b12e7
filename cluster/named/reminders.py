"""Actor reminders (Dapr, Orleans) on ``client.reminders``, kept as named jobs.

A reminder is the named job ``reminder_name`` in namespace ``reminders`` whose app_id is derived
from the actor (its kind, Ray namespace and name), so each actor has its own set of names and
``list(actor)`` is one listing. Registering a name again replaces the reminder (last write wins),
as in Dapr; everything ``client.jobs`` guarantees holds, status included.
"""

from __future__ import annotations

import hashlib
from typing import Any, TypedDict

from cluster.model.errors import ValidationError
from cluster.model.jobs import Target
from cluster.model.schedules import Schedule
from cluster.model.times import parse_period
from cluster.named.api import NamedJob, NamedJobs, parse_target
from cluster.named.registry import MAX_SCOPE_CHARS

__all__ = ["Reminders", "REMINDERS_NAMESPACE", "reminder_scope"]

REMINDERS_NAMESPACE = "reminders"


def reminder_scope(target: Target) -> str:
    """Return the app_id of ``target``'s reminders: readable, or a digest when that is too long."""
    text = f"{target.kind}:{target.namespace or ''}:{target.name}" if target.kind == "actor" else target.name
    if len(text) <= MAX_SCOPE_CHARS and text.isprintable():
        return text
    return f"{target.kind}:sha256:{hashlib.sha256(text.encode()).hexdigest()[:40]}"


class _Scope(TypedDict):
    """Where a target's reminders live among the named jobs."""

    namespace: str
    app_id: str


class Reminders:
    """Register, unregister and list the reminders of actors and grains."""

    def __init__(self, jobs: NamedJobs) -> None:
        self._jobs = jobs

    def _scope(self, target: Any) -> tuple[Target, _Scope]:
        resolved = self._jobs.client.resolve_target(parse_target(target))
        return resolved, {"namespace": REMINDERS_NAMESPACE, "app_id": reminder_scope(resolved)}

    async def register(
        self,
        target: Target | str,
        reminder_name: str,
        *,
        due_time: Any = None,
        period: Any = None,
        ttl: Any = None,
        data: Any = None,
        failure_policy: Any = None,
    ) -> NamedJob:
        """Register (or replace) reminder ``reminder_name`` of ``target``; returns it once durable.

        ``period``: ``R4/PT3S`` (every 3 s, 4 times), ``R/PT3S`` or a duration (``5m``, ``PT5M``)
        for no bound, None for a one-shot reminder. ``due_time`` (default: one period from now,
        or now for a one-shot) and ``ttl`` take what ``parse_time`` takes.
        """
        resolved, scope = self._scope(target)
        schedule, repeats = None, None
        if period is not None:
            interval, repeats = parse_period(period, field="period")
            schedule = Schedule.every(interval)
        if due_time is None and schedule is None:
            due_time = "0s"
        try:
            return await self._jobs.put(
                reminder_name, target=resolved, schedule=schedule, due_time=due_time, repeats=repeats, ttl=ttl,
                data=data, failure_policy=failure_policy, overwrite=True, **scope,
            )
        except ValidationError as exc:
            if exc.field not in ("schedule", "name"):
                raise
            # Speak in this method's own argument names.
            field = "period" if exc.field == "schedule" else "reminder_name"
            raise type(exc)(field, exc.rule, exc.value, accepted=exc.accepted) from None

    async def unregister(self, target: Target | str, reminder_name: str) -> bool:
        """Remove the reminder: True if it existed. Once this returns, it does not fire again."""
        _, scope = self._scope(target)
        return await self._jobs.delete(reminder_name, **scope)

    async def get(self, target: Target | str, reminder_name: str) -> NamedJob | None:
        """Return the reminder with its status, or None."""
        _, scope = self._scope(target)
        return await self._jobs.get(reminder_name, **scope)

    async def list(self, target: Target | str) -> list[NamedJob]:
        """Return every reminder of ``target``, by name."""
        _, scope = self._scope(target)
        return await self._jobs.list("", **scope)
