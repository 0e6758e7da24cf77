"""A settings change fanned out to every selected worker's ``POST /set_internal_state``.

Checked first against every worker's current settings with the core's validation (the same
check each server runs), and sent to none if any worker would refuse it: a fleet is never left
half-changed by a value that only some servers take. Workers that cannot take it for other
reasons (down, view only, missing) do not stop the rest; each gets its own result.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from specctl.runtime.core.settings import PolicySettings, SettingsError
from specctl.runtime.fleet.keys import Keys
from specctl.runtime.fleet.state import OK, REFUSED, Unanswered, WorkerState, request


@dataclass(frozen=True)
class Result:
    """One worker's answer to a command: an outcome of state.OUTCOMES and one line of detail."""

    url: str
    outcome: str
    detail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "result": self.outcome, "detail": self.detail}


def check(states: Sequence[WorkerState], change: Mapping[str, Any]) -> dict[str, PolicySettings | str]:
    """Per steerable worker: its new settings, or why it would refuse them (a SettingsError's words).

    Beyond the core's validation, a pinned depth must be one the server built at start
    (the plugin's ``built`` list, where it reports one): SGLang has no runtime state for another.
    """
    plans: dict[str, PolicySettings | str] = {}
    for s in states:
        current = s.settings
        if s.outcome != OK:
            continue
        if current is None:
            plans[s.url] = "its settings could not be read"
            continue
        try:
            new = current.with_changes(change)
        except SettingsError as exc:
            plans[s.url] = str(exc)
            continue
        built = (s.spec or {}).get("built")
        if isinstance(built, list) and built and new.steps not in built:
            plans[s.url] = f"steps: must be one of the built depths {[d for d in built if d]}, got {new.steps}"
            continue
        plans[s.url] = new
    return plans


async def send(session: aiohttp.ClientSession, states: Sequence[WorkerState], change: Mapping[str, Any],
               keys: Keys, timeout: float) -> list[Result]:
    """Check the change everywhere, then send it to every steerable worker at once; one Result each."""
    plans = check(states, change)
    refusals = {url: why for url, why in plans.items() if isinstance(why, str)}
    keys_changed = list(change)

    async def one(s: WorkerState) -> Result:
        if s.outcome != OK:
            return Result(s.url, s.outcome, s.detail)
        if refusals:
            if s.url in refusals:
                return Result(s.url, REFUSED, refusals[s.url])
            return Result(s.url, REFUSED, f"not sent: {len(refusals)} worker(s) would refuse it")
        new = plans[s.url]
        assert isinstance(new, PolicySettings)
        body = {"server_args": new.to_wire(keys_changed)}
        try:
            status, raw = await request(session, "POST", f"{s.url}/set_internal_state", timeout,
                                        json=body, headers=keys.headers(s.url))
        except Unanswered as exc:
            return Result(s.url, exc.outcome, exc.detail)
        if status >= 400:
            return Result(s.url, REFUSED, f"HTTP {status}: {raw[:120].decode('utf-8', 'replace')}")
        try:
            ranks = json.loads(raw)
        except ValueError:
            ranks = None
        if not isinstance(ranks, list) or not ranks:
            return Result(s.url, REFUSED, "the server's answer is not a list of ranks")
        if not all(r is True for r in ranks):
            refused = [i for i, r in enumerate(ranks) if r is not True]
            return Result(s.url, REFUSED, f"the server refused the values (DP rank {', '.join(map(str, refused))})")
        return Result(s.url, OK, _said(new, keys_changed))

    return list(await asyncio.gather(*(one(s) for s in states)))


def _said(new: PolicySettings, keys: Sequence[str]) -> str:
    values = new.as_dict()
    return " ".join(f"{k}={values[k]}" for k in keys)
