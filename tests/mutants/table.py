"""The planted bugs (issue 24, deliverable 7), each with the smallest command that must catch it.

A mutant whose catcher is the simulator runs seeds 0..199 with the default fault kinds: the first
chunk ``make test`` runs, so whatever these seeds catch, CI catches (``python -m tests.mutants
--hunt NAME`` shows which seeds). ``also`` names further commands that must catch it as well (the
simulator beside a unit test), so that weakening either check shows. ``expects`` names a check
that must catch it but is not merged yet: until then it survives, and the table says why.
"""

from __future__ import annotations

from tests.mutants.model import Mutant, Pytest, Sim

EARLY = "early by 50 ms on a fault path"
FLOWS = "default,+flows"  # the flow seeds these were found in (flows a default kind since)
# Every kind as the seeds below were found with it, before the registry-buckets kind joined ``all``
# (a seed drawing buckets runs another world), as FOUND replays them (``LATER_KINDS``).
ALL = "all,-buckets"
# Every kind as FOUND replays seeds found since the joins kind: the kinds named, so later ones stay off.
EVERY_KIND = ("all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,"
              "+buckets,+joins")
UNDURABLE = "acknowledge before durable"
FIFTY_MS = '__import__("datetime").timedelta(milliseconds=50)'

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        name="next-occurrence-early",
        kind=EARLY,
        path="cluster/runtime/outcomes.py",
        old="""        nxt = next_occurrence(job.schedule, scheduled, entry[OCCURRENCE], job.repeats, job.ttl)
        if nxt is None:
            return None, 0, 0, False
""",
        new=f"""        nxt = next_occurrence(job.schedule, scheduled, entry[OCCURRENCE], job.repeats, job.ttl)
        if nxt is None:
            return None, 0, 0, False
        nxt -= {FIFTY_MS}
""",
        catch=Sim(0, 200),
        why="a recurring job's next occurrence starts 50 ms before the time its schedule gave the client",
    ),
    Mutant(
        name="catch-up-early-after-outage",
        kind=EARLY,
        path="cluster/runtime/loading.py",
        old="times = None if plan.next_due is None else shaped_next(job, plan.next_due, self._metrics)[0]",
        new=f"times = None if plan.next_due is None else shaped_next(job, plan.next_due - {FIFTY_MS}, self._metrics)[0]",
        # The simulator schedules fire_all jobs only: no seed reaches this path (tell the model's author).
        catch=Pytest(("tests/runtime/test_shape.py::test_a_missed_occurrence_skipped_on_load_resumes_at_the_next_allowed_jittered_one",
                     "tests/runtime/test_loading.py")),
        why="after an outage, a SKIP job's occurrence after the missed ones starts 50 ms early (only a load "
            "after a failover or of a dormant shard runs this path)",
    ),
    Mutant(
        name="catch-up-early-after-late-run",
        kind=EARLY,
        path="cluster/runtime/outcomes.py",
        old="                nxt = cap_fire_all(job.schedule, nxt, now)\n",
        new=f"                nxt = cap_fire_all(job.schedule, nxt, now) - {FIFTY_MS}\n",
        catch=Sim(0, 200),
        why="a fire_all job whose run ended past its next due time (late: an outage, a slow handler) catches up "
            "with occurrences 50 ms early",
    ),
    Mutant(
        name="file-append-unsynced",
        kind=UNDURABLE,
        path="storage/file.py",
        old="""                    os.ftruncate(fd, end)
                os.fsync(fd)
""",
        new="""                    os.ftruncate(fd, end)
""",
        catch=Pytest(("tests/storage/test_file_durability.py::test_every_acknowledged_write_is_on_disk_when_the_call_returns",)),
        why="an acknowledged append is still in the page cache: a power cut loses a job the client was told is scheduled",
    ),
    Mutant(
        name="file-meta-unflushed",
        kind=UNDURABLE,
        path="storage/file.py",
        old="""            f.flush()
            os.fsync(f.fileno())
""",
        new="""            os.fsync(f.fileno())
""",
        catch=Pytest(("tests/storage/test_file_durability.py::test_every_acknowledged_write_is_on_disk_when_the_call_returns",)),
        why="the fsync of the new .meta reaches none of it (still in Python's buffer): the rename may land on an empty file",
    ),
    Mutant(
        name="file-rename-unsynced",
        kind=UNDURABLE,
        path="storage/file.py",
        old="        _fsync_dir(final.parent)  # the rename itself must survive a power cut\n",
        new="",
        catch=Pytest(("tests/storage/test_file_durability.py::test_every_acknowledged_write_is_on_disk_when_the_call_returns",)),
        why="the .meta rename that commits an append is not durable: a power cut rolls the log back past acknowledged writes",
    ),
    Mutant(
        name="schedule-acks-before-append",
        kind=UNDURABLE,
        path="cluster/runtime/ownership.py",
        old="                entries = await shard.write(ops)\n",
        new="                entries = []\n                asyncio.ensure_future(shard.write(ops))\n",
        catch=Pytest(("tests/runtime/test_scheduling.py::test_schedule_returns_only_once_its_append_is_durable",)),
        also=(Sim(0, 200),),
        why="schedule returns while its ADD is still being appended: a failed append loses an acknowledged job",
    ),
    Mutant(
        name="cancel-queued-writes-nothing",
        kind="a cancel that writes nothing",
        path="cluster/runtime/cancel.py",
        old="            await shard.write(ops)\n",
        new="            pass\n",
        catch=Sim(0, 200),
        also=(Pytest(("tests/runtime/test_dormant.py::test_concurrent_cancels_of_one_dormant_shard_share_one_look_and_one_append",)),),
        why="cancel answers 'cancelled' having only unqueued the job: the shard's next owner (after a kill) fires it",
    ),
    Mutant(
        name="cancel-running-writes-nothing",
        kind="a cancel that writes nothing",
        path="cluster/runtime/cancel.py",
        old="            await run.shard.write([remove_op(run.job_id, run.entry[OCCURRENCE], CANCELLED)])\n",
        new="            pass\n",
        # The simulator stopped catching it (0 of seeds 0-599 with every kind): a cancel now waits
        # for the run's end, whose outcome, written before the cancel returns, records the
        # cancel itself. The REMOVE left out matters when that outcome cannot be written.
        catch=Pytest(("tests/runtime/test_cancel.py::test_a_cancel_of_a_running_job_whose_write_fails_lets_the_attempt_record_its_outcome",)),
        why="a cancel of a job in flight answers 'cancelled' with no REMOVE of its own: if the run's outcome is "
            "lost too, the next owner fires the occurrence again",
    ),
    Mutant(
        name="lease-one-heartbeat-too-long",
        kind="a lease one heartbeat too long",
        path="cluster/runtime/lease.py",
        old="        self.until = lease_end(written_from, self._suspicion)\n",
        new="        self.until = lease_end(written_from, self._suspicion) + 1.0  # one heartbeat_interval of the tests\n",
        catch=Sim(0, 200),
        why="a silo cut off from the store fires for a heartbeat after its peers may have adopted its shards",
    ),
    Mutant(
        name="claim-before-lease-ends",
        kind="a claim without proof",
        path="cluster/runtime/logowner.py",
        old="    return since is not None and now >= since\n",
        new="    return since is not None\n",
        catch=Sim(0, 200),
        why="a shard is adopted as soon as its owner is declared dead, while the owner's lease still lets it fire",
    ),
    Mutant(
        name="claim-from-live-owner",
        kind="a claim without proof",
        path="cluster/runtime/logowner.py",
        old="""        # that was merely slow learns it from its own failed heartbeat and stops firing.
        return None
""",
        new="""        # that was merely slow learns it from its own failed heartbeat and stops firing.
        return float("-inf")
""",
        catch=Sim(0, 200),
        why="a shard is adopted from an owner never declared dead: two silos fire one shard",
    ),
    Mutant(
        name="lost-remove-moved",
        kind="a lost REMOVE(MOVED)",
        path="cluster/runtime/outcomes.py",
        old="            await run.shard.write([decision])\n",
        new="            if run.shard.state is not None:\n                run.shard.state.apply_undoably([decision])\n",
        catch=Sim(0, 200),
        why="the move to the next window is carried out but its decision never reaches the source's log: the "
            "source's next owner runs the occurrence again beside the moved chain",
    ),
    Mutant(
        name="withdraw-drops-nothing",
        kind="a withdraw that drops nothing",
        path="handlers/base.py",
        old="""            if waiting.pop(run_id, None) is not None:
                dropped.append(run_id)
            withdrawn[run_id] = keep_until + _WITHDRAWN_MARGIN
""",
        new="""            if waiting.get(run_id) is not None:
                dropped.append(run_id)
""",
        catch=Sim(0, 200),
        why="the handler answers 'dropped' yet starts the job at its due time: it runs after cancel returned 'cancelled'",
    ),
    Mutant(
        name="pause-not-written",
        kind="a pause that isn't written",
        path="cluster/runtime/pausing.py",
        old="""            try:
                await shard.write([op])
            except StorageError:
""",
        new="""            try:
                if shard.state is not None:
                    shard.state.apply_undoably([op])
            except StorageError:
""",
        catch=Sim(0, 200),
        why="pause answers 'paused' from memory alone: the shard's next owner fires the paused job",
    ),
    Mutant(
        name="pause-withdraws-nothing",
        kind="a pause that leaves a run sent ahead",
        path="cluster/runtime/pausing.py",
        old="""        if not run.delivering:
            return
""",
        new="""        if not run.delivering or run.sent_ahead is not None:
            return
""",
        catch=Sim(0, 200),
        also=(Pytest(("tests/runtime/test_dispatch_ahead.py::"
                      "test_a_job_sent_ahead_by_every_copy_of_a_shard_taken_back_twice_never_starts_once_stopped",)),),
        why="a job sent ahead to wait in its handler starts at its due time after pause returned 'paused' (the "
            "simulator judged pauses by sends until issue 24: seeds 0-399 let it through)",
    ),
    Mutant(
        name="pause-answers-before-the-handler",
        kind="a pause answered before an attempt on its way",
        path="cluster/runtime/pausing.py",
        old="        await run.wait_answered()\n",
        new="        pass\n",
        catch=Sim(0, 200),
        also=(Pytest(("tests/runtime/test_dispatch_ahead.py::"
                      "test_a_pause_whose_withdraw_gets_no_answer_waits_for_the_run_and_nothing_follows_it",
                      "tests/runtime/test_pause.py::"
                      "test_a_pause_during_an_attempt_lets_it_finish_and_its_next_occurrence_moves_paused")),),
        why="a pause answers 'paused' while an attempt it cannot withdraw is on its way (a slow delivery, a handler "
            "that is not a JobHandler, a withdraw without an answer), and it starts after (simulator seeds 73, 78)",
    ),
    Mutant(
        name="answer-before-a-dead-owners-sends-end",
        kind="a cancel or pause answered while a killed silo's attempt sent ahead may start",
        path="cluster/runtime/adoption.py",
        old="        shard.sent_before_until = self._sends_until(base, meta.owner)\n",
        new="        pass\n",
        # Seeds 23 and 33, then 368 (re-hunted at 7bba342) caught it; the retry window moved their
        # worlds this stop: the runtime test is its catcher.
        catch=Pytest(("tests/runtime/test_proven_gone.py::"
                      "test_a_cancel_or_pause_of_a_shard_taken_at_once_from_an_exited_silo_holds_for_what_it_sent_ahead",)),
        why="a shard taken at once from a silo whose process exited answers 'cancelled' or 'paused' while what that "
            "silo sent ahead waits in its handler under its lease, and it starts after (simulator seeds 23, 33)",
    ),
    Mutant(
        name="taken-back-forgets-a-dead-owners-sends",
        kind="a cancel or pause answered while a killed silo's attempt sent ahead may start",
        path="cluster/runtime/adoption.py",
        old="            new.sent_before_until = self._sends_until(shard.base, self._me.owner)\n",
        new="            pass\n",
        catch=Pytest(("tests/runtime/test_sent_before_lease.py::"
                      "test_a_cancel_in_a_shard_taken_back_waits_out_the_lease_of_the_owner_it_was_adopted_from",
                      "tests/runtime/test_sent_before_lease.py::"
                      "test_a_pause_in_a_shard_taken_back_waits_out_the_lease_of_the_owner_it_was_adopted_from")),
        why="a shard adopted from a silo whose process exited, then taken back from its own log before that silo's "
            "lease ended, answers 'cancelled' or 'paused' at once while what the dead silo sent ahead may still start",
    ),
    Mutant(
        name="stop-releases-before-a-dead-owners-sends-end",
        kind="a cancel or pause answered while a killed silo's attempt sent ahead may start",
        path="cluster/runtime/silo.py",
        old="        first = {shard for shard in self._r.shards if shard.sent_before_until <= now}\n",
        new="        first = set(self._r.shards)\n",
        catch=Pytest(("tests/runtime/test_silo.py::"
                      "test_a_silo_stopped_just_after_adopting_from_an_exited_silo_releases_that_shard_only_once_its_sends_end",)),
        why="a silo stopped just after adopting an exited silo's shard releases it at once; its next owner, claiming "
            "a released shard, answers 'cancelled' or 'paused' while what the dead silo sent ahead may still start",
    ),
    Mutant(
        name="claim-in-doubt-forgets-a-dead-owners-sends",
        kind="a cancel or pause answered while a killed silo's attempt sent ahead may start",
        path="cluster/runtime/adoption.py",
        old="        until = max(self._lease_left_over(owner), self._sent_before.pop(base, float(\"-inf\")))\n",
        new="        until = self._lease_left_over(owner)\n",
        catch=Pytest(("tests/runtime/test_sent_before_lease.py::"
                      "test_a_claim_whose_answer_was_lost_waits_out_the_lease_once_the_next_round_takes_its_shard",)),
        why="a claim of an exited silo's shard whose answer was lost is taken again as this silo's own, and that copy "
            "answers 'cancelled' or 'paused' at once while what the dead silo sent ahead may still start",
    ),
    Mutant(
        name="memory-append-unfenced",
        kind="skip fencing",
        path="storage/memory.py",
        old="""        log = self._match(name, if_match)
        if log.blocks >= self.max_blocks:""",
        new="""        log = self._get(name)
        if log.blocks >= self.max_blocks:""",
        catch=Sim(0, 200),
        why="an append with a stale ETag lands: a fenced (adopted-from) owner keeps writing its old shard",
    ),
    Mutant(
        name="schedule-takeback-writes-nothing",
        kind="a take-back that writes nothing",
        path="cluster/runtime/cancel.py",
        old="                await shard.write([remove_op(job_id, 1, CANCELLED) for job_id in job_ids if job_id not in started])\n",
        new="                pass\n",
        catch=Pytest(("tests/runtime/test_scheduling.py::test_a_call_whose_batch_for_one_window_fails_leaves_none_of_its_jobs",)),
        also=(Sim(0, 200),),
        why="a schedule call that failed leaves the batch that landed in place: a client told 'failed' gets jobs fired",
    ),
    Mutant(
        name="takeback-misses-a-landed-job-that-ran",
        kind="a failed call answered failed though part of it ran",
        path="cluster/runtime/scheduling.py",
        old="                started = await self._cancelling.withdraw(shard, job_ids, landed=landed)\n",
        new="                started = await self._cancelling.withdraw(shard, job_ids)\n",
        catch=Pytest(("tests/runtime/test_scheduling.py::"
                      "test_a_failed_call_whose_landed_job_ran_meanwhile_is_answered_in_doubt_not_failed",)),
        also=(Sim(431343, 1, "all"),),
        why="a failed call's landed job that ran before the take-back is answered 'failed': the client, told nothing fires, saw it run",
    ),
    Mutant(
        name="retry-writes-what-it-found",
        kind="a retried call that adds a second copy",
        path="cluster/runtime/scheduling.py",
        old="        batches = {w: [jobs[i] for i in ix if not names[i]] for w, ix in by_window.items()}\n",
        new="        batches = {w: [jobs[i] for i in ix] for w, ix in by_window.items()}\n",
        catch=Pytest(("tests/runtime/test_scheduling.py::"
                      "test_a_retry_that_finds_its_job_where_the_chain_moved_through_writes_nothing_and_leads_a_cancel_on",)),
        # The seed whose retry answered a shard the earlier try's chain moved through: the oracle
        # that now accepts such an answer must still see the copy written beside the chain.
        also=(Sim(22, 12, ALL),),  # re-hunted at 7bba342: 22 and 33 (207672's world moved)
        why="a retried schedule call answers the earlier try's shard yet writes the jobs again: two live chains",
    ),
    Mutant(
        name="lease-end-without-skew-margin",
        kind="a lease one heartbeat too long",
        path="cluster/runtime/firing.py",
        old="        lease_end = self._lease.handler_end()\n",
        new="        lease_end = self._lease.wall_end()\n",
        catch=Sim(0, 200),
        also=(Pytest(("tests/runtime/test_dispatch_ahead.py::"
                      "test_a_handler_whose_clock_runs_behind_starts_nothing_of_a_silo_whose_shard_a_peer_took",)),),
        why="a handler whose clock runs behind the store's (within max_clock_skew) starts a silo's work after a peer "
            "took its shard (simulator seed 10861)",
    ),
    Mutant(
        name="resume-answered-from-a-lost-shard",
        kind="a claim without proof",
        path="cluster/runtime/ownership.py",
        old="        if lease.valid and self.holds(shard):\n",
        new="        if self.holds(shard):\n",
        catch=Pytest(("tests/runtime/test_pause_lease.py",)),
        why="a silo resumed from SIGSTOP past its lease answers a resume from memory of a shard a peer took: "
            "\"not paused\", and the job stays paused for good (simulator seed 349)",
    ),
    Mutant(
        name="shard-created-past-the-lease",
        kind="a claim without proof",
        path="cluster/runtime/ownership.py",
        old="        if self._lease.valid:\n            return\n",
        new="        if True:\n            return\n",
        catch=Pytest(("tests/runtime/test_create_lease.py",)),
        why="a silo past its lease creates a fresh shard and adds to it: a peer that declared it dead and searched "
            "its shards misses it, and what it adds runs beside the taker's copy (simulator seed 1489 with flows)",
    ),
    Mutant(
        name="cancel-answered-from-a-lost-shard",
        kind="a claim without proof",
        path="cluster/runtime/cancel.py",
        old="        if not await self._shards.answers_for(shard, self._lease):\n",
        new="        if False:\n",
        catch=Pytest(("tests/runtime/test_cancel_lease.py",)),
        why="a silo past its lease answers a cancel \"moved\" from memory of a shard a peer took and moved on "
            "elsewhere: the client follows it to a target that never held the job, which runs on",
    ),
    Mutant(
        name="flow-step-on-a-running-dependency",
        kind="a flow step before its dependencies",
        path="cluster/flows/log.py",
        old="            and all(self.steps[d].state == SUCCEEDED_STEP for d in s.depends_on)\n",
        new="            and all(self.steps[d].state in (SUCCEEDED_STEP, RUNNING) for d in s.depends_on)\n",
        catch=Sim(2000, 200, FLOWS),
        why="a step starts while a step it depends on is still running: its input may not exist, and it runs "
            "even when that step then fails",
    ),
    Mutant(
        name="flow-cancel-leaves-steps-scheduled",
        kind="a flow cancel that does not hold",
        path="cluster/flows/api.py",
        old="                    await self._client.try_cancel_job(dataclasses.replace(job, shard=step.shard))\n",
        new="                    pass\n",
        catch=Sim(2000, 200, FLOWS),
        why="flows.cancel returns True and marks the flow cancelled, but its steps' jobs already scheduled "
            "(waiting for their due time or a retry) still start",
    ),
    Mutant(
        name="flow-resubmit-not-moved-on",
        kind="an acknowledged flow lost",
        path="cluster/flows/api.py",
        old="            await self._define(store, plan)\n",
        new="""            try:
                await create_log(store, plan)
            except AlreadyExists:
                existing = await read_flow(store, plan.name)
                if existing is None or _definition(existing.plan) != _definition(plan):
                    raise FlowExists("name", "a different flow already has this name", plan.name) from None
                return existing.status()
""",
        catch=Sim(2000, 200, FLOWS),
        also=(Pytest(("tests/flows/test_recovery.py::test_a_flow_submitted_again_after_a_failed_submit_runs",)),),
        why="a flow submitted again after a submit that failed half way is acknowledged, yet none of its steps "
            "ever runs (the bug as the simulator found it, seed 15 then)",
    ),
    Mutant(
        name="flow-takeover-without-suspects",
        kind="a flow step run twice",
        path="cluster/flows/progress.py",
        old="    shards = await (schedule(jobs, suspects, settled) if settled else schedule(jobs, suspects) if suspects\n"
            "                    else schedule(jobs))\n",
        new="    shards = await schedule(jobs)\n",
        # At 7bba342 seeds 122, 212, 247, 289, 310, 325 and 366 of 0-399 (every kind) caught it; 122
        # no longer does once this stop's fixes moved its world (hunt again:
        # `python -m tests.mutants --hunt NAME --seeds 400 --faults all,-buckets`). The test catches it.
        catch=Pytest(("tests/flows/test_recovery.py::"
                      "test_a_step_taken_over_twice_searches_every_earlier_writer_in_the_first_ones_window",)),
        why="a silo taking over a flow step from a paused or falsely dead writer adds its job again beside the "
            "copy that writer added: the step runs twice, from two shards",
    ),
    Mutant(
        name="flow-takeover-kept-by-its-taker",
        kind="an acknowledged flow lost",
        path="cluster/flows/progress.py",
        old="                await hand_over(store, flow, state.intents[token], owner, exc.holders, now_us=now_us)\n",
        new="                pass\n",
        catch=Pytest(("tests/flows/test_recovery.py::"
                      "test_a_takeover_the_taker_cannot_settle_is_handed_to_the_silo_holding_the_shard",)),
        why="a silo taking over a client's flow step that only the live holder of a shard can settle keeps it, "
            "and the step never runs (simulator seeds 90830, 90973)",
    ),
    Mutant(
        name="flow-takeover-two-holders-kept",
        kind="an acknowledged flow lost",
        path="cluster/flows/progress.py",
        old="        if not waiting:\n",
        new="        if len(holders) != 1 or not waiting:\n",
        catch=Pytest(("tests/flows/test_recovery.py::"
                      "test_a_takeover_two_live_holders_refuse_goes_from_holder_to_holder",)),
        # Seed 220668 caught it when found; no seed of 0-399 (every kind) reaches it at 7bba342.
        why="a client's flow step whose takeover two live holders refuse is handed to neither, and waits as long "
            "as both hold their shards: the acknowledged flow never runs (simulator seed 220668, every kind)",
    ),
    Mutant(
        name="settled-holder-waited-on",
        kind="an acknowledged flow lost",
        path="cluster/runtime/scheduling.py",
        old="                if owner not in settled and not await self._fenced_from_suspects(",
        new="                if not await self._fenced_from_suspects(",
        catch=Pytest(("tests/runtime/test_scheduling.py::"
                      "test_a_retry_searches_a_settled_holders_shard_without_waiting_on_it",)),
        # Seed 220668 caught it when found; no seed of 0-399 (every kind) reaches it at 7bba342.
        why="a retry handed on from holder to holder still waits on the holders that settled it: with two live "
            "holders a client's flow step is passed back and forth and never runs (simulator seed 220668)",
    ),
    Mutant(
        name="flow-step-admitted-after-cancel",
        kind="a flow cancel that does not hold",
        path="cluster/flows/hooks.py",
        old="            if state.plan.id != flow_id or step is None:\n",
        new="            if True:\n",
        catch=Pytest(("tests/flows/test_recovery.py::"
                      "test_a_step_its_writer_adds_after_the_cancel_returned_does_not_start",)),
        why="a step whose paused writer adds its job after flows.cancel returned True starts (simulator seed 92583)",
    ),
    Mutant(
        name="next-occurrence-queued-while-it-runs",
        kind="an occurrence run twice",
        path="cluster/runtime/outcomes.py",
        old="        if new_entry is not None and (started is None or started is run or started.entry is not new_entry):\n",
        new="        if new_entry is not None:\n",
        catch=Pytest(("tests/runtime/test_move_retake_race.py::"
                      "test_a_move_a_take_back_carried_out_while_its_outcome_wrote_it_runs_the_next_occurrence_once",)),
        # Seed 1259 caught it when found; no seed of 0-1999 (default kinds) or 0-599 (every kind) reaches it now.
        why="an older copy's outcome, written while a take-back of its shard carried out the same move and its "
            "next occurrence already runs, queues that occurrence again: it runs twice from one shard, its silo alive",
    ),
    Mutant(
        name="flow-step-second-copy-admitted",
        kind="a flow step run twice",
        path="cluster/flows/hooks.py",
        old="            if step.started_shard not in (None, shard) and not _silent(step, self._limits, now):\n",
        new="            if False:\n",
        catch=Pytest(("tests/flows/test_recovery.py::"
                      "test_a_second_copy_of_a_step_waits_while_the_first_may_run_and_never_starts_after_it",)),
        why="a taker that found no trace of a step's job (it ran before its shard was compacted, its end still on "
            "its way to the flow log) adds it again, and the second copy starts: the step runs twice, its silo "
            "alive (simulator seeds 205777 and 205632, every kind)",
    ),
    Mutant(
        name="flow-confirmation-given-up",
        kind="a flow step run twice",
        path="cluster/flows/progress.py",
        old="        raise Unconfirmed(state.plan.name, sched, exc) from exc\n",
        new="        raise\n",
        catch=Pytest(("tests/flows/test_recovery.py::"
                      "test_a_silo_whose_confirmation_failed_writes_it_again_and_does_not_take_its_step_over",)),
        why="a silo whose write of a step's confirmation failed takes its own intent over: the step, run and gone "
            "with its drained shard, runs again (simulator seed 93052)",
    ),
    Mutant(
        name="flow-silent-from-first-try",
        kind="a flow step run twice",
        path="cluster/flows/progress.py",
        old="        return now_us - max(step.due_us, step.scheduled_us or 0) > limits.staging_us + limits.attempt_us\n",
        new="        return now_us - step.due_us > limits.staging_us + limits.attempt_us\n",
        catch=Pytest(("tests/flows/test_recovery.py::"
                      "test_a_step_taken_over_is_silent_only_counting_from_when_it_was_scheduled",)),
        why="a step taken over is judged silent from its first try's due time, at once, and run again while its "
            "end is on its way to the flow log",
    ),
    Mutant(
        name="flow-retry-silent-from-its-due-time",
        kind="a flow step run twice",
        path="cluster/flows/progress.py",
        old="        return now_us - max(step.next_retry_us, step.retried_us or 0) > limits.staging_us + limits.attempt_us\n",
        new="        return now_us - step.next_retry_us > limits.staging_us + limits.attempt_us\n",
        catch=Pytest(("tests/flows/test_recovery.py::"
                      "test_a_retrying_step_is_silent_only_counting_from_when_its_retry_was_recorded",)),
        why="an overdue step's retry, due at once by its policy, is judged silent from then: its shard is read while "
            "its live silo is still recording how it ended, and it runs again from another shard (seed 201061 "
            "found it; its world changed with the fix of flow-empty-first-generation-read-as-no-flow)",
    ),
    Mutant(
        name="flow-empty-first-generation-read-as-no-flow",
        kind="a flow step run twice",
        path="cluster/flows/log.py",
        old="        repaired = NEXT_KEY in fetched.metadata or not data\n",
        new="        repaired = NEXT_KEY in fetched.metadata\n",
        # Seed 170 caught it until the adoption change moved its world (1d91ef9); no seed of 0-599
        # (every kind but buckets) reaches it since (`--hunt`). The test catches it.
        catch=Pytest(("tests/flows/test_damage.py::test_a_first_generation_created_again_by_a_submit_hides_no_record",)),
        why="a submit of a flow again creates its log's first generation anew (a repair deleted it); read empty as "
            "\"no such flow\", a silo's record of a step's success is dropped, and the step runs again",
    ),
    Mutant(
        name="flow-log-appended-after-a-torn-tail",
        kind="a damaged log not repaired",
        path="cluster/flows/log.py",
        old="        if not state.torn and state.damage is None:\n",
        new="        if True:\n",
        catch=Pytest(("tests/flows/test_damage.py",)),
        why="a writer appends after a torn tail instead of moving the log on: the tail is taken for damage",
    ),
    Mutant(
        name="dormant-fold-not-brought-up-to-date",
        kind="a stale read",
        path="cluster/runtime/dormant.py",
        old="            if self.state is not None:\n",
        new="            if self.state is not None:\n                return self.state\n",
        catch=Pytest(("tests/runtime/test_dormant.py::test_a_kept_fold_sees_what_the_shards_new_owner_wrote_since",)),
        why="a dormant shard's kept fold answers from what its log said at the first look: a job the shard's new "
            "owner cancelled since is removed again (fenced) instead of answered absent, one added since is absent",
    ),
    Mutant(
        name="named-clearance-kept-across-a-reload",
        kind="a superseded definition run",
        path="cluster/named/hooks.py",
        old="                self.clearance.recheck(key, job.id, job.generation)\n",
        new="                self.clearance.prefetch(key, job.id, job.generation)\n",
        catch=Pytest(("tests/named/test_fence.py::"
                      "test_an_older_generation_whose_cancel_a_damaged_frame_lost_does_not_start_where_it_was_cleared",)),
        # Seed 206727 (every kind) found it and caught it until this stop's retry window moved its world.
        why="a silo claiming back a shard whose REMOVE of an overwritten named job was damaged admits the job from "
            "a clearance it remembered from before it handed the shard over: the older generation starts after the put returned",
    ),
    Mutant(
        name="retry-refused-while-its-silo-writes-other-jobs",
        kind="an acknowledged flow lost",
        path="cluster/runtime/scheduling.py",
        old="        if self._me.silo_id in silos and any(self._writing[i] for ids in ids_by_window.values() for i in ids):\n",
        new="        if self._me.silo_id in silos and self._calls:\n",
        catch=Pytest(("tests/runtime/test_scheduling.py::"
                      "test_a_retry_naming_this_silo_waits_only_for_a_call_here_writing_the_same_jobs",)),
        # Seed 202493 caught it when found; no seed of 0-399 (every kind) reaches it at 7bba342.
        why="a retry naming this silo is refused while any schedule call is under way here: a flow step handed to "
            "the one silo able to settle it is put off round after round, and an acknowledged flow never runs "
            "(simulator seed 202493 with every fault)",
    ),
    Mutant(
        name="flow-admission-held-past-its-cancel",
        kind="a flow cancel that does not hold",
        path="cluster/runtime/firing.py",
        old="        runs = self._admission_held(runs)\n",
        new="",
        catch=Pytest(("tests/flows/test_cancel_admitted.py::"
                      "test_a_step_admitted_before_the_cancel_and_stalled_past_it_does_not_start",)),
        why="a flow step admitted before its flow's cancel, its silo stalled before the send, starts after the "
            "cancel returned True",
    ),
    Mutant(
        name="claim-waits-for-the-lease",
        kind="a silo frozen for good",
        path="cluster/runtime/moves.py",
        old="                entry = await self.settle(source, job_id, wait=False)\n",
        new="                entry = await self.settle(source, job_id)\n",
        catch=Pytest(("tests/runtime/test_claim_lease.py",)),
        # Seed 216011 caught it when found; no seed of 0-399 (every kind) reaches it at 7bba342.
        why="a claim whose shard's move needs a fresh target waits for a lapsed lease that only the heartbeat "
            "renews, in the heartbeat's own round or in the start's before the heartbeat runs: the silo never "
            "fires or answers again (simulator seeds 216088 and 216011 with every fault)",
    ),
    Mutant(
        name="named-put-early",
        kind=EARLY,
        path="cluster/named/api.py",
        old="                self.client.resolve_target(parse_target(target)), name, due=due_time, data=data,\n",
        new=f"                self.client.resolve_target(parse_target(target)), name, due=due_time - {FIFTY_MS}, data=data,\n",
        # Judged by the due time the simulated caller passed to put, not the job's first fire
        # (which carries the bug): until then every seed passed.
        catch=Sim(0, 200),
        why="a named job's first run starts 50 ms before the due time its put was given",
    ),
    Mutant(
        name="batch-sent-twice",
        kind="a duplicate an allowance absorbs",
        path="cluster/runtime/firing.py",
        old="                outcomes = await self._transport.deliver(target, handle, attempts, timeout, lease_end, ahead)\n",
        new="                await self._transport.deliver(target, handle, attempts, timeout, lease_end, ahead)\n"
            "                outcomes = await self._transport.deliver(target, handle, attempts, timeout, lease_end, ahead)\n",
        # The duplicate check excuses a second success of one run as Ray's redelivery while the
        # first's outcome is not durable: those the ceiling on that allowance sees, happening many
        # times more often than Ray does it (the test's first assert: seeds 1-12 stay under every
        # ceiling). A resend after the outcome landed fails seeds as a duplicate (15 of 0-39).
        catch=Pytest(("tests/sim/test_sim.py::test_a_ceiling_catches_a_resent_batch_the_redelivery_allowance_absorbs",)),
        why="a silo sends each batch twice under the same run ids: every job it fires runs twice",
    ),
    Mutant(
        name="memory-answers-behind-a-doubt",
        kind="a pause that does not hold",
        path="cluster/runtime/ownership.py",
        old="        if (shard.writer.doubt_disowned or shard.writer.stopped is not None) and self.holds(shard):\n",
        new="        if False:\n",
        # Seed 579 found it; once the retry window moved its world, no seed of 0-999 (every kind)
        # reaches it: the runtime test is its catcher.
        catch=Pytest(("tests/runtime/test_pause_doubt.py",)),
        why="a pause answers \"already paused\" from memory while a resume that raised had landed in the log: "
            "the shard, taken back from its log, resumes the job and it starts after the pause returned",
    ),
    Mutant(
        name="drained-shard-deleted-under-retries",
        kind="a duplicate an allowance absorbs",
        path="cluster/runtime/loading.py",
        old="                and max(shard.held_since, shard.added_at) <= retried\n",
        new="                and True\n",
        catch=Pytest(("tests/runtime/test_retry_window.py",)),
        # The simulator excuses a job added again once its earlier try's shard is gone (a ceiling
        # bounds how often): the runtime test is the catcher.
        why="a drained shard is deleted while a retried schedule call may still look for it: a job its "
            "earlier try ran to the end is added again and runs again, every occurrence of a recurring one",
    ),
    Mutant(
        name="rotation-fails-what-its-snapshot-holds",
        kind="a cancel that does not hold",
        path="storage/log.py",
        old="        covered = [sub for sub in self._queue if sub.action is None]\n"
            "        self._queue = deque(sub for sub in self._queue if sub.action is not None)\n",
        new="        covered = []\n"
            "        while self._queue and self._queue[0].action is None:\n"
            "            covered.append(self._queue.popleft())\n",
        catch=Pytest(("tests/runtime/test_rotation_cancel.py", "tests/storage/test_rotation_commit.py")),
        # Seed 263574 (every kind) found it on c8fb34c; worlds have moved since.
        why="a rotation counts as covered only the records ahead of a queued metadata change: a cancel's removal "
            "behind a firing mark that then fails is reported failed though the snapshot made it durable, the "
            "job is put back and runs after its log said it was gone",
    ),
    Mutant(
        name="move-target-read-after-a-failed-claim",
        kind="a claim without proof",
        path="cluster/runtime/roles.py",
        old="    moves.claim_orphan = adoption.claim_to_fence\n",
        new="    moves.claim_orphan = adoption.claim_for_cancel\n",
        catch=Pytest(("tests/runtime/test_move_fence_doubt.py",)),
        # Seed 256531 (every kind) found it on c8fb34c; worlds have moved since.
        why="settling a move reads its target as proof though the claim that would fence the target's old writer "
            "failed in the store (or is still under way): that writer's late ADD lands and the occurrence runs "
            "from two shards",
    ),
    Mutant(
        name="own-rejoin-taken-for-a-newer-process",
        kind="a silo silent for good",
        path="cluster/runtime/heartbeat.py",
        old="        if self._joining is not None and row.token == self._joining[0]:\n"
            "            return False  # our own rejoin, landed unanswered: the next join takes it up\n",
        new="",
        catch=Pytest(("tests/runtime/test_heartbeat.py",)),
        # Seed 260256 (every kind) found it on c8fb34c; worlds have moved since.
        why="a rejoin whose row write landed but timed out is taken, at the next beat, for a newer process of the "
            "same silo: this one ends for good, and its shards and buckets wait for a suspicion timeout",
    ),
    Mutant(
        name="retry-fails-on-a-shard-deleted-after-its-listing",
        kind="a flow that never runs",
        path="cluster/runtime/scheduling.py",
        old="        except NotFound:\n            return ()\n",
        new="        except NotFound:\n            raise\n",
        catch=Pytest(("tests/runtime/test_retry_window.py",)),
        # Seed 285077 (every kind) found it at 2cd6e13; the runtime tests hold the race itself.
        why="a retried schedule call fails when a drained shard its search listed is deleted before the read: "
            "a flow step taken over from a client's intent waits a reconcile round per failure",
    ),
    Mutant(
        name="failed-call-batch-left-unqueued",
        kind="an acknowledged-in-doubt job never run",
        path="cluster/runtime/scheduling.py",
        old="                self._queue_new(shard, items)\n        return",
        new="                pass\n        return",
        catch=Pytest(("tests/runtime/test_scheduling.py::"
                      "test_a_landed_batch_that_could_not_be_taken_back_fires_as_the_caller_was_told_it_may",)),
        # Seed 311450 (every kind) found it in this stop's last search.
        why="a failed schedule call's landed batch whose take-back failed stays live in the log and in memory, "
            "queued nowhere: the caller was told it may fire, and it never does until the shard loads again",
    ),
    Mutant(
        name="drained-shard-handed-over",
        kind="a job run again long after it ended",
        path="cluster/runtime/balance.py",
        old="                  and self._shards.holds(s) and not self._drained(s)]\n",
        new="                  and self._shards.holds(s)]\n",
        catch=Pytest(("tests/runtime/test_balance.py::test_a_drained_shard_kept_for_its_retry_window_is_not_handed_over",)),
        # Seed 313993 (every kind) found it in this stop's last search.
        why="a drained shard kept for its retry window is handed over for balance; its next owner replays a log "
            "whose damaged record revives a job that ended, and it runs again",
    ),
    Mutant(
        name="bucket-delete-cancels-only-before-its-write",
        kind="a superseded definition run",
        path="cluster/named/bucketclient.py",
        old="                await self._cancel_after_delete(entry, name)\n",
        new="                pass\n",
        catch=Pytest(("tests/named/test_bucket_fence.py::"
                      "test_a_deleted_job_whose_cancel_a_damaged_frame_lost_before_the_delete_wrote_does_not_start",)),
        # Seed 328446 (every kind, registry buckets) found it in this stop's last search.
        why="a bucket delete cancels its job before writing DELETE: a shard loaded in between from a log whose "
            "REMOVE was damaged clears the job, and it starts after delete returned",
    ),
    Mutant(
        name="orphan-left-after-a-lost-race",
        kind="failover slower than its bound",
        path="cluster/runtime/adoption.py",
        old="        for base, meta in candidates:\n",
        new="        for base, meta in candidates[:take]:\n",
        catch=Pytest(("tests/runtime/test_adoption.py::"
                      "test_a_peer_beaten_to_an_orphan_claims_the_next_one_in_the_same_round",)),
        # The node-replacement drill found it in CI (failover 4.05 s against 3.5 s).
        why="two survivors pick the same orphan first; the one beaten claims nothing more that round, and the "
            "other orphan waits an adoption interval",
    ),
    Mutant(
        name="death-heard-adopted-at-the-next-interval",
        kind="failover slower than its bound",
        path="cluster/runtime/adoption.py",
        old="                self._woken.set()\n",
        new="                pass\n",
        catch=Pytest(("tests/runtime/test_heartbeat.py::"
                      "test_a_peer_that_reads_a_death_another_declared_adopts_its_share_at_once",)),
        # The node-replacement drill found it in CI (the second orphan taken 1.1-1.4 s after the first).
        why="a silo that reads a death another declared waits for its maintenance loop's next tick or interval "
            "before it adopts its share",
    ),
    Mutant(
        name="added-again-copy-taken-for-a-finishing-run",
        kind="an acknowledged job never run",
        path="cluster/runtime/scheduling.py",
        old="(run is None or run.shard.base != shard.base)",
        new="run is None",
        catch=Pytest(("tests/runtime/test_scheduling.py::"
                      "test_a_retry_that_adds_again_a_job_still_finishing_here_from_a_compacted_log_queues_its_copy",)),
        # Seed 346763 (every kind) found it in this stop's search.
        why="a retry adds a job again while its earlier copy's run is finishing on this silo from another shard; "
            "the new copy is taken for that run and never queued",
    ),
    Mutant(
        name="rotation-commit-doubt-reported-failed",
        kind="a duplicate after a lost answer",
        path="storage/log.py",
        old="            old_etag = await cas_metadata_until_known(store, old_name, pointer, self._etag, size=self._size)\n",
        new="            old_etag = await cas_metadata(store, old_name, pointer, self._etag, size=self._size)\n",
        catch=Pytest(("tests/storage/test_rotation_commit.py::"
                      "test_a_rotation_whose_commit_landed_unseen_acknowledges_what_it_covers_and_keeps_its_log",)),
        # Seed 344458 (every kind) found it in this stop's search.
        why="a rotation's commit lands with its answer lost: what the snapshot covers is reported not durable, "
            "the next rotation takes the writer's own commit for a claimer's, and the silo drops a shard it owns",
    ),
    Mutant(
        name="flow-success-in-doubt-told-without-its-end",
        kind="a flow step run twice",
        path="cluster/runtime/outcomes.py",
        old="            *(call_hooks(r.hooks, \"attempt_unsure\", r.event(), end) for r in runs\n",
        new="            *(call_hooks(r.hooks, \"attempt_unsure\", r.event()) for r in runs\n",
        catch=Pytest(("tests/runtime/test_outcomes.py::"
                      "test_a_success_whose_removal_is_in_doubt_is_told_to_hooks_as_a_success",)),
        # Seed 335398 (every kind) found it in this stop's search.
        why="a step's success whose removal was in doubt is read back from a log a rotation compacted: no "
            "outcome, and reconcile runs the step again",
    ),
    Mutant(
        name="quarantined-attempt-due-at-its-jobs-time",
        kind="a deferred attempt never run",
        path="cluster/runtime/firing.py",
        old="            run = self._new_run(max(due_us, entry[DUE]), job_id, entry)\n",
        new="            run = self._new_run(entry[DUE], job_id, entry)\n",
        catch=Pytest(("tests/runtime/test_quarantine.py::"
                      "test_an_attempt_a_hook_deferred_is_due_when_asked_again_in_quarantine_as_outside_it",)),
        # Seed 366044 (every kind) found it in this stop's search.
        why="a quarantined shard runs an attempt its hook deferred as due at the job's own time: asked again at "
            "once, over and over, it is in flight for good and never runs",
    ),
    Mutant(
        name="bucket-snapshot-as-one-record",
        kind="a registry bucket that cannot rotate or be claimed",
        path="cluster/named/bucket.py",
        old="        return [[SNAPSHOT, []], *([PUT, key, self.entries.metadata_of(key)] for key in self.entries)]\n",
        new="        return [[SNAPSHOT, [[key, self.entries.metadata_of(key)] for key in self.entries]]]\n",
        catch=Pytest(("tests/named/test_bucket_log.py::"
                      "test_a_bucket_of_more_names_than_a_block_holds_rotates_and_is_taken_over_whole",)),
        # Found by reading (a helper measuring a takeover at 1,000,000 names): LogFull at ~9,000 names.
        why="a bucket's snapshot is one record of every name: past one block it cannot rotate, its writes fail "
            "for good at the block limit, and no silo can claim it from a log with a torn tail",
    ),
    Mutant(
        name="cancel-misses-its-displaced-run",
        kind="a cancel that does not hold",
        path="cluster/runtime/cancel.py",
        old="            run = self._runs.of_copy(job_id, shard)\n            if run is not None:\n",
        new="            run = self._runs.find(job_id)\n            if run is not None and run.shard is shard:\n",
        catch=Pytest(("tests/runtime/test_one_job_in_two_shards.py::"
                      "test_a_cancel_of_the_adopted_copy_stops_its_run_displaced_by_the_fresh_copys",)),
        # Found by reading seed 395846's trace (a run displaced by the same job id from another shard).
        why="a cancel of a flow step's copy in an adopted shard answers cancelled while that copy's run, "
            "displaced by the same job id from the silo's fresh shard, is still sent",
    ),
    Mutant(
        name="cancel-unqueues-another-shards-copy",
        kind="an acknowledged job never run",
        path="cluster/runtime/cancel.py",
        old="            queued = self._shards.unqueue(shard, job_id)  # first: it must not start while the removal is written\n"
            "            removing[job_id] = (waiting, queued, entry)\n",
        new="            queued = self._queue.get(job_id)\n"
            "            self._queue.cancel(job_id)\n"
            "            removing[job_id] = (waiting, queued, entry)\n",
        catch=Pytest(("tests/runtime/test_one_job_in_two_shards.py::"
                      "test_a_cancel_of_the_adopted_copy_leaves_the_fresh_copy_queued_to_fire",)),
        why="a cancel of one shard's copy of a job id takes the other shard's queued copy off the queue: "
            "live in its log, queued nowhere, never run",
    ),
    Mutant(
        name="pause-unqueues-another-shards-copy",
        kind="an acknowledged job never run",
        path="cluster/runtime/pausing.py",
        old="            queued = self._shards.unqueue(shard, job_id)  # first: it must not start while the pause is written\n",
        new="            queued = self._queue.get(job_id)\n"
            "            self._queue.cancel(job_id)\n",
        catch=Pytest(("tests/runtime/test_one_job_in_two_shards.py::"
                      "test_a_pause_of_the_adopted_copy_leaves_the_fresh_copy_queued_to_fire",)),
        why="a pause of one shard's copy of a job id takes the other shard's queued copy off the queue: "
            "live and not paused in its log, queued nowhere, never run",
    ),
    Mutant(
        name="resume-answers-a-move-not-landed",
        kind="an acknowledged job never run",
        path="cluster/runtime/pausing.py",
        old="        if state is shard.state and job_id in state.pending:\n            return None\n",
        new="",
        catch=Pytest(("tests/runtime/test_pause_lease.py::"
                      "test_a_resume_that_found_a_move_decided_while_it_waited_sends_the_client_where_the_job_is",)),
        why="a pause or resume that waited for the shard's gate while a run's outcome decided the job's move "
            "answers 'moved' to a target the move has not reached; the source's next owner carries it out "
            "elsewhere, the target answers 'absent', and the job stays paused for good",
    ),
    Mutant(
        name="cancelled-outcome-unqueues-another-shards-copy",
        kind="an acknowledged job never run",
        path="cluster/runtime/outcomes.py",
        old="            self._shards.unqueue(shard, job_id)\n",
        new="            self._queue.cancel(job_id)\n",
        catch=Pytest(("tests/runtime/test_one_job_in_two_shards.py::"
                      "test_a_cancel_marking_the_adopted_copys_run_as_its_outcome_moves_it_on_leaves_the_fresh_copy_to_fire",)),
        why="the outcome of a run a cancel marked removes the next occurrence it wrote, and takes another shard's "
            "queued copy of the job id off the queue with it: live in its log, queued nowhere, never run",
    ),
    Mutant(
        name="retry-leaves-the-told-copy-unqueued",
        kind="an acknowledged job never run",
        path="cluster/runtime/scheduling.py",
        old="                    and not is_shards_copy(queued, shard)):\n",
        new="                    and queued is None):\n",
        catch=Pytest(("tests/runtime/test_one_job_in_two_shards.py::"
                      "test_a_step_taken_again_beside_a_copy_its_log_lost_fires_from_the_copy_the_flow_was_told_of",)),
        why="a flow step taken again beside a copy whose ADD its log lost stays unqueued behind that memory-only copy: "
            "live in its log, never fired while the silo lives, run again after the next failover",
    ),
    Mutant(
        name="load-leaves-a-copy-to-another-shards-run",
        kind="an acknowledged job never run",
        path="cluster/runtime/loading.py",
        old="            if run is None or not holds(run.shard) or not queues_next_of(run, shard, job_id):\n",
        new="            if run is None or not holds(run.shard):\n",
        catch=Pytest(("tests/runtime/test_one_job_in_two_shards.py::"
                      "test_a_copy_adopted_while_the_other_copy_runs_fires_once_that_run_ends",)),
        also=(Sim(995762, 1, "all"),),  # found there (every kind, joins among them: "all" is every kind now)
        why="a shard adopted while another shard's copy of a flow step's job id runs here leaves its copy unqueued: "
            "live in its log, never fired while the silo lives, run again after the next failover",
    ),
    Mutant(
        name="unqueue-takes-any-shards-copy",
        kind="an acknowledged job never run",
        path="cluster/runtime/ownership.py",
        old="        return self._queue.take(job_id, lambda entry: entry[OWNER] is shard)\n",
        new="        return self._queue.take(job_id, lambda entry: True)\n",
        catch=Pytest(("tests/runtime/test_one_job_in_two_shards.py::"
                      "test_a_cancel_of_the_adopted_copy_leaves_the_fresh_copy_queued_to_fire",)),
        also=(Pytest(("tests/runtime/test_one_job_in_two_shards.py::"
                      "test_a_pause_of_the_adopted_copy_leaves_the_fresh_copy_queued_to_fire",)),
              Pytest(("tests/runtime/test_one_job_in_two_shards.py::"
                      "test_a_cancel_marking_the_adopted_copys_run_as_its_outcome_moves_it_on_leaves_the_fresh_copy_to_fire",))),
        why="a cancel, a pause or a cancelled run's outcome in one shard takes another shard's queued copy of the "
            "job id off the queue: live in its log, queued nowhere, never run",
    ),
    Mutant(
        name="cancel-waits-for-the-shard-held-now",
        kind="a cancel that does not hold",
        path="cluster/runtime/cancel.py",
        old="            answer, shard = await self._cancel(shard_base, job_id)\n",
        new="            answer, _ = await self._cancel(shard_base, job_id)\n        shard = self._shards.get(shard_base)\n",
        catch=Pytest(("tests/runtime/test_cancel_dropped_shard.py::"
                      "test_a_cancel_waits_out_the_dead_owners_lease_though_its_silo_dropped_the_shard",)),
        # Seed 462368 (every kind) found it in a search on main.
        why="a cancel answered from an adopted shard its silo dropped meanwhile (declared dead, rejoining) "
            "skips waiting out the dead previous owner's lease: what that owner sent ahead starts after "
            "\"cancelled\"",
    ),
    Mutant(
        name="flow-reconciled-while-recording",
        kind="a flow step run twice",
        path="cluster/flows/hooks.py",
        old="            if flow in self._recording:\n",
        new="            if False:\n",
        catch=Pytest(("tests/flows/test_recovery.py::"
                      "test_a_silo_does_not_take_over_a_step_whose_success_it_is_still_recording",)),
        # Found by the simulator, seed 472003 with every kind.
        why="a silo whose write of a step's success is still being retried takes the step's intent over, "
            "adds its job again where a rotation dropped its removal, and runs the step a second time",
    ),
    Mutant(
        name="cancel-takes-moved-on-for-ended",
        kind="a cancel that does not hold",
        path="cluster/runtime/cancel.py",
        old="        if job_id not in landed.live and landed.holds_move(job_id, run.entry[OCCURRENCE] + 1) \\\n"
            "                and not landed.moved.get(job_id):\n",
        new="        if job_id not in landed.live and landed.holds_move(job_id, run.entry[OCCURRENCE] + 1):\n",
        catch=Pytest(("tests/runtime/test_cancel_moved_on.py::"
                      "test_a_cancel_of_a_run_whose_job_moved_on_and_on_sends_the_caller_along_not_cancelled",)),
        # Seed 466479 (every kind) found it on main.
        why="a cancel that waited for a recurring job's run takes the job for ended in the shard its outcome "
            "moved it to when that shard's owner already ran it and moved it on again: \"cancelled\", and "
            "the occurrence after next fires",
    ),
    Mutant(
        name="move-of-a-later-occurrence-keeps-the-older",
        kind="a lost REMOVE(MOVED)",
        path="cluster/runtime/shardlog.py",
        old="(op[3] in (CANCELLED, MOVED) and occurrence < op[2])",
        new="(op[3] == CANCELLED and occurrence < op[2])",
        catch=Pytest(("tests/runtime/test_damage.py::"
                      "test_a_move_written_after_damage_ends_the_older_occurrence_the_lost_add_replaced",)),
        # Found by the simulator, seed 475742 with every kind (older than 563e739).
        why="a recurring job whose next occurrence's ADD a damaged frame lost keeps its older occurrence live "
            "at replay beside the chain a later move carried on: live in two shards, it runs twice",
    ),
    Mutant(
        name="snapshot-in-one-record",
        kind="a writer stopped at the block limit",
        path="cluster/runtime/shardlog.py",
        old="            (first if size <= SNAPSHOT_BYTES else rest).append([job_id, *entry[:OWNER]])\n",
        new="            first.append([job_id, *entry[:OWNER]])\n",
        catch=Pytest(("tests/runtime/test_big_snapshot.py::"
                      "test_a_shard_holding_more_than_a_block_of_live_jobs_rotates_and_fires_every_one",)),
        # Found by reading: the bucket's snapshot had been split for the same reason.
        why="a shard whose live jobs outgrow one block (4 MiB: ~20,000 jobs, or 17 of the largest) cannot "
            "rotate at the block limit: its writer stops, and its jobs' outcomes are never recorded",
    ),
    Mutant(
        name="bucket-released-before-what-it-accepted-lands",
        kind="a registry bucket handed over unclean",
        path="cluster/named/buckets.py",
        old="            while bucket.busy or bucket.state.inflight:\n",
        new="            while False:\n",
        catch=Pytest(("tests/named/test_bucket_balance.py::"
                      "test_a_joining_silo_gets_its_share_and_nothing_racing_the_hand_over_is_lost",)),
        why="a bucket is released while puts it accepted are still making their jobs durable: their appends "
            "are refused after the release, and each put returns in doubt",
    ),
    Mutant(
        name="bucket-append-after-its-release",
        kind="a registry bucket handed over unclean",
        path="cluster/named/buckets.py",
        old="        if self.closing:\n",
        new="        if False:\n",
        catch=Pytest(("tests/named/test_bucket_balance.py::"
                      "test_a_status_change_meeting_a_release_between_its_check_and_its_append_goes_to_the_next_owner",)),
        why="a status change appended behind its bucket's release meets the next owner's claim: fenced, the "
            "change is answered in doubt (and may be lost) instead of sent to the next owner",
    ),
    Mutant(
        name="joined-silo-judged-never-registered",
        kind="a claim without proof",
        path="cluster/runtime/logowner.py",
        old="            if parsed is not None and parsed[0] not in members:\n                return True\n",
        new="            if parsed is not None and parsed[0] not in members:\n                return False\n",
        catch=Pytest(("tests/runtime/test_adoption.py::"
                      "test_a_shard_of_a_silo_that_joined_after_a_round_read_the_table_is_not_taken",
                      "tests/named/test_bucket_balance.py::"
                      "test_a_bucket_of_a_silo_that_joined_after_a_round_read_the_table_is_not_taken")),
        # Seed 910359 (every kind, a silo joining) found it.
        why="a round whose membership read predates a silo's join takes that silo's shards and buckets for "
            "orphans (an owner never registered) and claims them while their owner fires and answers",
    ),
    Mutant(
        name="bucket-handed-over-before-it-settled",
        kind="a log bouncing between silos",
        path="cluster/named/buckets.py",
        old="if b.held_since <= settled and not b.lost\n",
        new="if not b.lost\n",
        catch=Pytest(("tests/named/test_bucket_balance.py::"
                      "test_a_silo_hands_over_the_buckets_it_held_long_not_those_it_just_took",)),
        why="a silo hands over the buckets it has just taken (a dead peer's, replayed a moment ago) as soon as "
            "a silo joins: each changes hands twice within seconds, and every call to it waits each time",
    ),
    Mutant(
        name="bucket-release-in-doubt-left-unheld",
        kind="a registry bucket handed over unclean",
        path="cluster/named/buckets.py",
        old='                self.drop(bucket, "its release may not have landed", retake=retake)\n',
        new="                self._forget(bucket)\n",
        catch=Pytest(("tests/named/test_bucket_balance.py::"
                      "test_a_release_the_store_failed_leaves_no_bucket_without_an_owner",)),
        why="a release the store failed before it landed leaves the bucket's log naming this silo, which "
            "answers nothing from it until its next maintenance round: every call for its names fails meanwhile",
    ),
    Mutant(
        name="lapsed-lease-put-answered-failed",
        kind="a put failed that could have been made",
        path="cluster/named/putwire.py",
        old="    if isinstance(outcome, NotOwner | SiloStopping):\n",
        new="    if isinstance(outcome, NotOwner):\n",
        catch=Pytest(("tests/named/test_bucket_owner.py::"
                      "test_a_put_its_owner_refused_for_a_lapsed_lease_is_sent_again_and_made_once",)),
        # Seen in tests/e2e/test_named.py on two busy cores (a simulator search beside it).
        why="a bucket owner starved past its lease refuses a round before writing anything, and the put "
            "fails with ClusterUnavailable instead of being asked again",
    ),
    Mutant(
        name="handed-over-overwrite-cancelled-per-job",
        kind="an overwrite that pays a call per replaced job",
        path="cluster/named/hooks.py",
        old="        if self._silo.holds_shard(shard):\n",
        new="        if True:\n",
        catch=Pytest(("tests/named/test_bucket_overwrite.py::"
                      "test_after_a_hand_over_the_new_owner_cancels_the_old_jobs_through_their_shards_silo_one_call_a_round",)),
        why="a bucket handed over keeps its names' jobs in its first owner's shards: each overwrite's cancel "
            "goes back to the caller, one call per job (overwriting 10,000 names ran at half the rate)",
    ),
    Mutant(
        name="forwarded-cancel-failure-taken-as-confirmed",
        kind="a superseded definition run",
        path="cluster/named/owned.py",
        old="            return [None] * len(retired)\n        return answers",
        new="            return [(\"cancelled\", None)] * len(retired)\n        return answers",
        catch=Pytest(("tests/named/test_bucket_overwrite.py::"
                      "test_after_a_hand_over_a_forwarded_cancel_the_shards_silo_failed_is_made_by_the_caller",)),
        why="a cancel the shards' silo did not make is left off the put's answer: the caller never cancels "
            "the replaced generation, which starts after the overwrite returned",
    ),
    Mutant(
        name="chase-capped-in-hops",
        kind="a call that could have been answered fails",
        path="cluster/model/chase.py",
        old="        return self.hops == 0 or self._loop.time() < self._deadline\n",
        new="        return self.hops == 0 or (self.hops < 16 and self._loop.time() < self._deadline)\n",
        catch=Pytest(("tests/test_client_search.py::test_a_cancel_follows_a_chain_of_moves_longer_than_any_count_of_hops",)),
        also=(Pytest(("tests/named/test_long_chain.py::"
                      "test_a_delete_of_a_recurring_named_job_reaches_it_through_a_long_chain_of_shards",)),),
        # Seen in tests/e2e/test_cli_jobs.py: `timeshard delete` of an `@every 1s` job that had run 42 s on 2 s windows.
        why="a cancel, pause, delete or trigger from a recurring job's first handle gives up on its chain of "
            "shards (one per window it ran through) and fails with ClusterUnavailable on a healthy cluster",
    ),
    Mutant(
        name="forwarded-cancels-unbounded",
        kind="a call that could have been answered fails",
        path="cluster/named/owned.py",
        old="            answers = await wait_bounded(self._cancels.there(silo, [(r.shard, r.job_id) for r in retired]),\n"
            "                                         FORWARD_WAIT_S)\n",
        new="            answers = await self._cancels.there(silo, [(r.shard, r.job_id) for r in retired])\n",
        catch=Pytest(("tests/named/test_bucket_overwrite.py::"
                      "test_after_a_hand_over_a_shards_silo_that_never_answers_the_forwarded_cancels_holds_no_put",)),
        why="a peer paused or cut off holds every put of a round that forwarded cancels to it for the peer "
            "call's whole timeout, not only the puts whose replaced jobs it holds",
    ),
    Mutant(
        name="chase-charged-for-answers",
        kind="a call that could have been answered fails",
        path="cluster/model/chase.py",
        old="            self._deadline += self._loop.time() - asked\n",
        new="            pass\n",
        catch=Pytest(("tests/test_client_search.py::test_a_cancel_that_waited_for_a_long_run_follows_the_job_on",)),
        also=(Pytest(("tests/test_client_search.py::"
                      "test_a_search_whose_first_ask_waited_for_a_long_run_still_asks_the_new_owner",)),),
        why="a cancel (delete, overwrite) of a recurring job whose attempt runs longer than the chase waits for "
            "it to end, is answered \"moved\" to its next occurrence, and gives up with ClusterUnavailable: "
            "the next occurrence runs",
    ),
    Mutant(
        name="retry-settles-no-holder",
        kind="a call that could have been answered fails",
        path="cluster/model/routing.py",
        old="                        settled.append(exc.settles)\n",
        new="                        pass\n",
        catch=Pytest(("tests/model/test_routing.py::"
                      "test_holders_that_refused_are_named_settled_so_several_cannot_hold_a_retry_off",)),
        why="a retried schedule call with several live holders of its windows' shards is refused by each for "
            "want of the others' proof until their shards drain: past retry_window, a job its earlier try "
            "ran is added again (one more run), or the call ends in doubt",
    ),
    Mutant(
        name="settled-holder-kept-after-loss",
        kind="a job runs twice",
        path="cluster/model/routing.py",
        old='                    settled = [owner for owner in settled if owner.rpartition("#")[0] != silo_id]\n',
        new="                    pass\n",
        catch=Pytest(("tests/model/test_routing.py::"
                      "test_a_settled_holder_lost_on_a_later_try_is_no_longer_named_settled",)),
        why="a holder named settled takes a later try and is lost while writing it; the next silo skips "
            "fencing its shards and adds a second copy while the lost holder's append may still land",
    ),
    Mutant(
        name="status-burst-sent-before-its-ends",
        kind="a burst fired slower",
        path="cluster/named/attempts.py",
        old="            if grew < BURST_CHANGES and not (queued >= BURST_CHANGES and self._open):\n",
        new="            if grew < BURST_CHANGES:\n",
        catch=Pytest(("tests/named/test_status_fold.py::"
                      "test_a_bursts_starts_wait_for_their_ends_after_the_starts_stop_coming",)),
        why="a burst's starts go to the owners once they stop coming, before their ends: each owner records "
            "a thousand changes a call (~115 ms of its event loop on Azurite) while it fires its own burst, "
            "and named jobs fire at 0.5-0.7x plain there instead of 0.9x",
    ),
    Mutant(
        name="silent-peer-pinged-first",
        kind="failover slower than its bound",
        path="cluster/runtime/heartbeat.py",
        old="        if known:\n            await self._declare(known)\n",
        new="        if known:\n            await asyncio.gather(*(self._transport.ping(s, 1.0) for s in known))\n"
            "            await self._declare(known)\n",
        catch=Pytest(("tests/runtime/test_heartbeat.py::"
                      "test_a_silent_peer_is_declared_dead_and_adopted_before_any_ping_is_answered",)),
        why="a silent peer is declared dead only after pings that a lost node's silo answers by timing out: "
            "its shards fail over up to a ping timeout past the bound (3.9 s against 3.5 s in a node-loss drill)",
    ),
    Mutant(
        name="retry-misses-compacted-forwards",
        kind="a job runs twice",
        path="cluster/runtime/shardlog.py",
        old='            landed |= {job_id for job_id, to in op[2].items() if to == "" and job_id in ids}  # chains that ended here\n',
        new="",
        catch=Pytest(("tests/runtime/test_retry_after_compaction.py::"
                      "test_a_job_that_moved_in_and_ended_is_landed_in_the_compacted_log_as_in_the_whole_one",)),
        why="a retried schedule call searches a compacted log for live jobs only: a recurring chain that moved "
            "through it and ended is found nowhere and written again, once per retry that lost its answer",
    ),
    Mutant(
        name="other-copy-dropped-from-queue",
        kind="a job never runs",
        path="cluster/runtime/queue_copies.py",
        old="            aside.append(waiting)\n",
        new="            pass\n",
        catch=Pytest(("tests/runtime/test_queue.py::"
                      "test_each_copy_of_an_id_comes_out_once_in_due_order_unless_its_shard_let_go_of_it",)),
        also=(Sim(1187329, 1, EVERY_KIND),),
        why="a silo holding two copies of one id (a flow step taken over twice) queues one: the other, replaced "
            "in the timer queue, stays live in its log and never runs nor is refused",
    ),
    Mutant(
        name="claim-read-back-ignores-appends",
        kind="an acknowledged record lost",
        path="storage/appends.py",
        old="    if stat.size != size:\n",
        new="    if False:\n",
        catch=Pytest(("tests/storage/test_claim_doubt.py",)),
        also=(Sim(1200780, 1, EVERY_KIND),),
        why="a claim whose answer was lost takes the ETag of a record appended after it for its own, and the "
            "repair's rotation drops that record (a flow step's success, so the step runs again)",
    ),
    Mutant(
        name="copy-restored-mid-batch",
        kind="a job runs twice",
        path="cluster/runtime/queue.py",
        old="            if self._popping:\n",
        new="            if False:\n",
        catch=Pytest(("tests/runtime/test_queue.py::"
                      "test_each_copy_of_an_id_comes_out_once_in_due_order_unless_its_shard_let_go_of_it",)),
        why="a copy set aside is queued again while the batch that took the other copy is still being taken, "
            "so both copies of one id leave in one batch",
    ),
    Mutant(
        name="head-look-misses-restored-copy",
        kind="a job never runs",
        path="cluster/runtime/queue.py",
        old="            if restored == self._restored:\n                return due\n",
        new="            return due\n",
        catch=Pytest(("tests/runtime/test_queue.py::test_a_look_at_the_head_that_queues_a_copy_set_aside_answers_with_it",)),
        why="a look at the head that passes a stale bulk item queues the copy waiting aside, yet answers from "
            "before: the fire loop sleeps with that copy queued until something else is pushed",
    ),
    Mutant(
        name="clock-pair-read-unbracketed",
        kind="jobs fired later than the store's clock allows",
        path="storage/wireclock.py",
        old="        if after - before <= PAIR_NS:\n",
        new="        if True:\n",
        catch=Pytest(("tests/storage/test_azure_clock.py::"
                      "test_a_thread_switch_between_the_two_clocks_reads_is_not_taken_for_a_step",)),
        why="a thread switch between reading the wall clock and the monotonic one looks like a wall clock "
            "step, and the kernel's stamp of the answer's arrival is thrown away (seen in CI under load)",
    ),
    Mutant(
        name="clock-lead-from-midpoint",
        kind="a job fired early",
        path="storage/wireclock.py",
        old="            return wall - after, after\n",
        new="            return wall - (before + after) // 2, after\n",
        catch=Pytest(("tests/storage/test_azure_clock.py::"
                      "test_the_clocks_lead_never_errs_high_so_an_arrival_is_never_moved_early",)),
        why="the wall clock's lead taken against the midpoint of the monotonic reads around it errs high "
            "when the thread was held up before the wall's read: the answer's arrival is moved earlier "
            "than it was, and jobs fire early by as much (found in review)",
    ),
)
