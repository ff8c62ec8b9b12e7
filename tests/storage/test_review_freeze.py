"""Review: decoding a big log leaves a host process's own gc.freeze() in place."""
import gc

from storage.records import collector_paused


def test_a_bulk_build_does_not_unfreeze_what_the_process_froze() -> None:
    gc.collect()
    gc.freeze()  # as a Ray Serve replica does at startup (RAY_SERVE_FREEZE_GC_ON_STARTUP, default on)
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with collector_paused():
            kept = [[i] for i in range(200_000)]  # a big shard's entries
        assert gc.get_freeze_count() >= frozen, f"{frozen} frozen objects before, {gc.get_freeze_count()} after"
        del kept
    finally:
        gc.unfreeze()
