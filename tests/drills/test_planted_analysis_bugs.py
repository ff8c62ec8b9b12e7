"""Each bug ``plant_analysis_bugs`` plants in the drill's verdicts is caught by the unit test that
guards it, in every test run: the mutant is compiled into fresh modules in this process (no Ray,
no subprocess, nothing written), the guarding tests of ``test_drill_analysis`` run against it,
and one of them must fail. A check weakened later, or a test that stopped guarding it, shows here."""

from __future__ import annotations

import asyncio
import inspect
import sys
import types
from pathlib import Path

import pytest

from tests.drills.plant_analysis_bugs import MUTANTS, ROOT

#: Loaded in this order, so each imports the fresh one before it; the tests last.
MODULES = [("cluster.cli.drill_observer", ROOT / "cluster" / "cli" / "drill_observer.py"),
           ("cluster.cli.drill_analysis", ROOT / "cluster" / "cli" / "drill_analysis.py"),
           ("handlers.builtin", ROOT / "handlers" / "builtin.py"),
           ("tests.drills.test_drill_analysis", ROOT / "tests" / "drills" / "test_drill_analysis.py")]


def _fresh(monkeypatch: pytest.MonkeyPatch, path: Path | None = None, old: str = "", new: str = "") -> types.ModuleType:
    """The modules loaded anew, ``path``'s with ``old`` replaced by ``new``; the test module."""
    module = None
    for name, source_path in MODULES:
        source = source_path.read_text()
        if source_path == path:
            assert source.count(old) == 1, f"{old!r} is no longer in {path.name} once: update the mutant"
            source = source.replace(old, new)
        module = types.ModuleType(name)
        module.__file__ = str(source_path)
        monkeypatch.setitem(sys.modules, name, module)  # before running it: dataclasses look their module up
        exec(compile(source, str(source_path), "exec"), module.__dict__)
    assert module is not None
    return module


def _failures(tests: types.ModuleType, selector: str) -> list[str]:
    """Run the tests whose names hold ``selector`` (as ``pytest -k`` would); what failed, and how."""
    chosen = [(name, fn) for name, fn in vars(tests).items() if name.startswith("test_") and selector in name]
    assert chosen, f"no test matches {selector!r}"
    failed = []
    for name, fn in chosen:
        assert not inspect.signature(fn).parameters, f"{name} needs fixtures: not runnable here"
        try:
            if inspect.iscoroutinefunction(fn):
                asyncio.run(fn())
            else:
                fn()
        except Exception as exc:  # an assertion, or the mutant broke what the test drives
            failed.append(f"{name}: {type(exc).__name__}")
    return failed


def _file_of(old: str) -> Path:
    (path,) = [p for _, p in MODULES[:-1] if p.read_text().count(old) == 1]
    return path


@pytest.mark.parametrize("selector", sorted({test for *_, test in MUTANTS}))
def test_the_guarding_tests_pass_on_the_code_as_it_is(monkeypatch: pytest.MonkeyPatch, selector: str) -> None:
    assert _failures(_fresh(monkeypatch), selector) == []


@pytest.mark.parametrize(("name", "old", "new", "selector"), MUTANTS, ids=[m[0] for m in MUTANTS])
def test_a_planted_bug_is_caught(monkeypatch: pytest.MonkeyPatch, name: str, old: str, new: str, selector: str) -> None:
    tests = _fresh(monkeypatch, _file_of(old), old, new)
    assert _failures(tests, selector), f"planted bug {name!r} went unseen by the tests matching {selector!r}"
