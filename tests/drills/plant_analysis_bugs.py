"""Plant each bug in the drill's verdicts (a check of ``cluster/cli/drill_analysis.py``, of its
store watch ``drill_observer.py`` or of the recorder ``handlers/builtin.py`` reverted to what it
was before issue 24, or weakened), run the unit test that guards it, and require that it fails;
the file is restored after each, whatever happens. Exit status 1 if any bug went unseen. The same mutants run in-process in every test run
(``test_planted_analysis_bugs.py``); this script runs each through pytest as it stands.

    python -m tests.drills.plant_analysis_bugs
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "cluster" / "cli" / name for name in ("drill_analysis.py", "drill_observer.py")] + [ROOT / "handlers" / "builtin.py"]
MUTANTS = [
    ("early judged by the silo's scheduled_for", 'r["job_id"] in told and r["started"] < told[r["job_id"]]', 'r["started"] < r["scheduled_for"]', "test_early_is_judged"),
    ("a durable earlier outcome does not matter", 'if hit is None or owner in found.writers:', 'if hit is None:', "test_a_rerun_of_a_run_whose_outcome_was_durable"),
    ("two removals of one job allowed", 'if found.removes > 1 or not _explain(', 'if found.removes > 9 or not _explain(', "test_two_removals"),
    ("no writer from a job one owner ran", 'writer = owners.pop() if len(owners) == 1 else None', 'writer = None', "test_an_append_holding"),
    ("the old 2 s window", 'if v[c]["started"] < hit.stopped - IN_FLIGHT_S:', 'if v[c]["started"] < hit.stopped - 2.0:', "test_an_outcome_the_log_cannot_place"),
    ("never seen owning excused", '        answered = [t1 for _, t1 in self.samples]\n', '        answered = [t1 for _, t1 in self.samples]\n        if not any(o == owner for _, o in self.shard_owners.get(shard, [])):\n            return None\n', "test_an_owner_never_seen_owning"),
    ("claim back within 0.5 s excused", '            if t0 >= sent:\n                break', '            if t0 >= sent + 0.5:\n                break', "test_a_claim_back_seen"),
    ("only the reading begun after the send excuses", '            if self.owner_at(shard, t1) == owner:\n                return None', '            if t0 >= sent and self.owner_at(shard, t1) == owner:\n                return None', "test_a_reading_under_way"),
    ("an unplaced outcome never the killed owner's", 'return found if found or self.unproven else None', 'return [] if self.unproven else None', "test_an_outcome_that_landed_after"),
    ("a killed owner's appends land at any time", 'after <= hit.stopped + LANDED_S]', 'after <= hit.stopped + 99]', "test_an_outcome_that_landed_after"),
    ("a paused owner treated as killed", 'hit.kind != "kill" or after', 'after', "test_an_outcome_that_landed_after"),
    ("failover: first takeover over all of a silo's shards", 'failover.append(round(min(takeovers) - e.at, 3))', 'failover.append(round(min(takeovers) - e.at, 3)) if not failover else None', "test_failover_is_measured_per_shard"),
    ("watcher errors ignored", 'and self.observer_errors == 0 and', 'and', "test_store_watcher_errors"),
    ("storm: no rate floor", 'and self.acknowledged >= STORM_ACK_RATE * self.duration)', ')', "test_a_storm_fails"),
    ("storm: unexpected errors ignored", 'return (not self.unexpected and self.acknowledged', 'return (self.acknowledged', "test_a_storm_fails"),
    ("fires of jobs never acknowledged ignored", 'and not self.unacknowledged_fires', '', "test_a_fire_of_a_job_neither"),
    ("observer: writer taken from the read that found the append", 'writer = owner if tail.owner == owner else None', 'writer = owner', "test_the_observer_names"),
    ("in-flight window not justified by durable times", 'bool(self.durable_s) and max(self.durable_s) < IN_FLIGHT_S', 'True', "test_the_in_flight_window_excuses_only"),
    ("in-flight window places any number of appends", '\n                and len(self.window_appends) <= sum(len(e.shards) for e in self.hits))', ')', "test_the_in_flight_window_places"),
    ("in-flight window's appends not collected", 'out.window_appends.update(appends)', 'pass', "test_the_in_flight_window_places"),
    ("windows not part of the verdict", '\n                and self.in_flight_window_ok and self.delivery_window_ok', '', "test_the_"),
    ("delivery window not justified by delivery times", 'bool(self.delivery_s) and max(self.delivery_s) <= DELIVERY_S', 'True', "test_the_delivery_window"),
    ("delivery window excuses any number of batches", '\n                and len(self.delivery_excused) <= len(self.hits))', ')', "test_the_delivery_window"),
    ("delivery-window re-runs not counted", '            out.late_arrivals.append((hit, v[c]))', '            pass', "test_a_rerun_of_a_call_that_arrived_after_a_pause"),
    ("a call sent before the kill taken as unknown", 'return "sent" if sent <= stopped else None', 'return "window"', "test_a_call_that_arrives_after"),
    ("a call sent after the kill excused", 'return "sent" if sent <= stopped else None', 'return "sent"', "test_a_call_that_arrives_after"),
    ("a silo still running after ray.kill taken as stopped", 'return self.at if self.ended is None else max(self.at, self.ended)', 'return self.at', "test_a_silo_that_runs_on"),
    ("a late arrival beyond the window excused", 'if arrived > stopped + DELIVERY_S:', 'if arrived > stopped + 99:', "test_a_call_that_arrives_after"),
    ("recorder: send time from another host's clock", 'if not info.domain or info.domain != self._domain:', 'if not info.domain:', "test_the_recorder_notes"),
]
def main() -> int:
    originals = {path: path.read_text() for path in FILES}
    failed_to_catch: list[str] = []
    try:
        for name, old, new, test in MUTANTS:
            (path,) = [path for path, text in originals.items() if text.count(old) == 1]  # in one file, once
            path.write_text(originals[path].replace(old, new))
            try:
                done = subprocess.run([sys.executable, "-m", "pytest", "tests/drills/test_drill_analysis.py", "-q",
                                       "-p", "no:cacheprovider", "-k", test], cwd=ROOT, capture_output=True, text=True)
            finally:
                path.write_text(originals[path])
            caught = done.returncode == 1 and "failed" in done.stdout
            print(f"{'caught ' if caught else 'MISSED '} {name:55s} by {test}")
            if not caught:
                failed_to_catch.append(name)
    finally:
        for path, text in originals.items():
            path.write_text(text)
    return 1 if failed_to_catch else 0


if __name__ == "__main__":
    sys.exit(main())
