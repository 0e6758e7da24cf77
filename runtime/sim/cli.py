"""``python -m specctl.runtime.sim``: run the simulator as an HTTP server process.

With an admin key (``--admin-key-file``, or ``$SPECCTL_SIM_ADMIN_KEY`` from the
supervisor that starts it) its control endpoints need ``Authorization: Bearer
KEY``, as SGLang's under ``--admin-api-key``. It writes the bound port to ``--port-file`` (atomically: a temporary file,
then a rename) and prints one ``specctl-sim listening on URL`` line once it
listens; SIGTERM or SIGINT stop it cleanly with exit code 0.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, NoReturn

from aiohttp import web

from specctl.runtime.core.atomic_file import write_atomic
from specctl.runtime.core.depth_model import DepthCosts, DepthCostsError, read_costs
from specctl.runtime.core.settings import SettingsError, check_fields, unasked_floor
from specctl.runtime.core.tree_drafts import tree_depths_problem, tree_switch_enabled
from specctl.runtime.core.wire import ADMIN_PATHS, SIM_ADMIN_KEY_ENV
from specctl.runtime.sim.gpus import MAX_GPUS
from specctl.runtime.sim.load import parse_load
from specctl.runtime.sim.nospec import usage_problem
from specctl.runtime.sim.preset_model import Preset
from specctl.runtime.sim.presets import DEFAULT_PRESET, PRESETS, get_preset
from specctl.runtime.sim.routes import build_app
from specctl.runtime.sim.serve import DEFAULT_MAX_CONNECTIONS, HEADER_TIMEOUT_S, BadAddress, Listener, PortInUse
from specctl.runtime.sim.server import SimServer
from specctl.runtime.sim.server_config import DEFAULT_MAX_QUEUED, SimConfig
from specctl.runtime.sim.tmpdirs import remove_own_dir, sweep_stale_dirs

DEFAULT_CONTEXT_LENGTH = 131_072  # Llama 3.1's, the presets' models
MAX_REPLICAS = 1024
Fail = Callable[[str], NoReturn]


def add_arguments(ap: argparse.ArgumentParser, *, port: int, load: str) -> None:
    """The simulator's flags: SGLang's own names where SGLang has one (``--port``, ``--model-path`` ...)."""
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=port,
                    help=f"port to listen on; 0 picks a free one (default {port})")
    ap.add_argument("--replicas", type=int, default=1, metavar="N",
                    help="serve N simulated servers, each with its own engine, on N consecutive ports from --port "
                         "(with --port 0: N free ports), in this one process (default 1)")
    ap.add_argument("--port-file", type=Path, help="write the bound port(s) here once listening, one a line")
    ap.add_argument("--model-path", metavar="PATH",
                    help="the model path the server reports (default: the preset's); nothing is loaded")
    ap.add_argument("--served-model-name", metavar="NAME",
                    help="the model name /v1/models serves (default: --model-path)")
    ap.add_argument("--context-length", type=int, metavar="TOKENS",
                    help=f"the model's context length (default {DEFAULT_CONTEXT_LENGTH})")
    ap.add_argument("--api-key", metavar="KEY", help="require Authorization: Bearer KEY, as SGLang's --api-key")
    ap.add_argument("--admin-api-key", metavar="KEY",
                    help="require this key on the control endpoints, as SGLang's --admin-api-key "
                         "(prefer --admin-key-file: a flag shows in the process list)")
    ap.add_argument("--max-queued-requests", type=int, default=DEFAULT_MAX_QUEUED, metavar="N",
                    help=f"refuse a request with 503 while N wait in the queue, as SGLang's flag "
                         f"(default {DEFAULT_MAX_QUEUED})")
    ap.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS, metavar="N",
                    help=f"open connections served per replica; beyond them only the supervisor's admin reads "
                         f"(default {DEFAULT_MAX_CONNECTIONS})")
    ap.add_argument("--header-timeout", type=float, default=HEADER_TIMEOUT_S, metavar="SECONDS",
                    help=f"close a connection whose request head has not arrived in this long "
                         f"(default {HEADER_TIMEOUT_S:g})")
    ap.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS))
    ap.add_argument("--gpus", type=int, help=f"simulated GPU count, 1..{MAX_GPUS} (default: the preset's)")
    ap.add_argument("--load", default=load, help="the built-in load: idle | steady:c=N | ramp:from=A,to=B,period=S | "
                    f"bursts:low=A,high=B,period=S,duty=F (default: {load})")
    ap.add_argument("--steps", type=int, help="draft steps when speculation is on (default: the preset's)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a policy setting, e.g. off_at=48 or mode=off (repeatable)")
    ap.add_argument("--fail-gpu", type=int, action="append", default=[], metavar="INDEX",
                    help="report this GPU as failed (repeatable)")
    ap.add_argument("--seed", type=int, default=0, help="seed of sampled outputs and the load (greedy ignores it)")
    ap.add_argument("--startup-delay", type=float, default=0.0, metavar="SECONDS",
                    help="answer /health with 503 for this long")
    ap.add_argument("--slow-off", action="store_true",
                    help="act as a server without specctl's fast off: 'off' runs SGLang's own steps-0 state")
    ap.add_argument("--admin-key-file", type=Path, metavar="FILE",
                    help="require this key (Bearer) on /set_internal_state, /flush_cache, /abort_request and /sim/* "
                         f"(default: ${SIM_ADMIN_KEY_ENV}, if set; else they are open)")
    ap.add_argument("--eager-prefill", action="store_true",
                    help="report prefill CUDA graphs off, as a server launched with --disable-prefill-cuda-graph")
    ap.add_argument("--no-plugin", action="store_true",
                    help="act as SGLang without the specctl plugin: static EAGLE-3, no specctl keys or metrics")
    costs = ap.add_mutually_exclusive_group()
    costs.add_argument("--depth-costs", type=Path, metavar="FILE.json",
                       help="price draft depths with this step-time table, as a server given SPECCTL_DEPTH_COSTS "
                            "(default: the simulator's own model)")
    costs.add_argument("--no-depth-costs", action="store_true",
                       help="no step-time table, as a server launched without SPECCTL_DEPTH_COSTS: "
                            "auto stays on/off at the steps")
    ap.add_argument("--no-speculation", action="store_true",
                    help="act as SGLang launched without --speculative-algorithm (and so without the plugin): "
                         "plain decoding, no speculative fields, specctl's keys refused")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m specctl.runtime.sim",
                                 description="Simulated SGLang server with speculative decoding and specctl's policy.")
    add_arguments(ap, port=0, load="bursts")
    return ap


def config_from_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, SimConfig]:
    """Parse and validate the command line; usage errors exit with code 2 and say what is wrong."""
    ap = _parser()
    ns = ap.parse_args(argv)
    return ns, build_config(ns, ap.error)


def build_config(ns: argparse.Namespace, fail: Fail) -> SimConfig:
    """Validate parsed flags into the simulator's configuration; ``fail`` says what is wrong (exit 2)."""
    if not 0 <= ns.port <= 65_535:
        fail(f"--port must be between 0 and 65535, got {ns.port}")
    if not 1 <= ns.replicas <= MAX_REPLICAS:
        fail(f"--replicas must be between 1 and {MAX_REPLICAS}, got {ns.replicas}")
    if ns.port and ns.port + ns.replicas - 1 > 65_535:
        fail(f"--port {ns.port} with --replicas {ns.replicas} runs past port 65535")
    if ns.context_length is not None and not 2 <= ns.context_length <= 10_000_000:
        fail(f"--context-length must be between 2 and 10000000, got {ns.context_length}")
    if not 1 <= ns.max_queued_requests <= 10_000_000:
        fail(f"--max-queued-requests must be between 1 and 10000000, got {ns.max_queued_requests}")
    if not 0.1 <= ns.header_timeout <= 3600:
        fail(f"--header-timeout must be between 0.1 and 3600 seconds, got {ns.header_timeout:g}")
    if not 2 <= ns.max_connections <= 100_000:
        fail(f"--max-connections must be between 2 and 100000, got {ns.max_connections}")
    for flag, key in (("--api-key", ns.api_key), ("--admin-api-key", ns.admin_api_key)):
        if key is not None and (not key.strip() or any(c.isspace() for c in key)):
            fail(f"{flag} must be a non-empty key without spaces")
    for flag, name in (("--model-path", ns.model_path), ("--served-model-name", ns.served_model_name)):
        if name is not None and (not name.strip() or len(name) > 1024):
            fail(f"{flag} must be a non-empty name of at most 1024 characters")
    if ns.no_speculation and (why := usage_problem(steps=ns.steps, slow_off=ns.slow_off, settings=ns.set)):
        fail(why)
    preset = get_preset(ns.preset)
    # A tree preset (topk > 1) runs as SGLang without the plugin, as the real one must: the plugin stops a
    # tree server at start-up (SGLang's adaptive machinery refuses trees; docs/sglang-plugin.md), so a tree that
    # specctl steered here would promise its operator what no real server can do. With the plugin's opt-in
    # in the environment (SPECCTL_TREE_SWITCH=1, as specctl sglang-args --topk prints it) the real plugin
    # switches the tree between its launch depth and off, and so does this one.
    tree_switch = preset.topk > 1 and tree_switch_enabled(os.environ)
    ns.no_plugin = ns.no_plugin or (preset.topk > 1 and not tree_switch)
    changes: dict[str, object] = {}
    if ns.steps is not None:
        changes["steps"] = ns.steps
    for item in ns.set:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            fail(f"--set expects KEY=VALUE, got {item!r}")
        changes[key.strip()] = value.strip()
    try:
        preset.default_settings().with_changes(changes)
    except SettingsError as exc:
        if exc.field == "min_accept" and "min_accept" not in changes:  # the default floor, out of reach at 1 step
            steps = check_fields({"steps": changes.get("steps", preset.steps)})["steps"]  # it coerced, or it is named
            fail(unasked_floor(steps, preset.default_settings().min_accept, "the default", "--set "))
        fail(str(exc))
    try:
        load = parse_load(ns.load)
    except ValueError as exc:
        fail(str(exc))
    if tree_switch and not ns.no_plugin and (why := _tree_candidates_problem(preset, changes)):
        fail(why)
    gpus = ns.gpus if ns.gpus is not None else preset.tp_size
    if not 1 <= gpus <= MAX_GPUS:
        fail(f"--gpus must be between 1 and {MAX_GPUS}, got {gpus}")
    bad = [i for i in ns.fail_gpu if not 0 <= i < gpus]
    if bad:
        fail(f"--fail-gpu {bad[0]} is out of range for {gpus} GPU(s)")
    if not 0.0 <= ns.startup_delay < 86_400:
        fail("--startup-delay must be between 0 and 86400 seconds")
    return SimConfig(preset, gpus, load, changes, ns.seed, ns.startup_delay, frozenset(ns.fail_gpu), ns.slow_off,
                     ns.eager_prefill, plugin=not (ns.no_plugin or ns.no_speculation),
                     speculation=not ns.no_speculation, depth_costs=_depth_costs(fail, ns),
                     model_path=ns.model_path, served_model_name=ns.served_model_name,
                     context_length=ns.context_length or DEFAULT_CONTEXT_LENGTH,
                     max_queued_requests=ns.max_queued_requests)


def _tree_candidates_problem(preset: Preset, changes: dict[str, object]) -> str | None:
    """The plugin's start-up refusal of a tree with depths other than its launch's and off (tree_switch.py)."""
    checked = check_fields(changes)
    steps = checked.get("steps", preset.steps)
    if steps != preset.steps:
        return (f"a tree under specctl's switch drafts at its launch's --speculative-num-steps ({preset.steps}), "
                f"got steps {steps}")
    return tree_depths_problem(preset.topk, steps, checked.get("candidates") or [], "--set candidates")


def _depth_costs(fail: Fail, ns: argparse.Namespace) -> DepthCosts | None | Literal["model"]:
    """The table the policy prices depths with: a file's, none, or the simulator's own model."""
    if ns.no_depth_costs:
        return None
    if ns.depth_costs is None:
        return "model"
    try:
        return read_costs(ns.depth_costs)
    except DepthCostsError as exc:
        fail(f"--depth-costs {exc}")


def _write_ports(path: Path, ports: list[int]) -> None:
    """Temporary file then rename, so a reader never sees a half-written port."""
    write_atomic(path, "".join(f"{port}\n" for port in ports), mode=0o644)


def auth_guard(api_key: str | None, admin_key: str | None) -> Any:
    """An aiohttp middleware deciding as SGLang's ``decide_request_auth`` (utils/auth.py, 0.5.23).

    ``/health*``, ``/ready*`` and ``/metrics*`` are always open. The control endpoints (ADMIN_PATHS, SGLang's
    ADMIN_OPTIONAL ones) need the admin key when there is one, else the API key when there is one. Every other
    endpoint needs the API key when there is one. A missing or wrong key is 401 ``{"error": "Unauthorized"}``;
    keys are compared in constant time.
    """

    def bearer(request: web.Request, key: str) -> bool:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), key.encode())

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        path = request.path
        if request.method == "OPTIONS" or path.startswith(("/health", "/ready", "/metrics")):
            return await handler(request)
        key = (admin_key or api_key) if path.startswith(ADMIN_PATHS) else api_key
        if key is not None and not bearer(request, key):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return guard


def admin_guard(key: str) -> Any:
    """The guard of a server with only an admin key: the control endpoints need it, the rest stay open."""
    return auth_guard(None, key)


def _admin_key(ns: argparse.Namespace, prog: str) -> str | None:
    """The key from --admin-api-key, --admin-key-file, else from the environment the supervisor set; None: open."""
    if ns.admin_api_key is not None:
        return str(ns.admin_api_key)
    if ns.admin_key_file is not None:
        try:
            key = ns.admin_key_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read --admin-key-file: {exc}") from None
        if not key:
            raise UsageError("--admin-key-file is empty")
        return key
    return os.environ.get(SIM_ADMIN_KEY_ENV) or None


class UsageError(Exception):
    """A flag the process found wrong only when it used it (exit 2)."""


def run(ns: argparse.Namespace, cfg: SimConfig, prog: str) -> int:
    """Serve until SIGTERM or SIGINT (exit 0); a port in use is one line and exit 1 (the machine's state
    refuses well-formed flags), an unreadable key file one line and exit 2."""
    try:
        admin = _admin_key(ns, prog)
        asyncio.run(_serve(ns, cfg, admin))
    except (UsageError, BadAddress) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except PortInUse as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(ns: argparse.Namespace, cfg: SimConfig, admin_key: str | None) -> None:
    sweep_stale_dirs(ns.port_file)
    servers = [SimServer(replace(cfg, seed=cfg.seed + i)) for i in range(ns.replicas)]
    listeners: list[Listener] = []
    try:
        for i, server in enumerate(servers):
            app = build_app(server)
            if ns.api_key is not None or admin_key is not None:
                app.middlewares.insert(0, auth_guard(ns.api_key, admin_key))  # outermost: no handler runs first
            port = ns.port + i if ns.port else 0
            listeners.append(await Listener.start(app, ns.host, port, admin_key=admin_key,
                                                  max_connections=ns.max_connections,
                                                  header_timeout_s=ns.header_timeout))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        for server in servers:
            await server.start()
        ports = [listener.port for listener in listeners]
        if ns.port_file is not None:
            _write_ports(ns.port_file, ports)
        for port in ports:
            print(f"specctl-sim listening on http://{ns.host}:{port}", flush=True)
        await stop.wait()
    finally:
        for server in servers:
            await server.stop()
        for listener in listeners:
            await listener.close()
        remove_own_dir(ns.port_file)


def main(argv: list[str] | None = None) -> int:
    ns, cfg = config_from_args(argv)
    return run(ns, cfg, "python -m specctl.runtime.sim")
