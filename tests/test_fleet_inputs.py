"""What the fleet reads from outside (the router's /workers JSON, key files, --label, URLs) is taken or
refused with one clear error, never a traceback: hypothesis throws shapes at each."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specctl.runtime.fleet.inventory import (
    InventoryError,
    Worker,
    from_router_json,
    parse_labels,
    parse_urls,
    select,
    with_expected,
)
from specctl.runtime.fleet.keys import KeyFileError, read_keys

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)


@given(JSON)
def test_any_workers_answer_is_a_list_of_workers_or_one_inventory_error(body: object) -> None:
    try:
        workers = from_router_json(body)
    except InventoryError as exc:
        assert "workers" in exc.message
        return
    assert all(isinstance(w, Worker) and "://" in w.url for w in workers)


def test_the_routers_shape_gives_urls_health_and_labels() -> None:
    body = {"workers": [{"url": "http://127.0.0.1:2/", "is_healthy": False, "metadata": {"canary": "true"}},
                        {"url": "http://127.0.0.1:1", "is_healthy": True, "metadata": {"tp_size": "1"}}],
            "total": 2}
    workers = from_router_json(body)
    assert [(w.url, w.healthy) for w in workers] == [("http://127.0.0.1:1", True), ("http://127.0.0.1:2", False)]
    assert [w.url for w in select(workers, labels={"canary": "true"})] == ["http://127.0.0.1:2"]
    rows = with_expected(workers, ["127.0.0.1:3", "http://127.0.0.1:1/"])
    assert [(w.url, w.listed) for w in rows][-1] == ("http://127.0.0.1:3", False) and len(rows) == 3


@given(st.text(max_size=200))
def test_any_key_file_is_keys_or_one_error_naming_the_file(tmp_path_factory: pytest.TempPathFactory,
                                                           text: str) -> None:
    path = tmp_path_factory.mktemp("keys") / "fleet.keys"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))  # a lone surrogate: bytes that are not UTF-8
    try:
        keys = read_keys(path)
    except KeyFileError as exc:
        assert str(path) in str(exc)
        return
    assert keys.default is not None or keys.per_worker


def test_key_file_forms(tmp_path: Path) -> None:
    one = tmp_path / "one"
    one.write_text("secret\n")
    assert read_keys(one).for_url("http://any:1") == "secret"
    per = tmp_path / "per"
    per.write_text("# keys\nhttp://a:1 ka\nb:2 kb\n* rest\n")
    keys = read_keys(per)
    assert (keys.for_url("http://a:1/"), keys.for_url("http://b:2"), keys.for_url("http://c:3")) == ("ka", "kb", "rest")


@given(st.lists(st.text(max_size=12), max_size=5))
def test_labels_parse_or_say_which_pair(pairs: list[str]) -> None:
    try:
        labels = parse_labels(pairs)
    except ValueError as exc:
        assert str(exc).startswith("--label expects KEY=VALUE")
        return
    assert len(labels) <= len(pairs)


def test_urls_are_one_worker_however_written() -> None:
    assert parse_urls(["127.0.0.1:1,http://127.0.0.1:1/", " http://127.0.0.1:2 ,"]) == [
        "http://127.0.0.1:1", "http://127.0.0.1:2"]
