"""The headless half never loads the UI: proven in a fresh interpreter, as Harlequin does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEADLESS = [
    "specctl.runtime.core.policy", "specctl.runtime.supervisor.lifecycle", "specctl.runtime.control.server",
    "specctl.runtime.control.client", "specctl.runtime.sim.server", "specctl.console.cli.main",
    "specctl.console.cli.headless", "specctl.console.cli.verbs", "specctl.runtime.supervisor.launcher",
    "specctl.runtime.sglang_plugin.plugin", "specctl.console.cli.depth_costs",
]


@pytest.mark.parametrize("module", HEADLESS)
def test_headless_modules_do_not_import_ui(module: str) -> None:
    code = (f"import sys, importlib; importlib.import_module({module!r}); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich') "
            "or m.startswith(('specctl.widgets', 'specctl.themes')));"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} pulls in UI modules: {out.stdout.strip()}"


def test_import_contracts_hold_on_the_tree_as_it_is() -> None:
    """pyproject's import-linter contracts (the layers), checked by the command CI runs."""
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, str(root / ".ci" / "check"), "imports"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Contracts: 9 kept, 0 broken." in out.stdout
