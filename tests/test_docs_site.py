"""The docs build as a static site with MkDocs, strictly: a broken link or anchor fails the build."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(120)
def test_the_docs_build_strictly_with_every_link_and_anchor_found(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                           "--site-dir", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-4000:]
    home = (tmp_path / "site" / "index.html").read_text()
    assert "A short tour" in home  # the README is the site's home page
    for page in ("reference", "operations", "failover", "deploy", "guarantees", "benchmarks"):
        assert (tmp_path / "site" / page / "index.html").exists(), page
    # Readable offline: no page loads a script, stylesheet or font from elsewhere.
    remote = re.compile(r"<(?:script|link)[^>]*(?:src|href)=\"(?:https?:)?//")
    for html in (tmp_path / "site").rglob("*.html"):
        assert not remote.search(html.read_text()), html
