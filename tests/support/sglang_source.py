"""SGLang's real source, read from its wheels, for the plugin's contract tests.

SGLang cannot be imported without torch and a GPU stack, so the tests read the
``.py`` files straight out of each supported release's wheel and parse them
with ``ast``. A wheel is looked for in ``~/.cache/specctl/sglang-wheels``
(``SPECCTL_WHEEL_CACHE`` overrides it) and, where it is not there yet and
downloads are allowed, fetched once with ``pip download --no-deps`` into it.

tests/conftest.py turns this into the ``sglang_source`` fixture and marks the
tests that use it ``online`` (see there for what a default run does).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from specctl.runtime.sglang_plugin.release_types import Release

CACHE_ENV = "SPECCTL_WHEEL_CACHE"


def wheel_cache() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "specctl" / "sglang-wheels")


def cached_wheel(version: str) -> Path | None:
    """The wheel of ``version`` if it is in the cache already (no network)."""
    found = sorted(wheel_cache().glob(f"sglang-{version}-*.whl"))
    return found[0] if found else None


def download_wheel(version: str) -> Path:
    """Fetch the wheel of ``version`` into the cache (needs the package index) and return it.

    pip writes into a private folder first and the wheel is renamed into the cache
    whole, so a parallel test worker never reads a wheel half written.
    """
    cache = wheel_cache()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        # Only the .py files are read, so any platform's wheel serves; pinning the one
        # published for CPython 3.11 on x86-64 Linux makes the download the same everywhere.
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
             "--platform", "manylinux_2_34_x86_64", "--quiet", f"sglang=={version}", "-d", tmp],
            check=True,
        )
        fetched = sorted(Path(tmp).glob(f"sglang-{version}-*.whl"))
        if not fetched:
            raise FileNotFoundError(f"pip download left no sglang {version} wheel in {tmp}")
        os.replace(fetched[0], cache / fetched[0].name)
    wheel = cached_wheel(version)
    assert wheel is not None
    return wheel


@dataclass
class Located:
    """A name found in the source: its module file, and the node (None for a module)."""

    path: str
    node: ast.AST | None
    owner: ast.ClassDef | None  # the class a method target belongs to

    @property
    def module(self) -> str:
        return self.path.removesuffix("/__init__.py").removesuffix(".py").replace("/", ".")


class SglangSource:
    """One release's source files, read from its wheel."""

    def __init__(self, release: Release, wheel: Path) -> None:
        self.release = release
        self._zip = zipfile.ZipFile(wheel)
        self._names = set(self._zip.namelist())
        self._trees: dict[str, ast.Module] = {}

    @cached_property
    def version(self) -> str:
        tree = self.tree("sglang/_version.py")
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                if any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
                    return str(node.value.value)
        raise LookupError("no __version__ in sglang/_version.py")

    def text(self, path: str) -> str:
        """A file under the wheel's root, e.g. ``sglang/srt/server_args.py``."""
        return self._zip.read(path).decode("utf-8")

    def srt(self, rel: str) -> str:
        return self.text(f"sglang/srt/{rel}")

    def python_files(self, prefix: str) -> list[str]:
        return sorted(n for n in self._names if n.startswith(prefix) and n.endswith(".py"))

    def files(self, prefix: str) -> list[str]:
        """Every file of the wheel under ``prefix``, whatever its kind (data files too: tuned kernel configs)."""
        return sorted(n for n in self._names if n.startswith(prefix))

    def tree(self, path: str) -> ast.Module:
        if path not in self._trees:
            self._trees[path] = ast.parse(self.text(path), filename=path)
        return self._trees[path]

    def module_path(self, dotted: str) -> str | None:
        for candidate in (dotted.replace(".", "/") + ".py", dotted.replace(".", "/") + "/__init__.py"):
            if candidate in self._names:
                return candidate
        return None

    def locate(self, dotted: str) -> Located:
        """Resolve ``package.module.Class.attr`` the way pkgutil.resolve_name does, in the source."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            path = self.module_path(".".join(parts[:cut]))
            if path is None:
                continue
            node: ast.AST | None = None
            owner: ast.ClassDef | None = None
            scope: ast.AST = self.tree(path)
            for name in parts[cut:]:
                owner = scope if isinstance(scope, ast.ClassDef) else None
                node = find_definition(scope, name)
                if node is None:
                    raise LookupError(f"{dotted}: {name!r} is not defined in {path}")
                scope = node
            return Located(path, node, owner)
        raise LookupError(f"{dotted}: no such module in the wheel")


def find_definition(scope: ast.AST, name: str) -> ast.AST | None:
    """A class, function, assignment or import binding ``name`` directly in ``scope``."""
    for node in getattr(scope, "body", []):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return node
    return None


def parameter_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """Parameter names after ``self``/``cls`` (positional, then keyword-only)."""
    args = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
    if args and args[0] in ("self", "cls"):
        args = args[1:]
    return args + [a.arg for a in fn.args.kwonlyargs]


def required_parameter_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The parameters of ``parameter_names`` that have no default (a call must pass them)."""
    positional = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
    required = positional[: len(positional) - len(fn.args.defaults)]
    if required and required[0] in ("self", "cls"):
        required = required[1:]
    return required + [a.arg for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is None]


def attribute_names(tree: ast.AST) -> set[str]:
    """Every ``x.name`` read or written anywhere in ``tree``."""
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}


def class_fields(tree: ast.Module) -> set[str]:
    """Annotated names declared directly in any class body of the module."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
    return names


def module_name(rel: str) -> str:
    """The dotted name of a file under sglang/srt/ (``a/b.py``: ``sglang.srt.a.b``)."""
    return "sglang.srt." + rel.removesuffix(".py").replace("/", ".")


def run_module(source: SglangSource, rel: str, namespace: dict[str, object]) -> None:
    """Run one file under sglang/srt/ in ``namespace``, its ``from sglang... import`` lines left out.

    What they would import the caller puts in ``namespace`` first: SGLang's own
    imports reach torch and the GPU stack, which a test machine does not have.
    """
    tree = source.tree(f"sglang/srt/{rel}")
    body = [n for n in tree.body if not (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("sglang"))]
    exec(compile(ast.Module(body=body, type_ignores=[]), f"sglang/srt/{rel}", "exec"), namespace)
