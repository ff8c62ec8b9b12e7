"""The mutation table stays runnable (issue 24, deliverable 7), checked without running a mutant.

A refactor that moves a mutant's code makes its replacement match zero or two places: this fails
here, at once, instead of the mutant quietly planting nothing. A mutant that does not compile
would be "caught" by an import error: that fails here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.mutants.model import Mutant, Pytest, Sim
from tests.mutants.table import MUTANTS

ROOT = Path(__file__).resolve().parents[1]


def test_names_are_unique_and_there_are_enough_kinds() -> None:
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names))
    assert len(MUTANTS) >= 12 and len({m.kind for m in MUTANTS}) >= 8


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_plants_exactly_once_and_still_compiles(mutant: Mutant) -> None:
    source = (ROOT / mutant.path).read_text()
    mutated = mutant.apply(source)  # raises unless the text to replace occurs exactly once
    assert mutated != source
    ast.parse(mutated, filename=mutant.path)  # a syntax error would be "caught" by any command


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_catcher_names_tests_that_exist(mutant: Mutant) -> None:
    for catch in mutant.catchers:
        if isinstance(catch, Sim):
            assert catch.count > 0 and catch.start >= 0
            continue
        assert isinstance(catch, Pytest) and catch.nodes
        for node in catch.nodes:
            path, *names = node.split("::")
            tree = ast.parse((ROOT / path).read_text())
            defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            assert all(name in defined for name in names), f"{node}: no such test"
    if mutant.expects is not None:  # an awaited oracle is the simulator's
        assert any(isinstance(catch, Sim) for catch in mutant.catchers)


def test_a_moved_text_is_reported_not_planted() -> None:
    mutant = Mutant("x", "kind", "f.py", "a = 1\n", "a = 2\n", Sim(0, 1), "why")
    assert mutant.apply("a = 1\n") == "a = 2\n"
    for text in ("", "a = 1\na = 1\n"):
        with pytest.raises(ValueError, match="not once"):
            mutant.apply(text)
