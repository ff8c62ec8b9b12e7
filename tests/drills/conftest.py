"""The store every drill runs on: the file store, and Azurite for what could differ on Azure."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["file", pytest.param("azure", marks=pytest.mark.azurite)])
def drill_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path / 'store'}"
    return str(request.getfixturevalue("azure_store_url"))
