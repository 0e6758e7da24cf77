"""Each record is declared once (a TypedDict in core/records.py) and its run-time check is read from it.

So a field added to a declaration is checked the moment it is added, and a check cannot
know a field the declaration does not: every declared field, at every depth of a sample,
an event and a command, passes with a value of its declared type and fails with one of
another type. The records that other parts also describe (the policy's settings, a GPU
from NVML or the simulator, the journal's reader) are the same fields.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest

from specctl.runtime.core import records
from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.probes.gpus import _gpu
from specctl.runtime.sim.gpus import SimGpus
from specctl.runtime.sim.presets import PRESETS
from specctl.runtime.supervisor import journal

T = 1764400000.0


def good(hint: Any) -> Any:
    """A value of the declared type."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, UnionType):
        return good(next(arg for arg in args if arg is not type(None)))
    if is_typeddict(hint):
        return {}
    if origin is Literal:
        return args[0]
    if origin is list:
        return [good(args[0])]
    if origin is dict or hint is dict:
        return {"k": good(args[1]) if args else 1}
    return {str: "text", int: 2, float: 2.5, bool: True, Any: [1]}[hint]


def bad(hint: Any) -> Any:
    """A value of no type the declaration allows."""
    kinds = [a for a in get_args(hint) if a is not type(None)] if get_origin(hint) in (Union, UnionType) else [hint]
    kind = kinds[0]
    if is_typeddict(kind) or get_origin(kind) in (list, dict) or kind is dict:
        return "text"
    if get_origin(kind) is Literal:
        return "not-a-kind"
    return {str: 7, int: 2.5, float: "2.5", bool: "yes"}[kind]


def base_records() -> dict[str, dict[str, Any]]:
    sample = records.sample({"state": "ready", "progress": {}}, {"settings": {}, "off_state": {"early_publish": {}}},
                            [{"index": 0, "processes": [{"pid": 1}]}], [{"pid": 1}], sim=True, t=T)
    return {"sample": dict(sample), "event": dict(records.event(records.SPEC_SWITCH, t=T)),
            "command": dict(records.command("mode", True, 1000, t=T))}


def every_field(shape: type, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], str, Any]]:
    """(where, name, declared type) for each field of ``shape`` and of the records nested in it."""
    for name, hint in get_type_hints(shape).items():
        yield path, name, hint
        kinds = [a for a in get_args(hint) if a is not type(None)] if get_origin(hint) in (Union, UnionType) \
            else [hint]
        for kind in kinds:
            if is_typeddict(kind):
                yield from every_field(kind, (*path, name))
            elif get_origin(kind) is list and is_typeddict(get_args(kind)[0]):
                yield from every_field(get_args(kind)[0], (*path, name, 0))


# ``kind`` picks which shape a record is checked against: test_a_record_of_another_kind_is_not_this_one
FIELDS = [(kind, *field) for kind, shape in (("sample", records.Sample), ("event", records.Event),
                                              ("command", records.Command))
          for field in every_field(shape, ()) if field[:2] != ((), "kind")]


def test_the_walk_reaches_every_nested_record() -> None:
    where = {path for kind, path, _name, _hint in FIELDS if kind == "sample"}
    assert where == {(), ("server",), ("server", "progress"), ("spec",), ("spec", "settings"), ("spec", "off_state"),
                     ("spec", "off_state", "early_publish"), ("gpus", 0), ("gpus", 0, "processes", 0),
                     ("procs", 0)}
    assert ("spec", "settings", "candidates") in {(*path, name) for _k, path, name, _h in FIELDS}


@pytest.mark.parametrize(("kind", "path", "name", "hint"), FIELDS,
                         ids=[".".join(map(str, (kind, *path, name))) for kind, path, name, _ in FIELDS])
def test_every_declared_field_is_checked_by_its_declared_type(kind: str, path: tuple, name: str, hint: Any) -> None:
    record = base_records()[kind]
    target = record
    for key in path:
        target = target[key]
    target[name] = good(hint)
    assert records.parse(record) is record, f"{name}={target[name]!r} is of its declared type {hint}"
    wrong = copy.deepcopy(record)
    holder = wrong
    for key in path:
        holder = holder[key]
    holder[name] = bad(hint)
    assert records.parse(wrong) is None, f"{name}={holder[name]!r} is not of its declared type {hint}"


def test_a_field_no_declaration_names_passes_as_a_newer_writers() -> None:
    for record in base_records().values():
        record["added_by_a_newer_writer"] = [{"any": "shape"}]
        assert records.parse(record) is record


def test_a_record_of_another_kind_is_not_this_one() -> None:
    for record in base_records().values():
        record["kind"] = "other"
        assert records.parse(record) is None


def test_a_settings_record_is_the_policys_settings() -> None:
    """The Settings record (what a server reports) has exactly the fields an operator sets, of their types."""
    settings = PolicySettings(candidates=(0, 1, 3)).as_dict()
    assert list(get_type_hints(records.Settings)) == list(settings)
    sample = records.sample({}, {"settings": settings}, [], [], sim=True, t=T)
    assert records.parse(sample) is sample


def test_a_gpu_record_is_what_nvml_the_simulator_and_the_journal_reader_know() -> None:
    declared = list(get_type_hints(records.Gpu))
    assert sorted(_gpu(0, "NVIDIA H200", "GPU-1", "ok", None)) == sorted(declared)
    preset = PRESETS["h200-llama8b"]
    sim = SimGpus(preset.gpu, 2, mem_fraction_static=preset.mem_fraction_static, failed=frozenset({1}))
    for gpu in sim.snapshot():  # one that answers, one failed
        assert sorted(gpu) == sorted(declared) and records.parse(records.sample({}, None, [gpu], [], sim=True, t=T))
    # the reader checks the scalar fields it draws; the processes list is checked by records.parse
    assert sorted((*journal._GPU_TEXT, *journal._GPU_NUMBERS, "processes")) == sorted(declared)
