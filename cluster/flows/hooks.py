"""The silo side of flows: record step attempts in flow logs, schedule dependants, reconcile."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Sequence
from datetime import timedelta
from typing import Any

from cluster.flows.log import FlowLogDamaged, FlowState, applied, update
from cluster.flows.model import ADMISSION_HOLDS_S, FLOW_ID_META, FLOW_META, FLOW_PREFIX, STEP_META, TERMINAL_STEP_STATES
from cluster.flows.progress import Limits, Unconfirmed, _silent, advance, job_outcome, reconcile
from cluster.model.errors import EarlierTryUnsettled, ScheduleInDoubt, SiloStopping
from cluster.model.jobs import ScheduledJob
from cluster.model.waiting import wait_bounded
from cluster.model.wire import datetime_to_us, pack
from cluster.runtime.hooks import AttemptEnd, AttemptEvent, SiloHooks, SiloView
from cluster.runtime.membership import Membership
from cluster.runtime.runs import log_if_failed
from cluster.runtime.shardlog import CANCELLED, EXHAUSTED, SUCCEEDED
from storage import StorageError, Store, list_logs

log = logging.getLogger("timeshard.flows")

RECORD_RETRY_S = 0.5  # the first wait before a step's record that failed is written again; it doubles


def _step_of(job: ScheduledJob) -> tuple[str, str] | None:
    flow, step = job.metadata.get(FLOW_META), job.metadata.get(STEP_META)
    return None if flow is None or step is None else (flow, step)


class FlowHooks(SiloHooks):
    """Records step attempts in flow logs and schedules dependants; reconciles after crashes.

    Built inside the silo's event loop (see ``SiloView``); it starts its reconcile loop there.
    """

    metadata_keys = (FLOW_META,)
    admit_holds_s = ADMISSION_HOLDS_S  # a flow's cancel waits this out (``Flows.cancel``)

    def interested(self, job: ScheduledJob) -> bool:
        return FLOW_META in job.metadata

    def __init__(self, store: Store, silo: SiloView) -> None:
        self._store = store
        self._silo = silo
        options = silo.options
        self._interval = (options.adoption_interval * 10).total_seconds()
        attempt = options.handler_timeout + timedelta(seconds=10)
        self._limits = Limits(
            grace_us=max(options.suspicion_timeout * 3, timedelta(minutes=1)) // timedelta(microseconds=1),
            attempt_us=attempt // timedelta(microseconds=1),
            staging_us=options.undeliverable_timeout // timedelta(microseconds=1),
            suspicion_us=options.suspicion_timeout // timedelta(microseconds=1),
        )
        self._finished: set[str] = set()  # flows that can never change again: not read twice
        self._cancelled: set[tuple[str, str | None]] = set()  # (flow, its id) seen cancelled: no step starts
        self._launching: set[str] = set()  # tokens of this silo's intents being scheduled now
        self._recording: Counter[str] = Counter()  # flows with a step's record of ours not yet in their log
        self._wake = asyncio.Event()
        self._background: set[asyncio.Task[Any]] = set()
        self._loop = asyncio.get_running_loop().create_task(self._reconcile_loop(), name="flow-reconcile")
        self._loop.add_done_callback(log_if_failed)

    async def admit(self, event: AttemptEvent) -> bool | None:
        """Whether a step's attempt may start: never once its flow is cancelled, nor its step ended,
        nor while another copy of its job started and may still be running; claimed in the flow
        log (a ``run`` naming this copy's shard) before it starts.

        A cancel stops the steps whose shards the flow log names (``try_cancel_job``); a step
        whose intent was not yet confirmed when the cancel looked is in no shard it knows, and
        its writer, paused between its intent and its schedule call, adds the job after the
        cancel returned (simulator seed 92583 with flows: it started 0.9 s after "cancelled").
        The cancel's record lands before the call returns, so the flow log is read at each
        start; a flow seen cancelled is remembered. Undecided (asked again a little later)
        while the log cannot be read or written: a cancel that returned must hold."""
        found = _step_of(event.job)
        if found is None:
            return True
        flow, flow_id = found[0], event.job.metadata.get(FLOW_ID_META)
        if (flow, flow_id) in self._cancelled:
            return False
        verdict: bool | None = True
        shard, now = event.shard or None, self._now_us()

        def decide(state: FlowState) -> list[list[Any]]:
            nonlocal verdict
            step = state.steps.get(found[1])
            if state.plan.id != flow_id or step is None:
                verdict = True
                return []
            if state.cancelled_us is not None:
                self._cancelled.add((flow, flow_id))
                verdict = False
                return []
            if step.state in TERMINAL_STEP_STATES:
                # A step whose outcome the log holds never runs again: a writer paused between its
                # intent and its schedule call adds its job after a taker ran the step (simulator
                # seed 1489 with flows: the taker's search of the paused silo came before the add).
                verdict = False
                return []
            if step.started_shard not in (None, shard) and not _silent(step, self._limits, now):
                # Another copy started, and may be running or have ended with its outcome still on
                # its way here: a taker's search finds no job that ran before its shard was
                # compacted, and adds it again (simulator seeds 205777 and 205632, every kind: a
                # step ran twice, its first silo alive and writing how it ended). Asked again
                # until that copy's end lands (then refused) or it is silent for longer than an
                # attempt can last (lost with a killed silo: run here).
                verdict = None
                return []
            verdict = True
            return applied(state, [["run", found[1], event.attempt, *([shard] if shard else []), now]])

        try:
            await update(self._store, flow, decide)
        except StorageError as exc:
            log.warning("could not record a step's start in its flow; asking again", extra={"flow": flow,
                                                                                           "error": repr(exc)})
            return None
        return verdict

    async def attempt_ended(self, event: AttemptEvent, end: AttemptEnd) -> None:
        found = _step_of(event.job)
        if found is None:
            return
        flow, step = found
        at = datetime_to_us(end.ended_at)
        if end.retry_at is not None:
            record = ["retry", step, event.attempt, end.error, datetime_to_us(end.retry_at), at]
        elif end.succeeded:
            record = ["ok", step, event.attempt, at]
        else:
            record = ["fail", step, event.attempt, end.error, at]
        await self._record(flow, [record])

    async def attempt_unsure(self, event: AttemptEvent, end: AttemptEnd | None = None) -> None:
        found = _step_of(event.job)
        if found is not None and event.shard:
            self._spawn(self._settle_unsure(found[0], found[1], event, end))

    async def _settle_unsure(self, flow: str, step: str, event: AttemptEvent, end: AttemptEnd | None) -> None:
        """Record how an attempt whose outcome write was in doubt ended, read from its shard's
        log now: later, a drained shard may be deleted, and reconcile would take the step for
        one whose job was lost and run it again.

        A job no longer in its log whose attempt the silo knows succeeded is recorded as such:
        its removal may have been folded into a snapshot, which keeps only live jobs. Read as
        lost, the step ran again from another shard, its success durable and its silo alive
        (simulator seed 335398, every kind: the shard was rotated between the lost answer and
        this read)."""
        delay = RECORD_RETRY_S
        while True:
            try:
                outcome = await job_outcome(self._store, event.shard, event.job.id)
                break
            except StorageError as exc:
                log.warning("could not read an unsure step's outcome; trying again",
                            extra={"flow": flow, "error": repr(exc)})
                await asyncio.sleep(delay)
                delay = min(2 * delay, self._interval)
        at = self._now_us()
        if outcome == SUCCEEDED:
            await self._record(flow, [["ok", step, event.attempt, at]])
        elif outcome == EXHAUSTED:
            await self._record(flow, [["fail", step, event.attempt, "retries exhausted (outcome read from its shard)", at]])
        elif outcome == CANCELLED:
            await self._record(flow, [["cancelled", [step], at]])
        elif outcome is None and end is not None and end.succeeded and end.finished:
            await self._record(flow, [["ok", step, event.attempt, at]])
        # Still live: it runs again, and is told of again. Gone, how it ended unknown here:
        # reconcile runs it again.

    async def shard_loaded(self, jobs: Sequence[tuple[ScheduledJob, int, int]], adopted: bool) -> None:
        if adopted and any(_step_of(job) for job, _, _ in jobs):
            self._wake.set()

    async def close(self) -> None:
        self._loop.cancel()
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(self._loop, *self._background, return_exceptions=True)

    def _now_us(self) -> int:
        # The silo's reading of the store's time, as its attempts' start and end times are: a
        # step's due time and the silences reconcile measures then agree with its jobs' clock.
        return self._silo.clock.now_us()

    async def _schedule(self, jobs: Sequence[ScheduledJob], suspects: Sequence[str] = (),
                        settled: Sequence[str] = (), /) -> list[str]:
        # Straight into this silo's own shards: the same call a client makes, without Ray.
        items = [(job.id, datetime_to_us(job.due), pack(job.to_wire())) for job in jobs]
        return await (self._silo.schedule(items, suspects, settled) if settled else self._silo.schedule(items, suspects))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(log_if_failed)

    async def _record(self, flow: str, events: list[list[Any]]) -> None:
        """Record ``events`` now, or else in the background until they land.

        Only this silo knows them while they are not in the flow log: a step's outcome is
        durable in its shard, but reconcile reads it from there only once the step has been
        silent for an attempt's length, and a drained shard is deleted sooner. Given up on,
        a success would be taken for a lost job and its step run again.
        """
        self._recording[flow] += 1
        handed = False
        try:
            if not await self._try_record(flow, events):
                self._spawn(self._record_until_landed(flow, events))
                handed = True
        finally:
            if not handed:
                self._recorded(flow)

    async def _record_until_landed(self, flow: str, events: list[list[Any]]) -> None:
        delay = RECORD_RETRY_S
        try:
            while True:
                await asyncio.sleep(delay)
                if await self._try_record(flow, events):
                    return
                delay = min(2 * delay, self._interval)
        finally:
            self._recorded(flow)

    def _recorded(self, flow: str) -> None:
        self._recording[flow] -= 1
        if self._recording[flow] <= 0:
            del self._recording[flow]

    async def _try_record(self, flow: str, events: list[list[Any]]) -> bool:
        """Whether ``events`` are in the flow log now (or never can be: its log is damaged)."""
        try:
            await advance(self._store, flow, self._silo.owner, self._schedule, events, now_us=self._now_us,
                          launching=self._launching)
        except FlowLogDamaged as exc:
            log.error("flow log damaged: a step's record is lost", extra={"flow": flow, "error": repr(exc)})
            return True
        except Unconfirmed as exc:  # the events landed with the intent; its confirmation did not
            self._confirm_until_landed(exc)
            return True
        except Exception as exc:  # storage, or no silo took the dependants: never stop the silo
            log.warning("could not record a flow step; trying again", extra={"flow": flow, "error": repr(exc)})
            self._wake.set()
            return False
        return True

    def _confirm_until_landed(self, unconfirmed: Unconfirmed) -> None:
        """Write an intent's confirmation until it lands; until then the intent is this silo's
        launch under way, which reconcile does not take over (see ``Unconfirmed``)."""
        self._launching.add(unconfirmed.token)

        async def confirm() -> None:
            delay = RECORD_RETRY_S
            try:
                while True:
                    await asyncio.sleep(delay)
                    try:
                        await update(self._store, unconfirmed.flow, lambda s: applied(s, [unconfirmed.record]))
                        return
                    except FlowLogDamaged as exc:
                        log.error("flow log damaged: a confirmation is lost", extra={"flow": unconfirmed.flow,
                                                                                      "error": repr(exc)})
                        return
                    except StorageError as exc:
                        log.warning("could not confirm scheduled flow steps; trying again",
                                    extra={"flow": unconfirmed.flow, "error": repr(exc)})
                    delay = min(2 * delay, self._interval)
            finally:
                self._launching.discard(unconfirmed.token)

        self._spawn(confirm())

    async def _reconcile_loop(self) -> None:
        while True:
            try:
                await self.reconcile_all()
            except asyncio.CancelledError:
                raise
            except StorageError as exc:  # an outage: expected, and the next round tries again
                log.warning("flow reconcile round failed", extra={"error": repr(exc)})
            except Exception:
                log.exception("flow reconcile round failed")
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await wait_bounded(self._wake.wait(), self._interval)

    async def reconcile_all(self) -> None:
        """One reconcile pass over every flow not known to be finished."""
        members = await Membership(self._store).members()
        for head in await list_logs(self._store, FLOW_PREFIX):
            flow = head.base[len(FLOW_PREFIX):]
            if flow in self._finished:
                continue
            if flow in self._recording:
                # A step's outcome only this silo knows is still on its way to the log: read
                # without it, the step looks unfinished, and a takeover adds its job again where
                # a compaction dropped its removal, and it runs again here (simulator seed 472003
                # with every kind: paused 8 s after its success, the silo took its own step over
                # while the "ok" was being written, and ran it twice). Reconciled once it lands.
                continue
            try:
                state = await reconcile(self._store, flow, self._silo.owner, self._schedule, self._limits, members,
                                        now_us=self._now_us, launching=self._launching)
            except Unconfirmed as exc:
                self._confirm_until_landed(exc)
                continue
            except (EarlierTryUnsettled, ScheduleInDoubt, SiloStopping) as exc:
                # A writer it takes over from is not proven dead yet, or the schedule call failed:
                # its intent stays unconfirmed, and the next round takes it over again.
                log.info("flow steps not scheduled yet", extra={"flow": flow, "error": repr(exc)})
                continue
            if state is not None and state.finished:
                self._finished.add(flow)
