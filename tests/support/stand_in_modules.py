"""Stand-in modules for what cannot be imported here (SGLang, torch), for the plugin's unit tests.

Why: the plugin imports SGLang lazily, inside its hooks, and SGLang needs a GPU
build of torch. A test puts modules of just the names a hook reads into
``sys.modules`` (through monkeypatch, so they go at the test's end), with every
parent package present so that ``import a.b.c`` resolves.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest


def stand_in_modules(monkeypatch: pytest.MonkeyPatch, modules: dict[str, dict[str, Any]]) -> None:
    """Install each ``dotted.name`` as a module holding ``attrs``, for the rest of the test."""
    for name, attrs in modules.items():
        parts = name.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            monkeypatch.setitem(sys.modules, parent, types.ModuleType(parent))
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)
