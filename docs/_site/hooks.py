"""MkDocs hooks: the README is the site's home page, so its links are checked with the rest.

On GitHub the README sits above docs/ and links to ``docs/x.md``; the pages link back to
``../README.md``. In the site the README becomes ``index.md`` beside the pages, so both kinds of
link are rewritten to where the files land; nothing else changes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

README = Path(__file__).resolve().parents[2] / "README.md"


def on_files(files: Files, config: Any) -> Files:
    text = re.sub(r"\]\(docs/", "](", README.read_text())
    files.append(File.generated(config, "index.md", content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return markdown.replace("](../README.md", "](index.md")
