"""Fixtures shared across test modules, and the ``online`` marker.

``online`` marks the tests that read SGLang's release wheels (every test that
takes the ``sglang_source`` fixture). The default run leaves them out, with
``slow`` and ``bench`` (pyproject's addopts), so a plain ``pytest`` needs nothing
but the machine. The second tier, ``pytest -m "slow or bench or online"``, runs them:

- ``--online`` (or ``SPECCTL_ONLINE=1``, which .ci/run sets) downloads a
  missing wheel once, so every ``online`` test runs;
- without it, a test whose wheel is already in the cache runs and one whose
  wheel is not there is skipped, saying how to fetch it.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from specctl.runtime.sglang_plugin.compat import RELEASES

from support.sglang_source import SglangSource, cached_wheel, download_wheel, wheel_cache

ONLINE_ENV = "SPECCTL_ONLINE"

# A run started under nohup hands every process it starts an ignored SIGHUP, which specctl keeps
# ignored by design (`nohup specctl run --headless &` asks to outlive the session): the tests that
# hang up on the console or the supervisor assert what an operator's closed ssh session does, so
# their processes start with the default; test_under_nohup_* runs nohup itself.
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--online", action="store_true", default=os.environ.get(ONLINE_ENV) == "1",
                     help=f"download what 'online' tests need (SGLang wheels) when it is not cached "
                          f"(also {ONLINE_ENV}=1)")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that reads a wheel is ``online``: marked by the fixture it takes, so none is missed."""
    for item in items:
        if "sglang_source" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.online)


@pytest.fixture(scope="session", params=sorted(RELEASES))
def sglang_source(request: pytest.FixtureRequest) -> SglangSource:
    """One supported release's source, read from its wheel: each test runs once per release."""
    release = RELEASES[request.param]
    wheel = cached_wheel(release.version)
    if wheel is None:
        if not request.config.getoption("online"):
            pytest.skip(f"SGLang {release.version}'s wheel is not in {wheel_cache()}; "
                        f"--online or {ONLINE_ENV}=1 downloads it")
        wheel = download_wheel(release.version)
    return SglangSource(release, wheel)


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory: a Unix socket path must fit in 108 bytes, pytest's tmp_path may not."""
    path = Path(tempfile.mkdtemp(prefix="sc-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True, scope="session")
def _no_site_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test, and every process it starts, reads an empty config file, never the developer's own.

    ``run``, ``tui`` and ``sglang-args`` read ``[policy]`` from ~/.config/specctl/specctl.toml: a
    machine with one would see other settings printed and applied than the tests expect. A test
    about the file sets SPECCTL_CONFIG (or passes its own environment) itself, which wins.
    """
    empty = tmp_path_factory.mktemp("site-config") / "specctl.toml"
    empty.write_text("")
    before = os.environ.get("SPECCTL_CONFIG")
    os.environ["SPECCTL_CONFIG"] = str(empty)
    yield
    if before is None:
        os.environ.pop("SPECCTL_CONFIG", None)
    else:
        os.environ["SPECCTL_CONFIG"] = before


@pytest.fixture(autouse=True)
def _own_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test, and every process it starts, keeps its state (the desired state, keys, preferences) in a
    folder of its own: never the developer's, and never a setting an earlier test left behind. A test
    about the state folder sets SPECCTL_STATE_DIR itself, which wins."""
    if "SPECCTL_STATE_DIR" not in os.environ:
        monkeypatch.setenv("SPECCTL_STATE_DIR", str(tmp_path_factory.mktemp("state")))
