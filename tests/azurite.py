"""Azurite for tests: start one or fail (under CI=true) / skip (locally) with the reason."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks._azurite import Azurite, AzuriteUnavailable, free_port

__all__ = ["Azurite", "AzuriteUnavailable", "free_port", "start_azurite"]


def start_azurite(location: Path | None = None, port: int | None = None) -> Azurite:
    """Start an Azurite; without it, fail the run under ``CI=true`` and skip elsewhere."""
    azurite = Azurite(location=location) if port is None else Azurite(port=port, location=location)
    try:
        return azurite.start()
    except AzuriteUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"Azurite is required under CI=true: {exc}", pytrace=False)
        pytest.skip(f"Azurite not available ({exc})")  # only outside CI: under CI=true it failed above
