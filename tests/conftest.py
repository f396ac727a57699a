"""Shared pytest configuration."""

from __future__ import annotations

import pytest

# Shared fixtures requested by name (``postgres``: a PostgreSQL server for the table tests), found
# by pytest here rather than imported into each test module, where an import looks unused.
pytest_plugins = ["table_notes"]


def pytest_configure(config: pytest.Config) -> None:
    # Slow tests still run by default (CI included); deselect locally with -m "not slow".
    config.addinivalue_line("markers", "slow: slow tests (building and installing the wheel)")


@pytest.fixture(autouse=True)
def _no_file_limit_leaks(monkeypatch: pytest.MonkeyPatch) -> None:
    """`hybriddeid ... --max-file-mb` sets the readers' limit in the process environment (so worker
    processes inherit it); a test calling ``cli.main`` in-process must not leave it for the next test."""
    from hybriddeid.io._common import MAX_FILE_MB_ENV

    monkeypatch.delenv(MAX_FILE_MB_ENV, raising=False)  # restored as it was when the test ends
