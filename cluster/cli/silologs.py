"""Unhandled exceptions that silos wrote to their Ray worker logs, including killed incarnations.

Ray keeps every worker's stderr in ``<session>/logs/worker-*.err`` whether or not it forwards it
to the driver (``log_to_driver=False``), and the first lines name the actor class
(``:actor_name:SiloActor``). A silo's uncaught failures all reach that file: ``log.exception``
from a background loop's catch-all, a background task that died (logged by the silo when it ends),
and asyncio's "Task exception was never retrieved". Reading the files — rather than asking live
silos — also covers incarnations that were killed, whose counters died with them.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

SILO_CLASS = "SiloActor"
_MARKERS = ("Traceback (most recent call last)", "Task exception was never retrieved", "Exception in callback")
_PID = re.compile(r"-(\d+)\.err$")


def ray_logs_dir() -> str | None:
    """The current Ray session's log folder, or None without a running Ray."""
    try:
        import ray

        node = ray._private.worker._global_node
        return None if node is None else str(node.get_logs_dir_path())
    except Exception:
        return None


@dataclass
class SiloLogWatch:
    """Marks where each worker log ends now; ``faults()`` reads what silos logged since."""

    logs_dir: str | None = field(default_factory=ray_logs_dir)
    _offsets: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._offsets = self._sizes()

    def _sizes(self) -> dict[str, int]:
        if self.logs_dir is None:
            return {}
        out = {}
        for path in glob.glob(os.path.join(self.logs_dir, "worker-*.err")):
            try:
                out[path] = os.path.getsize(path)
            except OSError:
                continue
        return out

    def faults(self) -> list[str]:
        """Each unhandled exception a silo process logged since the mark: its message and error."""
        return faults_in(self.logs_dir, self._offsets)


def faults_in(logs_dir: str | None, offsets: Mapping[str, int]) -> list[str]:
    if logs_dir is None:
        return []
    found = []
    for path in sorted(glob.glob(os.path.join(logs_dir, "worker-*.err"))):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                head = f.read(4096)
                if f":actor_name:{SILO_CLASS}" not in head:
                    continue
                f.seek(offsets.get(path, 0))
                text = f.read()
        except OSError:
            continue
        pid = _PID.search(path)
        found += [f"silo pid {pid.group(1) if pid else '?'}: {block}" for block in _blocks(text)]
    return found


def _blocks(text: str) -> list[str]:
    """One line per exception: the message logged before the traceback and the error line."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if not any(marker in line for marker in _MARKERS):
            continue
        if line.startswith("Traceback"):
            if i > 0 and lines[i - 1].startswith(("Task exception was never retrieved", "future:")):
                continue  # reported by its own marker line below
            message = lines[i - 1] if i > 0 else ""
        else:
            message = line
        error = next((e for e in lines[i + 1:] if e and not e.startswith((" ", "Traceback", "future:"))), "")
        out.append(f"{message.strip()} -> {error.strip()}")
    return out


__all__ = ["SiloLogWatch", "faults_in", "ray_logs_dir"]
