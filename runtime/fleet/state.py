"""Each worker's state, read in parallel: its ``/server_info`` (specctl's policy state per DP rank) and
its ``/metrics`` (SGLang's series and the plugin's ``specctl:*`` gauges).

One aiohttp session for the whole pass, each request bounded by its own timeout, so the pass takes
about as long as the slowest answer and never more than one timeout. A worker that does not answer
is a row that says why (``unreachable``, ``timeout``, ``unauthorized``), never a missing row.
"""

from __future__ import annotations

import asyncio
import errno
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import aiohttp

from specctl.runtime.core.settings import PolicySettings, SettingsError
from specctl.runtime.core.view_only import NO_PLUGIN, NO_SPECULATION, headline
from specctl.runtime.fleet.inventory import Worker, normal_url
from specctl.runtime.probes.metrics import MetricsError, ServerMetrics, parse_metrics
from specctl.runtime.probes.server_info import spec_state, speculative

# What a worker's read (and a command's result) can be, in the words the CLI and the console print.
OK: Final = "ok"
REFUSED: Final = "refused"
VIEW_ONLY: Final = "view only"
UNAUTHORIZED: Final = "unauthorized"
UNREACHABLE: Final = "unreachable"
TIMEOUT: Final = "timeout"
MISSING: Final = "missing"
OUTCOMES: Final = (OK, REFUSED, VIEW_ONLY, UNAUTHORIZED, UNREACHABLE, TIMEOUT, MISSING)
DEFAULT_TIMEOUT: Final = 2.0


class Unanswered(Exception):
    """A request that got no usable answer; ``outcome`` is one of OUTCOMES, ``detail`` one short line."""

    def __init__(self, outcome: str, detail: str) -> None:
        super().__init__(detail)
        self.outcome = outcome
        self.detail = detail


@dataclass(frozen=True)
class WorkerState:
    """One worker's row: ``outcome`` ok (steerable), view only (no plugin), or why it could not be read."""

    worker: Worker
    outcome: str
    detail: str | None = None
    spec: dict[str, Any] | None = None  # the plugin's block of DP rank 0
    ranks: int = 0  # DP ranks that reported a state
    metrics: ServerMetrics | None = None
    version: str | None = None

    @property
    def url(self) -> str:
        return self.worker.url

    @property
    def settings(self) -> PolicySettings | None:
        """The worker's current policy settings, None where it reports none (or ones this specctl refuses)."""
        raw = (self.spec or {}).get("settings")
        if not isinstance(raw, dict):
            return None
        try:
            return PolicySettings().with_changes({k: v for k, v in raw.items() if k in _FIELDS})
        except SettingsError:
            return None

    def row(self) -> dict[str, Any]:
        """The plain numbers a table shows (None where unknown); what ``--json`` prints per worker."""
        spec, m = self.spec or {}, self.metrics
        last = (spec.get("recent_switches") or [None])[-1]
        return {
            "url": self.url, "labels": dict(self.worker.labels), "router_healthy": self.worker.healthy,
            "state": self.outcome, "detail": self.detail,
            "mode": spec.get("mode"), "on": spec.get("on"), "depth": spec.get("depth", spec.get("steps")),
            "batch": spec.get("batch_size", _num(m, "running")),
            "accept_len": _num(m, "accept_len"), "gen_tps": _num(m, "gen_tps"),
            "running": _num(m, "running"), "queued": _num(m, "queued"),
            "switches": spec.get("switches", _num(m, "spec_switches")),
            "last_switch": last.get("reason") if isinstance(last, dict) else None,
            "settings": spec.get("settings"), "ranks": self.ranks, "version": self.version,
        }


_FIELDS = frozenset(PolicySettings().as_dict())


def _num(m: ServerMetrics | None, name: str) -> float | None:
    return None if m is None else getattr(m, name)


def connector(workers: int) -> aiohttp.TCPConnector:
    """One connection per request in flight: a pass opens two per worker, a command one."""
    return aiohttp.TCPConnector(limit=max(16, 2 * workers), force_close=False)


async def request(session: aiohttp.ClientSession, method: str, url: str, timeout: float,
                  **kwargs: Any) -> tuple[int, bytes]:
    """One request read whole within ``timeout``; Unanswered for no answer, 401/403 and 5xx."""
    try:
        async with session.request(method, url, timeout=aiohttp.ClientTimeout(total=timeout), **kwargs) as resp:
            status, body = resp.status, await resp.read()
    except TimeoutError:
        raise Unanswered(TIMEOUT, f"no answer within {timeout:g} s") from None
    except aiohttp.ClientConnectorError as exc:
        refused = exc.os_error.errno == errno.ECONNREFUSED
        raise Unanswered(UNREACHABLE, "connection refused" if refused else
                         f"cannot connect ({exc.os_error.strerror or exc})") from None
    except aiohttp.ClientError as exc:
        raise Unanswered(UNREACHABLE, f"no answer ({type(exc).__name__})") from None
    if status in (401, 403):
        raise Unanswered(UNAUTHORIZED, f"HTTP {status}: the worker wants its admin key (--admin-key-file)")
    if status >= 500:
        raise Unanswered(UNREACHABLE, f"HTTP {status}")
    return status, body


def _loads(body: bytes) -> Any:
    return json.loads(body, parse_constant=lambda _: None,
                      parse_float=lambda t: v if math.isfinite(v := float(t)) else None)


async def read_worker(session: aiohttp.ClientSession, worker: Worker, timeout: float,
                      headers: dict[str, str] | None = None,
                      known: dict[str, ServerMetrics] | None = None) -> WorkerState:
    """One worker's row: /server_info and /metrics at once, one timeout for both; with ``known`` (the
    router's /engine_metrics split by worker), its numbers from there and only /server_info asked."""
    if not worker.listed:
        return WorkerState(worker, MISSING, "expected, but the router does not list it")
    info_call = request(session, "GET", f"{worker.url}/server_info", timeout, headers=headers or {})
    if known is not None:
        info_got, metrics_got = (await asyncio.gather(info_call, return_exceptions=True))[0], None
    else:
        metrics_call = request(session, "GET", f"{worker.url}/metrics", timeout, headers=headers or {})
        info_got, metrics_got = await asyncio.gather(info_call, metrics_call, return_exceptions=True)
    if isinstance(info_got, Unanswered):
        return WorkerState(worker, info_got.outcome, info_got.detail)
    if isinstance(info_got, BaseException):
        raise info_got
    status, body = info_got
    try:
        info = _loads(body) if status < 400 else None
    except ValueError:
        info = None
    if not isinstance(info, dict):
        return WorkerState(worker, UNREACHABLE, f"/server_info: HTTP {status}, not an SGLang server's answer")
    metrics = None if known is None else known.get(worker.url)
    if isinstance(metrics_got, tuple) and metrics_got[0] < 400:
        try:
            metrics = parse_metrics(metrics_got[1].decode("utf-8", errors="replace"))
        except MetricsError:
            metrics = None
    states = info.get("internal_states")
    ranks = sum(1 for s in states if isinstance(s, dict) and isinstance(s.get("specctl"), dict)) \
        if isinstance(states, list) else 0
    spec = spec_state(info)
    version = info.get("version") if isinstance(info.get("version"), str) else None
    if spec is None:
        why = NO_SPECULATION if speculative(info) is False else NO_PLUGIN
        return WorkerState(worker, VIEW_ONLY, headline(why).removeprefix("view only: "), None, 0, metrics, version)
    return WorkerState(worker, OK, None, spec, ranks, metrics, version)


async def read_all(session: aiohttp.ClientSession, workers: Sequence[Worker], timeout: float = DEFAULT_TIMEOUT,
                   headers: dict[str, str] | None = None,
                   known: dict[str, ServerMetrics] | None = None) -> list[WorkerState]:
    """Every worker's row, in the inventory's order, read at once."""
    return list(await asyncio.gather(*(read_worker(session, w, timeout, headers, known) for w in workers)))


async def router_metrics(session: aiohttp.ClientSession, router: str, key: str | None,
                         timeout: float) -> dict[str, ServerMetrics]:
    """Every worker's numbers from one ``GET /engine_metrics`` of the router; Unanswered where it fails."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    status, body = await request(session, "GET", f"{normal_url(router)}/engine_metrics", timeout, headers=headers)
    if status >= 400:
        raise Unanswered(UNREACHABLE, f"the router's /engine_metrics answered HTTP {status}")
    try:
        return split_engine_metrics(body.decode("utf-8", errors="replace"))
    except MetricsError as exc:
        raise Unanswered(UNREACHABLE, str(exc)) from None


def differing(states: Sequence[WorkerState]) -> set[str]:
    """The URLs whose settings differ from the fleet's most common settings (the console's mark)."""
    counts: dict[str, int] = {}
    keyed: dict[str, str] = {}
    for s in states:
        if s.spec and isinstance(s.spec.get("settings"), dict):
            key = json.dumps(s.spec["settings"], sort_keys=True)
            keyed[s.url] = key
            counts[key] = counts.get(key, 0) + 1
    if len(counts) < 2:
        return set()
    usual = max(counts, key=lambda k: counts[k])
    return {url for url, key in keyed.items() if key != usual}


def totals(states: Sequence[WorkerState]) -> dict[str, Any]:
    """The banner's fleet totals: workers by outcome, speculation on/off, summed tok/s and requests."""
    by: dict[str, int] = {}
    for s in states:
        by[s.outcome] = by.get(s.outcome, 0) + 1
    rows = [s.row() for s in states]
    return {
        "workers": len(states), "by_outcome": by,
        "spec_on": sum(1 for r in rows if r["on"] is True), "spec_off": sum(1 for r in rows if r["on"] is False),
        "gen_tps": sum(r["gen_tps"] or 0.0 for r in rows),
        "running": sum(r["running"] or 0.0 for r in rows),
    }


def split_engine_metrics(text: str) -> dict[str, ServerMetrics]:
    """The router's ``GET /engine_metrics`` (every worker's /metrics in one text, each series labelled
    ``worker_addr`` and renamed ``sglang:x`` -> ``sglang_x``, ``specctl:x`` -> ``specctl_x``), split back
    into each worker's numbers: one request to the router instead of one per worker. MetricsError for
    text that is not Prometheus exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    per: dict[str, list[str]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = dict(sample.labels)
                addr = labels.pop("worker_addr", None)
                if addr is None:
                    continue
                name = sample.name
                for prefix in ("sglang", "specctl"):
                    if name.startswith(prefix + "_"):
                        name = f"{prefix}:{name[len(prefix) + 1:]}"
                said = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
                per.setdefault(normal_url(addr), []).append(f"{name}{{{said}}} {sample.value!r}")
    except Exception as exc:  # untrusted input: any parser failure means "malformed"
        raise MetricsError(f"malformed /engine_metrics text: {exc}") from exc
    return {url: parse_metrics("\n".join(lines) + "\n") for url, lines in per.items()}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
