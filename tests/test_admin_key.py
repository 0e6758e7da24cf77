"""The admin key specctl gives the servers it launches, checked against SGLang's own source per release.

What these prove (docs/sglang-plugin.md, "The admin key"): in 0.5.17 and 0.5.23 alike, /set_internal_state is
ADMIN_OPTIONAL, so ``--admin-api-key`` closes it while /generate, /server_info, /health and /metrics stay
open; the key reaches SGLang through ``--config`` (a YAML file), never its command line.
"""

from __future__ import annotations

import ast
import stat
import subprocess
import sys
import types
from pathlib import Path

import pytest

from specctl.runtime.supervisor import launcher
from specctl.runtime.supervisor.server_key import KeyFileError, LaunchKey, read_key_file

from support.sglang_source import SglangSource, class_fields


def decorators_of(tree: ast.Module, name: str) -> list[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef) and node.name == name:
            return [ast.unparse(d) for d in node.decorator_list]
    raise LookupError(name)


def auth_module(source: SglangSource) -> types.ModuleType:
    """SGLang's auth.py, run as it is: it imports nothing heavy ("so it can be used in unit tests")."""
    name = f"sglang_auth_under_test_{source.release.version.replace('.', '_')}"
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up there
    try:
        exec(compile(source.srt("utils/auth.py"), "sglang/srt/utils/auth.py", "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    return module


def test_set_internal_state_is_admin_optional_and_generate_is_not(sglang_source: SglangSource) -> None:
    http = sglang_source.tree("sglang/srt/entrypoints/http_server.py")
    for control in ("set_internal_state", "flush_cache", "abort_request"):  # the simulator's ADMIN_PATHS
        assert "auth_level(AuthLevel.ADMIN_OPTIONAL)" in decorators_of(http, control), control
    for open_endpoint in ("generate_request", "server_info"):
        assert not any("auth_level" in d for d in decorators_of(http, open_endpoint)), open_endpoint


def test_the_admin_key_closes_only_the_control_endpoints(sglang_source: SglangSource) -> None:
    auth = auth_module(sglang_source)

    def allowed(path: str, header: str | None, api_key: str | None = None) -> bool:
        level = auth.AuthLevel.ADMIN_OPTIONAL if path == "/set_internal_state" else auth.AuthLevel.NORMAL
        return auth.decide_request_auth(method="POST", path=path, authorization_header=header, api_key=api_key,
                                        admin_api_key="K", auth_level=level).allowed

    assert not allowed("/set_internal_state", None) and not allowed("/set_internal_state", "Bearer wrong")
    assert allowed("/set_internal_state", "Bearer K")
    assert allowed("/generate", None) and allowed("/server_info", None) and allowed("/metrics", None)
    # with the operator's --api-key as well: the rest wants that key, the control endpoint still ours
    assert not allowed("/server_info", None, api_key="A") and allowed("/server_info", "Bearer A", api_key="A")
    assert not allowed("/set_internal_state", "Bearer A", api_key="A")


def test_the_key_travels_in_a_config_file_sglang_reads(sglang_source: SglangSource) -> None:
    fields: set[str] = set()
    for rel in sglang_source.release.args_field_files:
        fields |= class_fields(sglang_source.tree(f"sglang/srt/{rel}"))
    assert "admin_api_key" in fields
    server_args = sglang_source.srt("server_args.py")
    assert 'if "--config" in argv:' in server_args and "merge_config_with_args(argv)" in server_args
    parser = [p for p in sglang_source.python_files("sglang/srt/") if p.endswith("server_args_config_parser.py")]
    assert parser and ".yaml" in sglang_source.text(parser[0])


def test_the_launch_command_names_the_key_file_and_not_the_key(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPECCTL_STATE_DIR", str(tmp_path / "state"))
    key = LaunchKey()
    config = key.sglang_config()
    cmd = launcher.build_command("/m", "/d", 1, 3, 30000, "127.0.0.1", "/a.json", ["--log-level", "info"],
                                 key_config=str(config))
    assert cmd[cmd.index("--config") + 1] == str(config) and key.key not in " ".join(cmd)
    assert config.suffix == ".yaml" and config.read_text() == f'admin-api-key: "{key.key}"\n'
    for path in (config, key.path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700
    key.remove()
    assert not config.exists() and not key.path.exists()


@pytest.mark.parametrize("args", [["--config", "mine.yaml"], ["--admin-api-key=x"]])
def test_arguments_that_would_replace_the_key_are_refused(args: list[str]) -> None:
    assert launcher.reserved_arg(["--mem-fraction-static", "0.8", *args]) == args[0].split("=")[0]
    assert launcher.api_key_of(["--api-key", "A"]) == "A" and launcher.api_key_of(["--api-key=B"]) == "B"


def test_an_operators_key_file_must_be_private(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_text("secret\n")
    path.chmod(0o640)
    with pytest.raises(KeyFileError, match="chmod 600"):
        read_key_file(path)
    path.chmod(0o600)
    assert read_key_file(path) == "secret"


def test_the_keys_of_a_supervisor_killed_with_9_are_removed_by_the_next(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPECCTL_STATE_DIR", str(tmp_path / "state"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folder = tmp_path / "state" / "keys"
    folder.mkdir(parents=True)
    orphan, alive = folder / f"server-{dead.pid}.key", folder / "server-1.key"  # pid 1 is alive
    for path in (orphan, alive):
        path.write_text("old\n")
    key = LaunchKey()
    assert not orphan.exists() and alive.exists() and key.path.exists()
    key.remove()
