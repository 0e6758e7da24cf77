"""Which workers make the fleet: the SGLang router's ``GET /workers``, or a plain list.

The router (``sglang-router``, the Rust model gateway) answers ``GET /workers`` with
``{"workers": [{"url", "is_healthy", "metadata": {...labels}, ...}], "total": N}``; the labels
given at ``POST /workers`` (and Kubernetes pod labels under service discovery) land in
``metadata``, beside the model facts the router read from the worker. With
``--control-plane-api-keys`` the router wants a Bearer key of role ``admin`` on it: 401 without
one, 403 for a ``user`` key. A worker that was down when the router started is not listed at all,
so an expected list is what makes such a worker a ``missing`` row rather than a shorter table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

ROUTER_KEY_ENV = "SPECCTL_ROUTER_KEY"  # the router's control-plane key (role admin), where no file names it


class InventoryError(Exception):
    """No inventory to work on: the router did not answer, refused, or the list was empty. One line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Worker:
    """One server of the fleet as the inventory names it.

    ``healthy``: the router's health check (None without a router); ``listed``: False for a worker of
    the expected list that the inventory does not hold (a ``missing`` row).
    """

    url: str
    labels: Mapping[str, str] = field(default_factory=dict)
    healthy: bool | None = None
    listed: bool = True


def normal_url(url: str) -> str:
    """``127.0.0.1:30000`` and ``http://127.0.0.1:30000/`` are one worker: scheme added, trailing slash gone."""
    url = url.strip().rstrip("/")
    return url if "://" in url else f"http://{url}"


def parse_urls(text: str | Iterable[str]) -> list[str]:
    """``URL,URL`` (or a list of such) -> distinct normalised URLs in their given order."""
    items = text.split(",") if isinstance(text, str) else [p for t in text for p in t.split(",")]
    seen: dict[str, None] = {}
    for item in items:
        if item.strip():
            seen.setdefault(normal_url(item), None)
    return list(seen)


def plain(urls: Sequence[str]) -> list[Worker]:
    """A fleet without the router: the operator's list, health unknown until each worker is read."""
    return [Worker(url) for url in parse_urls(urls)]


def from_router_json(body: object) -> list[Worker]:
    """The workers of a ``GET /workers`` answer; InventoryError where it is not that shape."""
    rows = body.get("workers") if isinstance(body, dict) else None
    if not isinstance(rows, list):
        raise InventoryError("the router's /workers answer has no \"workers\" list (is this an SGLang router?)")
    workers: list[Worker] = []
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("url"), str):
            continue
        meta = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
        labels = {str(k): str(v) for k, v in meta.items()}
        if isinstance(row.get("labels"), dict):  # newer gateways keep labels apart from the model facts
            labels.update({str(k): str(v) for k, v in row["labels"].items()})
        healthy = row.get("is_healthy")
        workers.append(Worker(normal_url(row["url"]), labels, healthy if isinstance(healthy, bool) else None))
    return sorted(workers, key=lambda w: w.url)


async def router_workers(session: aiohttp.ClientSession, router: str, key: str | None,
                         timeout: float) -> list[Worker]:
    """The router's inventory; InventoryError (with what to do) where it cannot be had."""
    url = f"{normal_url(router)}/workers"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            status, body = resp.status, await resp.read()
    except TimeoutError:
        raise InventoryError(
            f"the router at {normal_url(router)} did not answer /workers within {timeout:g} s") from None
    except aiohttp.ClientError as exc:
        raise InventoryError(f"cannot reach the router at {normal_url(router)} ({type(exc).__name__})") from None
    if status == 401:
        raise InventoryError(
            f"the router at {normal_url(router)} wants a control-plane key for /workers (it runs with "
            "--control-plane-api-keys): give a key of role admin by --router-key-file or "
            f"${ROUTER_KEY_ENV}")
    if status == 403:
        raise InventoryError(
            f"the router at {normal_url(router)} refused the key for /workers: GET /workers needs role admin "
            "in --control-plane-api-keys ('id:name:admin:KEY'); a user key is not enough")
    if status == 404:
        raise InventoryError(f"{normal_url(router)} has no /workers: not an SGLang router (give --workers for "
                             "a plain list)")
    if status >= 400:
        raise InventoryError(f"the router at {normal_url(router)} answered /workers with HTTP {status}")
    try:
        return from_router_json(json.loads(body))
    except ValueError:
        raise InventoryError(f"the router at {normal_url(router)} sent /workers that is not JSON") from None


def with_expected(workers: Sequence[Worker], expected: Sequence[str]) -> list[Worker]:
    """The inventory plus a ``listed=False`` row for each expected worker it lacks."""
    have = {w.url for w in workers}
    missing = [Worker(url, listed=False) for url in parse_urls(expected) if url not in have]
    return [*workers, *missing]


def parse_labels(pairs: Iterable[str]) -> dict[str, str]:
    """``k=v`` items -> a dict; ValueError names a malformed one."""
    labels: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--label expects KEY=VALUE, got {pair!r}")
        labels[key.strip()] = value.strip()
    return labels


def select(workers: Sequence[Worker], only: Sequence[str] = (),
           labels: Mapping[str, str] | None = None) -> list[Worker]:
    """The workers named by ``only`` (URLs) and carrying every label of ``labels``; all when neither is given."""
    chosen = list(workers)
    if only:
        wanted = set(parse_urls(only))
        chosen = [w for w in chosen if w.url in wanted]
        have = {w.url for w in chosen}
        chosen += [Worker(url, listed=False) for url in parse_urls(only) if url not in have]
    if labels:
        chosen = [w for w in chosen if all(w.labels.get(k) == v for k, v in labels.items())]
    return chosen



async def load(session: aiohttp.ClientSession, *, router: str | None, router_key: str | None,
               workers: Sequence[str], expected: Sequence[str], timeout: float) -> list[Worker]:
    """The fleet: the router's workers (or the plain list), plus a ``missing`` row per expected absentee.

    InventoryError where there is none: no router and no list, or a router that cannot be read.
    """
    if router:
        found = await router_workers(session, router, router_key, timeout)
    elif workers:
        found = plain(workers)
    else:
        raise InventoryError("no fleet to work on: give --router URL or --workers URL,... "
                             "(or router / workers under [fleet] in the config file)")
    found = with_expected(found, expected)
    if not found:
        raise InventoryError(f"the router at {normal_url(router or '')} lists no workers")
    return found



async def probe_router(url: str, timeout: float) -> list[Worker] | None | bool:
    """What stands at ``url`` where a server was expected: its workers where it is an SGLang router (no
    /server_info of its own, a /workers list), True for a router that wants a control-plane key to list
    them, False for anything else. How a single-server view pointed at a router knows what it found."""
    limit = aiohttp.ClientTimeout(total=timeout)
    try:
        async with aiohttp.ClientSession(timeout=limit) as session:
            async with session.get(f"{normal_url(url)}/server_info") as resp:
                if resp.status != 404:
                    return False
            async with session.get(f"{normal_url(url)}/workers") as resp:
                status, body = resp.status, await resp.read()
    except (aiohttp.ClientError, TimeoutError):
        return False
    if status in (401, 403):
        return True
    try:
        return from_router_json(json.loads(body)) if status == 200 else False
    except (ValueError, InventoryError):
        return False
