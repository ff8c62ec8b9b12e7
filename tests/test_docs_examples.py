"""Every code block of the README and docs/ is checked, so an example that stops working fails here.

Python blocks run (``tests/docs_examples.py``: one process, one local Ray, each page's blocks in
order as a reader runs them); ``timeshard`` command lines parse with the real CLI's parser; YAML
manifests load. A block that cannot run here says why in a comment above it, in the page itself,
and such blocks are counted.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.cli import build_parser
from tests.docs_examples import Block, blocks, timeshard_commands

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
ALL = [b for page in PAGES for b in blocks(ROOT, page)]
PYTHON = [b for b in ALL if b.lang == "python"]
SHELL = [b for b in ALL if b.lang == "sh"]
YAML = [b for b in ALL if b.lang == "yaml"]
# What is not code to check: program output and trees (no language, or `text`), a Dockerfile
# (builds an image from a registry this suite does not reach).
NOT_CODE = {"", "text", "dockerfile"}
# deploy.md's three blocks need a Ray cluster to join (address="auto") and an Azure account;
# they are compiled and their imports run. Any further exception must be argued here.
MOST_NOT_RUN = 3


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    work = tmp_path_factory.mktemp("docs-examples")
    env = {**os.environ}
    # A local Ray of its own, as a reader's script starts: not the session's, nor one that another
    # process runs on this machine (without an address, Cluster.start joins that one).
    env["RAY_ADDRESS"] = "local"
    done = subprocess.run(
        [sys.executable, "-m", "tests.docs_examples", "--workdir", str(work / "work"), "--out", str(work / "report.json"),
         *PAGES], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    return {entry["id"]: entry for entry in json.loads((work / "report.json").read_text())}


@pytest.mark.ray
@pytest.mark.timeout(280)
@pytest.mark.parametrize("block", PYTHON, ids=lambda b: b.id)
def test_python_example_runs(ran: dict[str, dict[str, Any]], block: Block) -> None:
    entry = ran[block.id]
    expected = {"run": "ok", "compile": "compiled", "skip": "skipped"}[block.mode]
    assert entry["status"] == expected, f"{block.id}: {entry['status']}\n{entry.get('detail', '')}"


@pytest.mark.parametrize("block", SHELL, ids=lambda b: b.id)
def test_timeshard_commands_in_a_shell_example_parse(block: Block) -> None:
    for argv in timeshard_commands(block.code):
        err, out = io.StringIO(), io.StringIO()
        try:
            with redirect_stderr(err), redirect_stdout(out):
                args = build_parser().parse_args(argv)
        except SystemExit as exc:
            if exc.code == 0 and out.getvalue():  # --version, --help: printed, done
                continue
            pytest.fail(f"{block.id}: `timeshard {' '.join(argv)}` does not parse (exit {exc.code}): {err.getvalue()}")
        assert getattr(args, "func", None), f"{block.id}: `timeshard {' '.join(argv)}` names no command"


@pytest.mark.parametrize("block", YAML, ids=lambda b: b.id)
def test_yaml_example_loads(block: Block) -> None:
    documents = [d for d in yaml.safe_load_all(block.code) if d is not None]
    assert documents, f"{block.id}: no YAML document"


def test_every_code_block_is_of_a_kind_checked_here() -> None:
    unknown = [(b.id, b.lang) for b in ALL if b.lang not in {"python", "sh", "yaml"} | NOT_CODE]
    assert not unknown, f"code blocks no test checks: {unknown}"


def test_the_examples_are_found_and_few_are_not_run() -> None:
    # A parser that found nothing would pass every check above.
    assert len(PYTHON) >= 10 and sum(len(timeshard_commands(b.code)) for b in SHELL) >= 20
    not_run = [b for b in PYTHON if b.mode != "run"]
    assert len(not_run) <= MOST_NOT_RUN, [f"{b.id} ({b.mode}: {b.reason})" for b in not_run]
    assert all(b.reason for b in not_run)


def test_a_marker_must_name_what_it_changes() -> None:
    # The comment above a block is the only place a reader sees how it was run: a store it claims
    # to replace that is not in the block would run the block against what the page shows.
    from tests.docs_examples import PageRun

    block = Block("page.md", 1, "python", 'Cluster.start("file:///elsewhere")\n', stores=["file:///tmp/ts"])
    with pytest.raises(ValueError, match="not in the block"):
        PageRun("page.md", ROOT / "unused").prepare(block)
