"""SupervisorConfig: everything a supervisor needs, validated before anything starts."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from specctl.runtime.core.settings import PolicySettings, SettingsError, check_fields, floor_for_steps, unasked_floor
from specctl.runtime.core.tree_drafts import TOKENS_FLAG, TOPK_FLAG, tree_args_problem, tree_problem
from specctl.runtime.supervisor import config_file, paths
from specctl.runtime.supervisor.desired import file_for as desired_file
from specctl.runtime.supervisor.launcher import owned_arg, reserved_arg
from specctl.runtime.supervisor.server_key import KEY_ENV, KeyFileError, read_key_file

BackendKind = Literal["sim", "sglang", "attach"]


class ConfigError(ValueError):
    """A configuration mistake, worded for the operator who made it."""


@dataclass
class SupervisorConfig:
    backend: BackendKind = "sim"
    url: str | None = None  # for attach
    model: str | None = None
    draft: str | None = None
    tp: int = 1
    spec_steps: int = 3
    topk: int = 1  # above 1: a tree draft, launched under the plugin's tree switch (docs/sglang-plugin.md)
    draft_tokens: int | None = None  # the tree's --speculative-num-draft-tokens
    port: int = 0
    sglang_args: list[str] = field(default_factory=list)
    sim_preset: str = "h200-llama8b"
    sim_gpus: int | None = None
    sim_load: str = "bursts"
    sim_args: list[str] = field(default_factory=list)
    interval: float = 0.5
    socket_path: Path | None = None  # None: no control socket
    journal_path: Path | None = None
    journal_max_mb: float = 64.0  # rotation size; three older files are kept
    settings: dict[str, Any] = field(default_factory=dict)  # initial policy settings
    gpu_source: Literal["auto", "nvml", "sim", "none"] = "auto"
    http_timeout: float = 2.0
    restart_backoff: tuple[float, float] = (1.0, 30.0)  # first delay, cap
    stop_grace_s: float = 30.0  # SIGTERM to SIGKILL, for a real server's ranks to free the GPU
    admin_key: str | None = field(default=None, repr=False)  # an attached server's; specctl makes its own
    depth_costs: Path | None = None  # step-time table per (batch, depth) for the policy's depth choice
    # the flag an operator typed for a setting, so a refusal names it: {"candidates": "--speculative-candidate-steps"}
    flags: dict[str, str] = field(default_factory=dict)
    # the settings whose value came from the config file's [policy] (not overridden on the command line),
    # so a refusal names the file and the fix in its words, not a --set nobody typed
    from_file: frozenset[str] = frozenset()
    # where the desired state is kept (desired.py); None: in memory only, lost with the supervisor
    desired_path: Path | None = None
    # the calibration loop (docs/calibration.md; --set calibrate=on|off): None runs it for an SGLang server
    # specctl launches, and not for the simulator or an attached server until `specctl set calibrate=on`
    calibrate: bool | None = None

    def __post_init__(self) -> None:
        if not 0.05 <= self.interval <= 60:
            raise ConfigError(f"--interval must be between 0.05 and 60 seconds, got {self.interval}")
        if self.backend == "attach" and not self.url:
            raise ConfigError("--attach needs a URL, e.g. --attach http://127.0.0.1:30000")
        if self.backend == "sglang" and not (self.model and self.draft):
            raise ConfigError("--model needs --draft (the EAGLE-3 draft model path)")
        if not 0.01 <= self.journal_max_mb <= 1_000_000:
            raise ConfigError(f"--log-max-mb must be between 0.01 and 1000000, got {self.journal_max_mb}")
        if not 1 <= self.tp <= 64:
            raise ConfigError(f"--tp must be between 1 and 64, got {self.tp}")
        if self.sim_gpus is not None and not 1 <= self.sim_gpus <= 16:
            raise ConfigError(f"--sim-gpus must be between 1 and 16, got {self.sim_gpus}")
        if self.backend != "sglang" and self.sglang_args:
            where = "the simulator" if self.backend == "sim" else "a server started elsewhere (--attach)"
            raise ConfigError(f"arguments after -- go to SGLang's launcher, and {where} has none: "
                              f"{' '.join(self.sglang_args)}")
        if self.backend == "sglang" and (reserved := reserved_arg(self.sglang_args)):
            raise ConfigError(f"{reserved} after --: specctl gives SGLang its own --config, which carries the "
                              "admin key that closes /set_internal_state to others (docs/sglang-plugin.md)")
        if self.admin_key is not None and self.backend != "attach":
            raise ConfigError("an admin key is for --attach: a server specctl launches gets a fresh key of its own")
        if self.depth_costs is not None and self.backend == "attach":
            raise ConfigError("--depth-costs is for a server specctl starts: a server started elsewhere reads its "
                              "table from SPECCTL_DEPTH_COSTS in its own environment (specctl sglang-args "
                              "--depth-costs FILE prints it)")
        if self.backend == "sim":
            self._check_sim()
        self._check_tree_launch()
        if self.backend == "sglang" and (tree := tree_args_problem(self.sglang_args)):
            raise ConfigError(tree)  # SGLang would load the model for minutes, then the plugin refuse it
        if self.backend == "sglang" and (owned := owned_arg(self.sglang_args)):
            raise ConfigError(owned_problem(*owned))
        if not 1 <= self.spec_steps <= 16:
            raise ConfigError(f"--speculative-num-steps must be between 1 and 16, got {self.spec_steps}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be between 0 (any free port) and 65535, got {self.port}")
        if self.backend == "sglang":
            self._check_launch_depth()
        checked = self.start_settings()
        # the checked values travel on, not the text: the server parses them again ("40.0" is no integer)
        self.settings = {key: getattr(checked, key) for key in self.settings}
        if self.backend == "sglang" and (problem := tree_problem(
                self.spec_steps, self.topk, self.draft_tokens, checked.candidates, self.depth_costs is not None,
                (TOPK_FLAG, TOKENS_FLAG, self._flag("candidates", self.spec_steps)))):
            raise ConfigError(problem)
        if self.depth_costs is not None:
            check_depth_costs(self.depth_costs, checked)

    def _check_tree_launch(self) -> None:
        """A tree's flags shape a server specctl launches; the simulator's preset and an attached server have theirs."""
        if self.topk == 1 and self.draft_tokens is None:
            return
        if self.backend != "sglang":
            whose = "the simulator's preset" if self.backend == "sim" else "an attached server's launch line"
            raise ConfigError("--speculative-eagle-topk and --speculative-num-draft-tokens shape a server specctl "
                              f"launches (--model); {whose} has its own")

    def start_settings(self) -> PolicySettings:
        """The policy settings the server starts with, checked whole; raises ConfigError worded for the operator."""
        base, changes = self._base_settings()
        try:
            return base.with_changes(changes)
        except SettingsError as exc:
            raise ConfigError(self._refusal(exc, base, changes)) from None

    def _base_settings(self) -> tuple[PolicySettings, dict[str, Any]]:
        """What the server starts from, and the changes on it: the simulator's preset has its own steps.

        A launch's steps travel with the settings, not in the base: ``PolicySettings(steps=1)``
        alone is refused (the default floor, 1.3, is more than one draft step can accept) before
        the operator's ``--set min_accept=0.4`` could make it whole.
        """
        if self.backend == "sim":
            from specctl.runtime.sim.presets import PRESETS
            return PRESETS[self.sim_preset].default_settings(), dict(self.settings)
        return PolicySettings(), {"steps": self.spec_steps, **self.settings}

    def _refusal(self, exc: SettingsError, base: PolicySettings, changes: dict[str, Any]) -> str:
        """The one line for refused start settings; a floor the operator never gave says so and what to give."""
        if exc.field == "min_accept":
            # refused in validation, so every value coerced: the steps are a number here
            steps = check_fields({"steps": changes.get("steps", base.steps)})["steps"]
            if "min_accept" not in self.settings:
                return unasked_floor(steps, base.min_accept, "the default", "--set ")
            if "min_accept" in self.from_file:  # the fix in the file's words, or this run's own
                return (f"{self._flag(exc.field, base.steps)}: {exc.message}; at {steps} draft step"
                        f"{'s' if steps != 1 else ''} write {config_file.floor_fix(steps)}, or give "
                        f"--set min_accept={floor_for_steps(steps):g} for this run")
        return f"{self._flag(exc.field, base.steps)}: {exc.message}"

    def _flag(self, key: str | None, default_steps: int) -> str:
        """How the operator gave a setting: its own flag, the config file's [policy] key, else ``--set KEY``."""
        if key == "steps" and "steps" not in self.settings and "steps" not in self.flags:
            return f"--speculative-num-steps (default {default_steps})"  # not given: the launch's, the preset's
        if key in self.from_file and key not in self.flags:
            return f"{paths.config_file()}: [policy] {key}"
        return self.flags.get(key or "", f"--set {key}")

    def _check_launch_depth(self) -> None:
        """A ``steps`` setting the launch does not build is refused: SGLang would run another depth than the policy's.

        Checked before the whole set, so ``--set steps=1`` is told about the launch's depth
        first, not about a floor it would then meet again at the depth it cannot have.
        """
        base, changes = self._base_settings()
        try:
            given = check_fields(changes)
        except SettingsError:
            return  # start_settings refuses it in its own words
        steps = given["steps"]
        told = (f"{paths.config_file()}: [policy] steps = {steps}" if "steps" in self.from_file
                else f"--set steps={steps}")
        problem = launch_depth_problem(self.spec_steps, given.get("candidates", base.candidates), steps,
                                       "--speculative-num-steps", told)
        if problem and "steps" in self.from_file:
            problem += f", or take steps = {steps} out of [policy]"
        if problem:
            raise ConfigError(problem)

    def _check_sim(self) -> None:
        """Refuse a bad preset or load here: the simulator would only exit, and be restarted, forever."""
        from specctl.runtime.sim.load import parse_load
        from specctl.runtime.sim.presets import PRESETS

        if self.sim_preset not in PRESETS:
            raise ConfigError(f"--sim-preset must be one of {', '.join(sorted(PRESETS))}, got {self.sim_preset!r}")
        try:
            parse_load(self.sim_load)
        except ValueError as exc:
            raise ConfigError(f"--sim-load: {exc}") from None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SupervisorConfig:
        """Build from the `specctl run`/`specctl tui` arguments over the config file's defaults."""
        attach = args.attach is not None  # `--attach ""` is a mistake, not a request for the simulator
        backend: BackendKind = "attach" if attach else "sglang" if args.model else "sim"
        if attach and args.model:
            raise ConfigError("choose one of --attach URL and --model")
        if args.draft and not args.model:
            raise ConfigError("--draft needs --model")
        for flag, value in (("--model", args.model), ("--draft", args.draft)):
            _check_local_model(flag, value)
        try:
            site = config_file.load()
        except config_file.ConfigFileError as exc:
            raise ConfigError(str(exc)) from None
        sup = site.supervisor
        log = args.log or sup.get("log")
        from_file = {key for key in sup if getattr(args, key, None) is None}
        pairs, calibrate = calibrate_pair(args.settings)
        try:
            return cls(
                backend=backend, url=attach_url(args.attach) if attach else None,
                model=args.model, draft=args.draft, tp=args.tp,
                spec_steps=3 if args.spec_steps is None else args.spec_steps, port=args.port,
                topk=1 if getattr(args, "topk", None) is None else args.topk,
                draft_tokens=getattr(args, "draft_tokens", None),
                sglang_args=list(args.sglang_args or []),
                sim_preset=args.sim_preset or sup.get("sim_preset", "h200-llama8b"),
                sim_gpus=args.sim_gpus, sim_load=args.sim_load or sup.get("sim_load", "bursts"),
                interval=args.interval if args.interval is not None else float(sup.get("interval", 0.5)),
                socket_path=(sock := Path(args.socket) if args.socket else config_file.socket_path()),
                desired_path=desired_file(paths.state_dir(), str(sock.absolute())),
                journal_path=Path(log) if log else None,
                journal_max_mb=float(args.log_max_mb if args.log_max_mb is not None else sup.get("log_max_mb", 64.0)),
                settings={**site.policy, **parse_pairs(pairs), **_candidates_arg(args),
                          **_sim_steps_arg(args, backend)},
                admin_key=_admin_key(args, sup) if attach else _no_key_for_launch(args),
                depth_costs=Path(args.depth_costs) if getattr(args, "depth_costs", None) else None,
                flags=_setting_flags(args, backend),
                from_file=frozenset(site.policy) - set(parse_pairs(pairs)) - set(_candidates_arg(args))
                - set(_sim_steps_arg(args, backend)),
                calibrate=calibrate,
            )
        except ConfigError as exc:
            raise _blame_the_file(exc, from_file) from None


def _admin_key(args: argparse.Namespace, sup: dict[str, Any]) -> str | None:
    """An attached server's admin key: --admin-key-file, else $SPECCTL_ADMIN_KEY, else the config's file."""
    path = getattr(args, "admin_key_file", None) or sup.get("admin_key_file")
    if getattr(args, "admin_key_file", None) is None and os.environ.get(KEY_ENV):
        return os.environ[KEY_ENV].strip()
    if not path:
        return None
    try:
        return read_key_file(Path(path).expanduser())
    except KeyFileError as exc:
        raise ConfigError(str(exc)) from None


def _no_key_for_launch(args: argparse.Namespace) -> None:
    if getattr(args, "admin_key_file", None) is not None:
        raise ConfigError("--admin-key-file is for --attach: a server specctl launches gets a fresh key of its own")
    return None


def check_depth_costs(path: Path, settings: PolicySettings) -> None:
    """A table the server cannot read, or one without a column for a built depth, is refused here.

    Why: the server (every rank) would refuse the file only after loading its model, and a depth
    the table does not price is one auto never chooses, which nobody would notice.
    """
    from specctl.runtime.core.depth_model import DepthCostsError, read_costs
    try:
        table = read_costs(path)
    except DepthCostsError as exc:
        raise ConfigError(f"--depth-costs {exc}") from None
    missing = [d for d in settings.candidates if d not in table.depths]
    if missing:
        wanted = ",".join(map(str, settings.candidates))
        raise ConfigError(f"--depth-costs {path}: no column for depth {', '.join(map(str, missing))} "
                          f"(it prices {', '.join(map(str, table.depths))}; the candidates are {wanted}); "
                          f"write one with `python -m specctl.runtime.sim.depth --preset NAME --depths {wanted} "
                          f"--out FILE`, `specctl depth-costs JOURNAL --out FILE` (measured on your server) "
                          f"or bench/gpu/depth_table.py")


def launch_depth_problem(launch: int, candidates: tuple[int, ...], steps: int, flag: str, told: str) -> str | None:
    """Why a launch at ``launch`` draft steps cannot run the ``steps`` setting; None where it can.

    SGLang builds the depths the adaptive config lists (0 and ``launch`` without ``candidates``)
    and refuses a launch depth outside them; a ``steps`` outside them is a policy told a depth
    the server never built. ``flag`` is how the command names the launch's depth (``--steps``
    for sglang-args, ``--speculative-num-steps`` for run), ``told`` where ``steps`` came from.
    """
    if steps == launch or not 1 <= steps <= 16:
        return None  # the whole set's check says the rest (a launch depth outside the candidates, too)
    if candidates and launch not in candidates:
        return (f"{flag} {launch} is not one of the candidate depths {','.join(map(str, candidates))}, and "
                f"SGLang starts only at a depth it built: give {flag} {max(candidates)} (docs/policy.md)")
    if not candidates:
        step_s = f"{steps} draft step{'s' if steps != 1 else ''}"
        return (f"{told}: the launch builds depths 0 and {launch} only ({flag} {launch}), so the policy would be "
                f"told a depth the server does not have; give {flag} {steps} to launch at {step_s} "
                f"(docs/policy.md)")
    return None


def owned_problem(flag: str, option: str) -> str:
    """The refusal of an SGLang flag after -- that specctl gives SGLang itself."""
    where = f"set it with specctl's own {option}, before --" if option else "specctl sets it for the plugin"
    return (f"{flag} after --: specctl gives SGLang this flag itself, and one after -- would override it "
            f"({where}; docs/deployment.md)")


def _candidates_arg(args: argparse.Namespace) -> dict[str, Any]:
    """``--speculative-candidate-steps 0,1,2,3``: the ``candidates`` setting, under SGLang's flag name."""
    text = getattr(args, "candidate_steps", None)
    return {} if text is None else {"candidates": text}


def _sim_steps_arg(args: argparse.Namespace, backend: BackendKind) -> dict[str, Any]:
    """``--speculative-num-steps N`` for the simulator: its ``steps`` setting (a launch gets the flag itself).

    Why: the simulator used to run its preset's steps whatever the flag said. A ``--set steps``
    beside it naming another depth is refused: two command-line sources disagreeing is a mistake
    to say, not one to settle silently (the config file's ``[policy] steps`` is overridden by
    either, as the command line overrides the file everywhere).
    """
    steps = getattr(args, "spec_steps", None)
    if backend != "sim" or steps is None:
        return {}
    given = parse_pairs(getattr(args, "settings", None) or []).get("steps")
    if given is not None:
        try:
            agrees = check_fields({"steps": given})["steps"] == steps
        except SettingsError as exc:
            raise ConfigError(f"--set steps: {exc.message}") from None
        if not agrees:
            raise ConfigError(f"--speculative-num-steps {steps} and --set steps={given} name two depths for "
                              "the simulator: give one")
    return {"steps": steps}


def _setting_flags(args: argparse.Namespace, backend: BackendKind) -> dict[str, str]:
    flags = {}
    if getattr(args, "candidate_steps", None) is not None:
        flags["candidates"] = "--speculative-candidate-steps"
    if getattr(args, "spec_steps", None) is not None:  # the simulator's steps setting, or the launch's flag
        flags["steps"] = "--speculative-num-steps"
    return flags


def attach_url(text: str) -> str:
    """The --attach URL made whole: ``host:port`` gains ``http://``, as SGLang prints its address without one.

    Checked here so that a typo is one line at start-up, not a supervisor
    retrying a URL that can never answer.
    """
    raw = text.strip()
    example = "e.g. --attach http://127.0.0.1:30000"
    if not raw or any(c.isspace() for c in raw):
        raise ConfigError(f"--attach needs a URL, got {text!r}; {example}")
    url = raw if "://" in raw else f"http://{raw}"
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as exc:  # a bracketed host that is no IPv6 address
        raise ConfigError(f"--attach {text!r} is not a URL ({exc}); an IPv6 host goes in brackets, "
                          "e.g. --attach [::1]:30000") from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"--attach needs an http:// or https:// URL, got {text!r}; {example}")
    if not host:
        raise ConfigError(f"--attach {text!r} names no host; {example}")
    try:
        port = parts.port
    except ValueError:  # not a number, or past 65535
        raise ConfigError(f"--attach {text!r}: the port must be a number between 1 and 65535") from None
    if port == 0:
        raise ConfigError(f"--attach {text!r}: the port must be a number between 1 and 65535")
    return url.rstrip("/")


def calibrate_pair(pairs: list[str]) -> tuple[list[str], bool | None]:
    """``--set calibrate=on|off`` is the supervisor's switch, not a policy setting: taken out of the pairs."""
    rest, value = [], None
    for pair in pairs:
        key, _, text = pair.partition("=")
        if key.strip() != "calibrate":
            rest.append(pair)
        elif text.strip().lower() in ("on", "true", "1", "off", "false", "0"):
            value = text.strip().lower() in ("on", "true", "1")
        else:
            raise ConfigError(f"calibrate: must be on or off, got {text.strip()!r}")
    return rest, value


def parse_pairs(pairs: list[str]) -> dict[str, str]:
    """``["off_at=48", "on_at=16"]`` -> dict; values stay text, PolicySettings coerces them."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value or any(c.isspace() for c in key):
            raise ConfigError(f"expected KEY=VALUE, got {pair!r}")
        if key in out:
            raise ConfigError(f"{key} is given twice")
        out[key] = value
    return out


def _check_local_model(flag: str, value: str | None) -> None:
    """A model written as a local path must exist; a hub id (org/name) is SGLang's to fetch.

    Why here: SGLang would only fail minutes later, after loading the other model.
    """
    if not value or not value.startswith(("/", "./", "../", "~")):
        return
    if not Path(value).expanduser().exists():
        raise ConfigError(f"{flag} {value}: no such file or directory (a hub id is written org/name)")


def _blame_the_file(exc: ConfigError, from_file: set[str]) -> ConfigError:
    """A bad value that came from the config file is named as the file's, not as a flag nobody typed."""
    flag, _, rest = str(exc).partition(" ")
    key = flag.removeprefix("--").rstrip(":").replace("-", "_")
    if flag.startswith("--") and key in from_file:
        return ConfigError(f"{paths.config_file()}: [supervisor] {key}{':' if flag.endswith(':') else ''} {rest}")
    return exc
