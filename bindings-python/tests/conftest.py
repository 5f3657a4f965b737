"""Shared fixtures for the rocklet tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

import rocklet

# The repository root (bindings-python/tests/conftest.py -> ../..), overridable for a
# wheel installed elsewhere.
REPO = Path(os.environ.get("ROCKLET_REPO", Path(__file__).resolve().parents[2]))


@pytest.fixture
def broker() -> Iterator[rocklet.Broker]:
    """An in-memory broker on a manual clock at 0."""
    b = rocklet.Broker(clock="manual")
    yield b
    b.close()


@pytest.fixture
def durable(tmp_path: Path) -> Iterator[Path]:
    """A data directory for durable brokers."""
    yield tmp_path / "data"
