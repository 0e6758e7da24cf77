"""Fixtures shared across test modules."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# The SGLang-source fixture (sglang_source) and its helpers, for the plugin's contract tests.
pytest_plugins = ["conftest_sglang"]


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory: a Unix socket path must fit in 108 bytes, pytest's tmp_path may not."""
    path = Path(tempfile.mkdtemp(prefix="sc-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
