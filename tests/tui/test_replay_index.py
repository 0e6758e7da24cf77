"""A large journal replays from an index (where each line starts and its time), not from every record parsed
and kept: the first frame comes after one pass over the file, memory stays a fraction of it, and a seek
shows the state of its time as a whole-file replay would. bench/replay_big.py measures a 200 MB journal."""

from __future__ import annotations

import asyncio
import json
import resource
from pathlib import Path

import pytest

from specctl.console.tui.links import SEEK_SAMPLES_S, ReplayLink
from specctl.console.tui.model.timeline import HISTORY_S
from specctl.runtime.supervisor.journal import JournalIndex, read_records

from support.benches import load_bench

replay_big = load_bench("replay_big")


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("replay") / "j.jsonl"
    replay_big.generate(path, 3.0)  # ~3,900 records over ~3,800 s of journal time
    return path


async def _play_to(link: ReplayLink, t: float | None) -> list[dict]:
    """What the console receives: the opening seek, then (if ``t``) what a seek to ``t`` adds."""
    got: list[dict] = []

    async def drain() -> None:
        async for record in link.records():
            got.append(record)

    consumer = asyncio.create_task(drain())
    async with asyncio.timeout(60):
        await link.settled.wait()
        if t is not None:
            link.seek(t)
            await link.settled.wait()
    consumer.cancel()
    return got


async def test_the_link_keeps_an_index_not_the_records(journal: Path) -> None:
    link = ReplayLink(journal, paused=True)
    await link.open()
    first = await _play_to(link, None)
    assert first and first[0]["t"] == link.start
    assert not hasattr(link, "_records") and len(link._index.offsets) == len(link._index.times)
    await link.close()


async def test_a_seek_shows_the_state_a_whole_replay_would(journal: Path) -> None:
    whole = sorted(read_records(journal), key=lambda r: r["t"])
    link = ReplayLink(journal, paused=True)
    await link.open()
    target = link.start + 0.7 * (link.end - link.start)
    got = await _play_to(link, target)
    upto = [r for r in whole if r["t"] <= target]
    latest = [r for r in upto if r["kind"] == "sample"][-1]
    assert [r for r in got if r["kind"] == "sample"][-1] == latest  # the state shown: the latest sample
    assert [r for r in got if r["kind"] != "sample"] == [r for r in upto if r["kind"] != "sample"]  # every event
    charted = [r for r in upto if r["kind"] == "sample" and r["t"] >= target - HISTORY_S]
    assert all(r in got for r in charted), "every sample the charts keep"
    link.seek(link.start + 10)  # backwards: from the start again
    back = await _play_to(link, None)
    assert back[0]["kind"] == "reset" and all(r["t"] <= link.start + 10 for r in back[1:])
    await link.close()


def test_samples_left_out_of_a_seek_are_past_every_charts_history() -> None:
    assert SEEK_SAMPLES_S >= HISTORY_S


def test_the_index_skips_a_torn_tail_and_counts_timeless_lines(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    good = {"v": 1, "t": 5.0, "kind": "event", "event": "x"}
    path.write_text(json.dumps(good) + "\n" + '{"v":1,"t":"soon","kind":"event"}\n' + "not json\n"
                    + json.dumps(dict(good, t=4.0)) + "\n" + '{"v":1,"t":6.0,"ki')
    index = JournalIndex(path)
    assert list(index.times) == [4.0, 5.0] and index.unindexed == 2
    assert index.record(0)["t"] == 4.0
    index.close()


@pytest.mark.bench
def test_a_200_mb_journal_shows_in_under_3_s_within_twice_its_size(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    replay_big.generate(path, 200.0)
    size_mb = path.stat().st_size / 1e6
    result = replay_big.measure("indexed", path)
    assert result["first_s"] < 3.0, result
    assert result["peak_rss_mb"] < 2 * size_mb, result
    assert result["seek_s"] < 30.0, result
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # the measuring process is the child's, not ours
