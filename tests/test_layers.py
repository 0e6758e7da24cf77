"""The headless half never loads the UI: proven in a fresh interpreter, as Harlequin does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HEADLESS = [
    "specctl.runtime.core.policy", "specctl.runtime.supervisor.lifecycle", "specctl.runtime.control.server",
    "specctl.runtime.control.client", "specctl.runtime.sim.server", "specctl.console.cli.main",
    "specctl.console.cli.headless", "specctl.console.cli.verbs", "specctl.runtime.supervisor.launcher",
    "specctl.runtime.sglang_plugin.plugin",
]


@pytest.mark.parametrize("module", HEADLESS)
def test_headless_modules_do_not_import_ui(module: str) -> None:
    code = (f"import sys, importlib; importlib.import_module({module!r}); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich') "
            "or m.startswith(('specctl.widgets', 'specctl.themes')));"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} pulls in UI modules: {out.stdout.strip()}"


def test_import_linter_contract_holds(tmp_path: Path) -> None:
    """pyproject's import-linter contract: runtime reaches neither console, widgets nor textual.

    import-linter reads source trees, not setuptools' package-dir mapping, so the
    installed layout (specctl/runtime, specctl/console, ...) is laid out as files first.
    """
    root = Path(__file__).resolve().parent.parent
    pkg = tmp_path / "specctl"
    shutil.copytree(root / "specctl_pkg", pkg)
    for sub in ("console", "runtime", "widgets", "themes"):
        shutil.copytree(root / sub, pkg / sub, ignore=shutil.ignore_patterns("__pycache__"))
    lint = Path(sys.executable).parent / "lint-imports"
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    out = subprocess.run([str(lint), str(root / "pyproject.toml")], capture_output=True,
                         text=True, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 kept, 0 broken" in out.stdout
