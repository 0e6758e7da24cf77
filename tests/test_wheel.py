"""The wheel carries every package of the tree: pyproject's ``packages`` is a list kept by hand.

A folder of Python files under console/, runtime/, widgets/, themes/ or specctl_pkg/ that
the list leaves out would install from the working tree (an editable install finds it) and be
missing from every wheel. So the wheel is built here, offline, from a copy of the tree, and
each such folder must be in it under its installed name, with the package data beside it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"


def tree_packages() -> dict[str, Path]:
    """Each folder of Python files in the tree, by the name it installs as (package-dir's mapping)."""
    mapping: dict[str, str] = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["package-dir"]
    found: dict[str, Path] = {}
    for package, folder in mapping.items():
        top = ROOT / folder
        for source in top.rglob("*.py"):
            if "__pycache__" in source.parts:
                continue
            parts = source.parent.relative_to(top).parts
            if package == "specctl" and parts:
                continue  # the root package's subfolders are mapped on their own
            found[".".join((package, *parts))] = source.parent
    return found


def build_wheel(dest: Path) -> Path:
    """The wheel pip builds from a copy of the tree (no build/ or egg-info left in the checkout)."""
    src = dest / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    mapping: dict[str, str] = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["package-dir"]
    for folder in set(mapping.values()):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                          "-q", "-w", str(dest / "dist"), str(src)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    [wheel] = (dest / "dist").glob("specctl-*.whl")
    return wheel


def test_the_wheel_has_every_package_folder_of_the_tree_and_its_data(tmp_path: Path) -> None:
    packages = tree_packages()
    assert {"specctl", "specctl.runtime.core", "specctl.console.tui.screens", "specctl.widgets"} <= set(packages)
    with zipfile.ZipFile(build_wheel(tmp_path)) as wheel:
        names = set(wheel.namelist())
    in_wheel = {name.rpartition("/")[0].replace("/", ".") for name in names if name.endswith(".py")}
    missing = sorted(set(packages) - in_wheel)
    assert not missing, (f"not in the wheel: {', '.join(missing)}; add each to [tool.setuptools] packages "
                         "in pyproject.toml")
    for package, folder in packages.items():
        for source in folder.glob("*.py"):
            assert f"{package.replace('.', '/')}/{source.name}" in names, source
    data = {path for path in names if path.endswith(".tcss")}
    assert {"specctl/console/tui/app.tcss"} <= data, "the console's stylesheet is package data"
