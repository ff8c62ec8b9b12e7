"""The documentation's code blocks, found and run as a reader would run them.

    python -m tests.docs_examples --workdir DIR --out report.json README.md docs/reference.md ...

Each page's ```python blocks run in order in one namespace, as cells of one notebook: a block may
use what an earlier block of its page defined, and may ``await`` at top level (the client's calls
are coroutines). Everything runs in this one process, on the one local Ray that the first
``Cluster.start`` brings up, as in a user's script; ``tests/test_docs_examples.py`` runs this
module once and checks every block's result.

A block may be preceded, on the line just above its fence, by a comment that says how it runs.
The comment is part of the page's source, so a reader of the file sees every exception made:

``<!-- doc-test: setup=client -->``
    before the block, start a one-silo cluster on a fresh file store in a namespace of the page's
    own and bind ``cluster``, ``client``, ``ray`` and the public names of ``cluster`` and
    ``handlers`` (for a page that continues the README's tour rather than starting a cluster).
``<!-- doc-test: setup=myapp -->``
    make ``myapp.grains`` importable, with a ``Cart`` handler (the tour's grain class).
``<!-- doc-test: store=URL -->``
    the block's store URL ``URL`` is replaced by a fresh folder's, so runs never share a store.
``<!-- doc-test: compile: REASON -->``
    the block is compiled and its imports run, nothing else (it needs what a test has not: a
    Ray cluster at ``address="auto"``, an Azure account).
``<!-- doc-test: skip: REASON -->``
    the block does not run at all.

The test asserts that compiled-only and skipped blocks stay few.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import inspect
import json
import re
import shlex
import sys
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DIRECTIVE = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<body>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
BLOCK_TIMEOUT = 60.0  # seconds: an example that hangs fails instead of stalling the suite
GRAINS = '''"""The tour's grain class (a stand-in for a module of the user's)."""

from handlers import JobContext, JobHandler


class Cart(JobHandler):
    async def execute_job(self, ctx: JobContext) -> None:
        pass
'''


@dataclass
class Block:
    """One fenced code block of a page, with the doc-test comment above it (if any)."""

    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    setups: list[str] = field(default_factory=list)
    stores: list[str] = field(default_factory=list)
    mode: str = "run"  # run | compile | skip
    reason: str = ""

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def parse_directive(body: str, block: Block) -> None:
    for mode in ("compile", "skip"):
        if body.startswith(f"{mode}:"):
            block.mode, block.reason = mode, body[len(mode) + 1:].strip()
            if not block.reason:
                raise ValueError(f"{block.id}: a '{mode}:' doc-test comment must say why")
            return
    for token in body.split():
        key, sep, value = token.partition("=")
        if not sep or not value:
            raise ValueError(f"{block.id}: doc-test comment item {token!r} is not key=value")
        if key == "setup":
            block.setups.extend(value.split(","))
        elif key == "store":
            block.stores.append(value)
        else:
            raise ValueError(f"{block.id}: unknown doc-test key {key!r}")


def blocks(root: Path, page: str) -> list[Block]:
    """Every fenced block of ``page`` (relative to ``root``), in order, dedented."""
    lines = (root / page).read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent = opening["indent"]
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != f"{indent}```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{page}:{i + 1}: code block never closed")
        code = "\n".join(line[len(indent):] if line.startswith(indent) else line for line in lines[i + 1:end])
        block = Block(page, i + 1, opening["lang"], code + "\n")
        directive = DIRECTIVE.match(lines[i - 1]) if i else None
        if directive:
            parse_directive(directive["body"], block)
        found.append(block)
        i = end + 1
    return found


ENV_PREFIX = re.compile(r"^(?:\w+=(?:\$\([^)]*\)|\S+)\s+)+")


def timeshard_commands(code: str) -> list[list[str]]:
    """The ``timeshard`` command lines of a shell block, as argument lists (without ``timeshard``).

    Continuation lines are joined; in a block that shows a session (``$ `` prompts) only the
    prompted lines are commands; ``VAR=value`` prefixes are dropped; a command run through
    ``kubectl exec ... --`` or quoted for ``ssh`` counts too.
    """
    lines = code.replace("\\\n", " ").splitlines()
    if any(line.startswith("$ ") for line in lines):
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    found: list[list[str]] = []
    for line in lines:
        words = shlex.split(ENV_PREFIX.sub("", line.strip()), comments=True)
        for i, word in enumerate(words):
            if word.startswith("timeshard ") and i:  # ssh host 'timeshard ui ...'
                found.append(shlex.split(word)[1:])
                break
            if word == "timeshard" and (i == 0 or words[i - 1] == "--"):
                found.append([w for w in words[i + 1:] if w != "&"])
                break
    return found


def _imports_only(code: str) -> ast.Module:
    tree = ast.parse(code)
    return ast.Module([n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], type_ignores=[])


class PageRun:
    """Runs one page's Python blocks in one namespace; remembers the clusters it must stop."""

    def __init__(self, page: str, workdir: Path) -> None:
        self.page = page
        self.slug = re.sub(r"[^a-z0-9]+", "-", page.lower()).strip("-")
        self.workdir = workdir
        self.namespace: dict[str, Any] = {"__name__": "__main__"}
        self.started: list[Any] = []

    def prepare(self, block: Block) -> str:
        code = block.code
        for url in block.stores:
            if url not in code:
                raise ValueError(f"{block.id}: store {url!r} named in the doc-test comment is not in the block")
            code = code.replace(url, f"file://{self.workdir / f'{self.slug}-{block.line}'}")
        for setup in block.setups:
            if setup == "myapp":
                package = self.workdir / "myapp"
                package.mkdir(exist_ok=True)
                (package / "__init__.py").write_text("")
                (package / "grains.py").write_text(GRAINS)
                if str(self.workdir) not in sys.path:
                    sys.path.insert(0, str(self.workdir))
            elif setup == "client":
                self.namespace.update(self.start_cluster(block))
            else:
                raise ValueError(f"{block.id}: unknown setup {setup!r}")
        return code

    def start_cluster(self, block: Block) -> dict[str, Any]:
        import ray

        import cluster as public
        import handlers
        from cluster import Cluster

        started = Cluster.start(f"file://{self.workdir / f'{self.slug}-{block.line}-setup'}", silos=1,
                                namespace=f"docs-{self.slug}")
        self.started.append(started)
        names = {n: getattr(public, n) for n in public.__all__}
        names.update({n: getattr(handlers, n) for n in getattr(handlers, "__all__", ())})
        return {**names, "ray": ray, "cluster": started, "client": started.client()}

    async def run(self, block: Block) -> None:
        if block.mode == "skip":
            return
        if block.mode == "compile":
            compile(block.code, block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            exec(compile(_imports_only(block.code), block.id, "exec"), {"__name__": "__main__"})
            return
        code = compile(self.prepare(block), block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, self.namespace)  # the documentation's own example, as written
        if inspect.iscoroutine(result):
            await asyncio.wait_for(result, BLOCK_TIMEOUT)

    def stop(self) -> None:
        from cluster import Cluster

        clusters = self.started + [v for v in self.namespace.values() if isinstance(v, Cluster)]
        for c in {id(c): c for c in clusters}.values():
            try:
                c.shutdown(graceful=False)
            except Exception as exc:  # stopping is best effort: the process's Ray ends with it
                print(f"{self.page}: stopping {c.namespace}: {exc!r}", file=sys.stderr)


async def run_pages(root: Path, pages: list[str], workdir: Path) -> list[dict[str, Any]]:
    report: list[dict[str, Any]] = []
    for page in pages:
        run = PageRun(page, workdir)
        failed_at: str | None = None
        try:
            for block in (b for b in blocks(root, page) if b.lang == "python"):
                entry = {**asdict(block), "id": block.id}
                if failed_at:
                    entry.update(status="not reached", detail=f"an earlier block of the page failed: {failed_at}")
                else:
                    try:
                        await run.run(block)
                        entry.update(status={"run": "ok", "compile": "compiled", "skip": "skipped"}[block.mode])
                    except BaseException as exc:
                        if isinstance(exc, KeyboardInterrupt):
                            raise
                        failed_at = block.id
                        entry.update(status="failed", detail="".join(traceback.format_exception(exc))[-4000:])
                report.append(entry)
                print(f"{entry['id']}: {entry['status']}", entry.get("detail", ""), file=sys.stderr, flush=True)
        finally:
            run.stop()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="+", help="markdown files, relative to --root")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--workdir", type=Path, required=True, help="a scratch folder for stores and modules")
    parser.add_argument("--out", type=Path, required=True, help="where the JSON report goes")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    report = asyncio.run(run_pages(args.root, args.pages, args.workdir))
    args.out.write_text(json.dumps(report, indent=2))
    try:
        import ray

        ray.shutdown()
    except Exception:  # the report is written; a slow shutdown is not the examples' failure
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
