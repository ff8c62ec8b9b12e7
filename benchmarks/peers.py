"""Figures peers publish about themselves, each with the page it is published on.

Drawn beside ours as published, never measured here. A figure stays only while its source still
says it: each was checked against what the peer ships, at the commit the link names. Figures an
earlier version of these benchmarks showed without a source (Dapr "≈ 921/s on 3 × 8 vCPU",
"15,000–19,000/s" and "< 5 s" failover; Orleans "≈ 1 s precision", "5–35 s" failover, "100 ms–5 s
per shard", "200–500 B per job"; Celery "≈ 11 KB per ETA task") were dropped: none of their
sources could be found.
"""

from __future__ import annotations

from dataclasses import dataclass

# dapr/dapr at its commit of 2026-08-21 ("Jobs api stable - perf tests", #9711, added the test).
DAPR = "https://github.com/dapr/dapr/blob/d8450742ce3260d93a2346f4398a1e60d019a45b"
DAPR_JOBS_PERF_TEST = f"{DAPR}/tests/perf/jobs/jobs_test.go"
DAPR_1_17_PERF_REPORT = f"{DAPR}/tests/perf/report/charts/v1.17.0/README.md"


@dataclass(frozen=True)
class Published:
    """One published figure: what it is (in its source's terms), its value, and where it is published."""

    label: str
    value: float
    source: str

    def cited(self) -> str:
        """The figure as a Markdown link to its source, for the results table."""
        return f"[{self.label}]({self.source})"

    @property
    def reference(self) -> tuple[str, float]:
        """(label, value): a reference line on a chart."""
        return (self.label, self.value)


#: Dapr's jobs perf test asks the Jobs API to schedule at least this many jobs a second (it
#: passes within 100 below: ``targetScheduleQPS``), one app replica, sidecar limited to 4 CPUs.
DAPR_SCHEDULE_TARGET = Published("Dapr jobs perf test: target 600 schedules/s", 600.0, DAPR_JOBS_PERF_TEST)
#: ... and to trigger at least this many a second (within 500 below: ``targetTriggerQPS``).
DAPR_TRIGGER_TARGET = Published("Dapr jobs perf test: target 12,700 triggers/s", 12_700.0, DAPR_JOBS_PERF_TEST)
#: Dapr 1.17's published perf report: actor reminders (jobs of the same Scheduler since 1.15)
#: fired at this rate over 100,000 triggers.
DAPR_REMINDER_TRIGGERS = Published("Dapr 1.17 perf report: 15,463 reminder triggers/s", 15_463.0,
                                   DAPR_1_17_PERF_REPORT)

#: ... and registrations of them (each persisted by the Scheduler) sustained at this rate.
DAPR_REMINDER_REGISTRATIONS = Published("Dapr 1.17 perf report: 667 reminder registrations/s", 667.0,
                                        DAPR_1_17_PERF_REPORT)

ALL = (DAPR_SCHEDULE_TARGET, DAPR_TRIGGER_TARGET, DAPR_REMINDER_TRIGGERS, DAPR_REMINDER_REGISTRATIONS)
