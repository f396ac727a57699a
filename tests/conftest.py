"""Shared pytest configuration."""
from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Slow tests still run by default (CI included); deselect locally with -m "not slow".
    config.addinivalue_line("markers", "slow: slow tests (building and installing the wheel)")
