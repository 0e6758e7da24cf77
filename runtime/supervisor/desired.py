"""The supervisor's desired state: what the model server should run, who asked for it, and when.

One record per supervisor, kept as JSON (0600) in its state folder, restored when
the supervisor starts and pushed to the server whenever the server (re)starts. It
holds layers, lowest first:

- ``config``: the config file's ``[policy]`` and ``--set`` as this supervisor
  started with them (source ``config``);
- ``learned``: values a calibration loop measured (source ``calibration``), each
  with its provenance; below what a person chose;
- ``chosen``: values an operator set through this supervisor (source
  ``operator``, with the uid) or that were adopted from the server because
  someone changed them elsewhere (source ``elsewhere``: another supervisor,
  ``specctl fleet``, a curl with the admin key);
- ``pin``: a depth pinned by ``force-on --steps N``, with the steps to go back to
  when the pin ends (any other mode command, or ``set --reset``).

What the server should run is the layers merged (:meth:`DesiredState.wanted`).
A config value that changed since the record was written (the file edited, another
``--set``) is newer than an old choice: that choice is dropped at start (with its
pair, off_at and on_at go together), and the journal says so.

Pure data plus one load and one save; the supervisor journals what these return.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, get_args

from specctl.runtime.core import records
from specctl.runtime.core.atomic_file import write_atomic
from specctl.runtime.core.settings import SettingsError, check_fields
from specctl.runtime.core.thresholds import groups_touched

Source = Literal["operator", "config", "elsewhere", "calibration"]
SOURCES: tuple[Source, ...] = get_args(Source)
VERSION = 1
FILE_MODE = 0o600


@dataclass(frozen=True)
class Entry:
    """One setting's value and who set it when (``by``: the operator's uid; ``note``: a calibration's provenance)."""

    value: Any
    source: Source
    t: float
    by: int | None = None
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value, "source": self.source, "t": self.t}
        if self.by is not None:
            out["by"] = self.by
        if self.note is not None:
            out["note"] = self.note
        return out

    @classmethod
    def from_dict(cls, raw: Any) -> Entry | None:
        if not isinstance(raw, dict) or raw.get("source") not in SOURCES:
            return None
        t, by, note = raw.get("t"), raw.get("by"), raw.get("note")
        if not isinstance(t, (int, float)) or isinstance(t, bool):
            return None
        return cls(raw.get("value"), raw["source"], float(t),
                   by if isinstance(by, int) and not isinstance(by, bool) else None,
                   note if isinstance(note, str) else None)


@dataclass(frozen=True)
class Pin:
    """A pinned depth (``force-on --steps N``) and the steps the server ran before it."""

    depth: int
    restore: int
    source: Source
    t: float
    by: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"depth": self.depth, "restore": self.restore, "source": self.source, "t": self.t, "by": self.by}


@dataclass(frozen=True)
class DesiredState:
    """The layers (see the module's doc); immutable: every change returns a new record."""

    config: Mapping[str, Any] = field(default_factory=dict)
    learned: Mapping[str, Entry] = field(default_factory=dict)
    chosen: Mapping[str, Entry] = field(default_factory=dict)
    pin: Pin | None = None
    # the server's settings as last read, and its policy step then: a supervisor started again finds
    # what changed on an attached server while it was away (a fleet command, a curl) and adopts it
    seen: Mapping[str, Any] | None = None
    seen_step: int | None = None

    # -- reading -----------------------------------------------------------------
    def values(self) -> dict[str, Any]:
        """The settings asked for, pin left out: config, then learned, then chosen over them."""
        return {**self.config, **{k: e.value for k, e in self.learned.items()},
                **{k: e.value for k, e in self.chosen.items()}}

    def wanted(self) -> dict[str, Any]:
        """What the server should run: :meth:`values` with a pinned depth forced on."""
        out = self.values()
        if self.pin is not None:
            out.update(mode="on", steps=self.pin.depth)
        return out

    def who(self, key: str) -> dict[str, Any]:
        """Who set ``key`` and when, as the journal and the status show it."""
        if key in ("steps", "mode") and self.pin is not None:
            return {"source": self.pin.source, "t": self.pin.t, "by": self.pin.by, "pinned": self.pin.depth}
        for layer in (self.chosen, self.learned):
            if key in layer:
                return layer[key].as_dict()
        if key in self.config:
            return {"value": self.config[key], "source": "config"}
        return {}

    def as_dict(self) -> dict[str, Any]:
        return {"v": VERSION, "config": dict(self.config),
                "learned": {k: e.as_dict() for k, e in self.learned.items()},
                "chosen": {k: e.as_dict() for k, e in self.chosen.items()},
                "pin": None if self.pin is None else self.pin.as_dict(),
                "seen": None if self.seen is None else dict(self.seen), "seen_step": self.seen_step}

    # -- changing ------------------------------------------------------------------
    def choose(self, values: Mapping[str, Any], source: Source, by: int | None = None,
               t: float | None = None) -> DesiredState:
        """An operator's (or an adopted) change: each value above config and learned.

        A pin ends when mode or steps is chosen: ``specctl auto`` and a plain ``force-on``
        hand the depth back (the caller sends the pin's ``restore`` steps with them).
        """
        now = time.time() if t is None else t
        chosen = {**self.chosen, **{k: Entry(v, source, now, by) for k, v in values.items()}}
        pin = None if {"mode", "steps"} & set(values) else self.pin
        return replace(self, chosen=chosen, pin=pin)

    def pinned(self, depth: int, restore: int, by: int | None = None, t: float | None = None) -> DesiredState:
        """``force-on --steps N``: mode on at depth N until a mode command ends it."""
        now = time.time() if t is None else t
        chosen = {k: e for k, e in self.chosen.items() if k not in ("mode", "steps")}
        return replace(self, chosen=chosen, pin=Pin(depth, restore, "operator", now, by))

    def learned_values(self, values: Mapping[str, Any], provenance: str, t: float | None = None) -> DesiredState:
        """A calibration's values: below what anyone chose (operator-set keys always win)."""
        now = time.time() if t is None else t
        learned = {**self.learned, **{k: Entry(v, "calibration", now, note=provenance) for k, v in values.items()}}
        return replace(self, learned=learned)

    def reset(self) -> DesiredState:
        """``specctl set --reset``: every chosen value and the pin go; config and learned stay."""
        return replace(self, chosen={}, pin=None)

    def with_config(self, config: Mapping[str, Any]) -> tuple[DesiredState, list[str]]:
        """This start's config over a restored record; the keys whose older choice the new config replaced."""
        changed = {k for k in set(config) | set(self.config) if config.get(k) != self.config.get(k)}
        dropped = sorted(k for k in groups_touched(changed) if k in self.chosen)
        chosen = {k: e for k, e in self.chosen.items() if k not in dropped}
        pin = None if self.pin is not None and {"mode", "steps"} & changed else self.pin
        if pin is None and self.pin is not None:
            dropped.append("pin")
        return replace(self, config=dict(config), chosen=chosen, pin=pin), dropped


# -- the file -------------------------------------------------------------------------

class DesiredFileError(Exception):
    """The record on disk cannot be used (the supervisor starts from its config and says so)."""


def load(path: Path) -> DesiredState | None:
    """The record kept at ``path``; None when there is none. Raises DesiredFileError for an unusable one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DesiredFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        raw = json.loads(text)
    except ValueError:
        raise DesiredFileError(f"{path} is not JSON") from None
    if not owner_only(path):
        raise DesiredFileError(f"{path} may be written by others (it must be its owner's alone, 0600)")
    if not isinstance(raw, dict) or raw.get("v") != VERSION:
        raise DesiredFileError(f"{path} is not a desired-state record of version {VERSION}")
    config = raw.get("config") if isinstance(raw.get("config"), dict) else {}
    learned = _entries(raw.get("learned"))
    chosen = _entries(raw.get("chosen"))
    pin = _pin(raw.get("pin"))
    try:  # every value must still be a setting this release takes: one that is not is dropped, not pushed
        check_fields({**config, **{k: e.value for k, e in {**learned, **chosen}.items()}})
    except SettingsError as exc:
        raise DesiredFileError(f"{path}: {exc}") from None
    seen = raw.get("seen") if isinstance(raw.get("seen"), dict) else None
    step = raw.get("seen_step") if isinstance(raw.get("seen_step"), int) else None
    return DesiredState(config, learned, chosen, pin, seen, step)


def save(path: Path, state: DesiredState) -> None:
    """Written whole or not at all, 0600, in a folder only its owner can enter."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, json.dumps(state.as_dict(), indent=1, sort_keys=True) + "\n", mode=FILE_MODE)


def file_for(state_dir: Path, name: str) -> Path:
    """The record's file for one supervisor: named after what tells supervisors apart (its socket)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name.strip("/"))[-100:] or "default"
    return state_dir / "desired" / f"{safe}.json"


def owner_only(path: Path) -> bool:
    """The file is its owner's alone: a record others could write would steer the server."""
    try:
        st = path.stat()
    except OSError:
        return False
    return (st.st_mode & 0o022) == 0 and st.st_uid == os.getuid()


def _entries(raw: Any) -> dict[str, Entry]:
    if not isinstance(raw, dict):
        return {}
    out = {}
    for key, value in raw.items():
        entry = Entry.from_dict(value)
        if isinstance(key, str) and entry is not None:
            out[key] = entry
    return out


def _pin(raw: Any) -> Pin | None:
    if not isinstance(raw, dict):
        return None
    depth, restore, t, by = raw.get("depth"), raw.get("restore"), raw.get("t"), raw.get("by")
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in (depth, restore)):
        return None
    if not isinstance(t, (int, float)):
        return None
    source = raw.get("source") if raw.get("source") in SOURCES else "operator"
    return Pin(depth, restore, source, float(t), by if isinstance(by, int) else None)


# -- the supervisor's handle ----------------------------------------------------------

class Desired:
    """The supervisor's desired state: the record, its file, and the journal lines that say who changed it.

    ``path`` None keeps the record in memory only (an embedded console's supervisor without a
    state folder); ``emit`` is the supervisor's journal-and-hub.
    """

    def __init__(self, path: Path | None, config: Mapping[str, Any],
                 emit: Callable[[records.Record], None]) -> None:
        self.path = path
        self.emit = emit
        self.state = DesiredState(config=dict(config))
        self._config = dict(config)

    def restore(self) -> None:
        """At supervisor start: the kept record under this start's config, journaled (``desired_restored``)."""
        if self.path is None:
            return
        try:
            kept = load(self.path)
        except DesiredFileError as exc:
            self.emit(records.event(records.DESIRED_UNUSABLE, path=str(self.path), error=str(exc)))
            return
        if kept is None:
            return
        self.state, dropped = kept.with_config(self._config)
        self._save()
        self.emit(records.event(records.DESIRED_RESTORED, path=str(self.path), settings=self.state.wanted(),
                                who=self.who(), dropped=dropped))

    # -- what the supervisor reads ----------------------------------------------------------
    def values(self) -> dict[str, Any]:
        """The settings asked for by config, calibration and people (a pin left out)."""
        return self.state.values()

    def wanted(self) -> dict[str, Any]:
        """What the server should run, a pinned depth included."""
        return self.state.wanted()

    @property
    def pin(self) -> Pin | None:
        return self.state.pin

    def who(self) -> dict[str, dict[str, Any]]:
        """Each wanted setting's source and time (``config`` has no time: it is this start's)."""
        return {k: self.state.who(k) for k in self.state.wanted()}

    # -- changes ---------------------------------------------------------------------------
    def choose(self, values: Mapping[str, Any], by: int | None) -> None:
        """An operator's change through this supervisor (its ``settings`` event is the command's)."""
        self.state = self.state.choose(values, "operator", by)
        self._save()

    def pinned(self, depth: int, restore: int, by: int | None) -> None:
        self.state = self.state.pinned(depth, restore, by)
        self._save()

    def adopt(self, values: Mapping[str, Any], settings: Mapping[str, Any], while_away: bool = False) -> None:
        """A change made elsewhere, seen on the server: it becomes the desired state, journaled as such
        (``while_away``: made while no supervisor watched, found when this one started)."""
        self.state = self.state.choose(values, "elsewhere")
        self._save()
        self.emit(records.event(records.SETTINGS_ADOPTED, source="elsewhere", fields=dict(values),
                                settings=dict(settings), **({"while_away": True} if while_away else {})))

    def saw(self, settings: Mapping[str, Any], step: Any) -> None:
        """The server's settings as read now (kept only when they changed: one write per change)."""
        if self.state.seen == settings:
            return
        self.state = replace(self.state, seen=dict(settings), seen_step=step if isinstance(step, int) else None)
        self._save()

    def changed_while_away(self, settings: Mapping[str, Any], step: Any) -> dict[str, Any]:
        """The settings an attached server runs that differ from those this record last saw, where the server
        did not restart meanwhile (its policy step did not go back): changes made while no supervisor watched."""
        seen, seen_step = self.state.seen, self.state.seen_step
        if seen is None or not isinstance(step, int) or seen_step is None or step < seen_step:
            return {}
        return {k: v for k, v in settings.items() if k in seen and seen[k] != v}

    def learned(self, values: Mapping[str, Any], provenance: str) -> dict[str, Any]:
        """A calibration's values, a layer below the operator's: returns what the server should now run.

        Raises SettingsError (nothing kept) for values that are not settings. The caller pushes
        the returned keys that are not an operator's (those win).
        """
        check_fields(values)
        self.state = self.state.learned_values(values, provenance)
        self._save()
        self.emit(records.event(records.SETTINGS_LEARNED, source="calibration", fields=dict(values),
                                why=provenance))
        return {k: v for k, v in self.state.wanted().items() if k in values}

    def reset(self) -> dict[str, Any]:
        """Drop every chosen value and the pin; returns what was dropped (value and who)."""
        dropped = {k: e.as_dict() for k, e in self.state.chosen.items()}
        if self.state.pin is not None:
            dropped["pin"] = self.state.pin.as_dict()
        self.state = self.state.reset()
        self._save()
        return dropped

    def _save(self) -> None:
        if self.path is None:
            return
        try:
            save(self.path, self.state)
        except OSError as exc:  # kept in memory: the server still gets it; a restart of this supervisor would not
            self.emit(records.event(records.DESIRED_UNUSABLE, path=str(self.path),
                                    error=f"cannot write: {exc.strerror or exc}"))
