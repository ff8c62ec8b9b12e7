"""What a mutant is: a bug planted by one exact text replacement, and the command that must catch it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pytest:
    """Catches the mutant when these pytest node ids fail (pytest exits 1)."""

    nodes: tuple[str, ...]
    timeout: float = 300.0

    def argv(self, python: str) -> list[str]:
        return [python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *self.nodes]

    def describe(self) -> str:
        """The tests, short: ``test_file::test_name`` (a whole file: its name alone)."""
        return " ".join(Path(node.split("::")[0]).stem + node[len(node.split("::")[0]):] for node in self.nodes)

    def caught(self, returncode: int) -> bool | None:
        """True: a test failed; False: all passed; None: pytest could not run them (no such test, ...)."""
        return {0: False, 1: True}.get(returncode)

    def files(self) -> list[str]:
        return sorted({node.split("::")[0] for node in self.nodes})


@dataclass(frozen=True)
class Sim:
    """Catches the mutant when a seed of ``start`` .. ``start + count - 1`` breaks an invariant."""

    start: int
    count: int
    faults: str = "default"
    timeout: float = 600.0

    def argv(self, python: str) -> list[str]:
        return [python, "-m", "tests.sim", "--seeds", str(self.count), "--start", str(self.start),
                "--faults", self.faults, "--status", "1000"]

    def describe(self) -> str:
        faults = "" if self.faults == "default" else f" --faults {self.faults}"
        return f"sim seeds {self.start}..{self.start + self.count - 1}{faults}"

    def caught(self, returncode: int) -> bool | None:
        return {0: False, 1: True}.get(returncode)

    def files(self) -> list[str]:
        return ["tests/sim/__main__.py"]


Catch = Pytest | Sim


@dataclass(frozen=True)
class Mutant:
    """One planted bug: ``old`` (found exactly once in ``path``) becomes ``new``."""

    name: str
    kind: str  # the class of bug, as issue 24 names them
    path: str
    old: str
    new: str
    catch: Catch  # the smallest command that catches it
    why: str  # what a client would suffer: the promise the bug breaks
    # The simulator oracle, not merged yet, that must catch it where today's checks cannot (its Sim catchers).
    expects: str | None = None
    also: tuple[Catch, ...] = ()  # further commands that must catch it too: each one's check is held to it

    @property
    def catchers(self) -> tuple[Catch, ...]:
        return (self.catch, *self.also)

    def apply(self, text: str) -> str:
        """``text`` with the bug planted; ``ValueError`` unless ``old`` occurs exactly once."""
        found = text.count(self.old)
        if found != 1:
            raise ValueError(f"mutant {self.name}: the text to replace occurs {found} times in {self.path}, "
                             "not once (the code moved: update the mutant)")
        return text.replace(self.old, self.new)

    def plant(self, root: Path) -> str:
        """Plant the bug in the tree at ``root``; returns the file's text before, to restore it."""
        target = root / self.path
        before = target.read_text()
        target.write_text(self.apply(before))
        return before
