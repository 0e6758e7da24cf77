"""A bench script (bench/NAME.py, not a package) loaded as a module, so tests call its functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def load_bench(name: str) -> ModuleType:
    """bench/``name``.py, executed once per call under the module name ``name``."""
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
