"""The journal: one flushed line per record, rotation, and a reader that forgives a torn tail."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specctl.runtime.core import records
from specctl.runtime.supervisor.journal import Journal, JournalReader, read_journal

from support.disk import small_disk


def test_every_line_is_one_compact_object_with_v_and_t_first(tmp_path: Path) -> None:
    j = Journal(tmp_path / "run.jsonl")
    j.write(records.event("spec_switch", on=False, reason="load", batch_size=70, step=5))
    j.write(records.command("mode", True, 1000, args={"mode": "off"}))
    j.close()
    lines = (tmp_path / "run.jsonl").read_text(encoding="utf-8").splitlines()
    assert [list(json.loads(line))[:3] for line in lines] == [["v", "t", "kind"]] * 2
    assert all(", " not in line and ": " not in line for line in lines)


def test_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    j = Journal(path)
    for i in range(3):
        j.write(records.event("x", i=i))
    j.close()
    with open(path, "ab") as fh:
        fh.write(b'{"v":1,"t":1.0,"kind":"ev')
    assert [r["i"] for r in read_journal(path)] == [0, 1, 2]


def test_lines_with_numbers_no_float_holds_are_skipped_as_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"v":1,"t":1e999,"kind":"sample"}\n{"v":1,"t":NaN,"kind":"sample"}\n'
                     b'{"v":1,"t":5.0,"kind":"event","event":"x","n":-Infinity}\n{"v":1,"t":6.0,"kind":"event","event":"y"}\n')
    assert [r["t"] for r in read_journal(path)] == [6.0]


def test_a_writer_killed_mid_stream_leaves_every_complete_line(tmp_path: Path) -> None:
    """kill -9 a real writer process while it writes; every complete line reads back."""
    path = tmp_path / "run.jsonl"
    code = ("import sys\nfrom specctl.runtime.supervisor.journal import Journal\n"
            "from specctl.runtime.core import records\n"
            "j = Journal(sys.argv[1])\ni = 0\nwhile True:\n    j.write(records.event('x', i=i, pad='p' * 500))\n"
            "    i += 1\n    if i == 200: print('go', flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"go\n"
    proc.kill()
    proc.wait()
    got = [r["i"] for r in read_journal(path)]
    assert len(got) >= 200 and got == list(range(len(got)))


def test_rotation_keeps_backups(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    j = Journal(path, max_bytes=2000, backups=2)
    for i in range(100):
        j.write(records.event("x", i=i, pad="p" * 50))
    j.close()
    assert path.with_name("run.jsonl.1").exists() and path.with_name("run.jsonl.2").exists()
    assert not path.with_name("run.jsonl.3").exists()
    newest = [r["i"] for r in read_journal(path)]
    older = [r["i"] for r in read_journal(path.with_name("run.jsonl.1"))]
    assert older and newest and older[-1] + 1 == newest[0] and newest[-1] == 99


def test_a_file_moved_away_is_reopened(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    j = Journal(path)
    j.write(records.event("before"))
    os.replace(path, tmp_path / "rotated.jsonl")
    j.write(records.event("after"))
    j.close()
    assert [r["event"] for r in read_journal(path)] == ["after"]
    assert [r["event"] for r in read_journal(tmp_path / "rotated.jsonl")] == ["before"]


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=2000))
def test_reader_never_raises_on_garbage(tmp_path_factory, blob: bytes) -> None:
    path = tmp_path_factory.mktemp("j") / "g.jsonl"
    path.write_bytes(blob)
    for record in read_journal(path):
        assert isinstance(record, dict)


# -- issue 19 item 4: the journal holds on a full disk, after kill -9, and against planted paths ----

def test_a_torn_tail_is_cut_at_open_so_the_next_record_is_not_lost(tmp_path: Path) -> None:
    """The attack: kill -9 mid-write leaves a torn line; before, the next run's first record was glued to it."""
    path = tmp_path / "run.jsonl"
    j = Journal(path)
    j.write(records.event("first"))
    j.close()
    with open(path, "ab") as fh:
        fh.write(b'{"v":1,"t":1.0,"kind":"event","event":"torn')
    j = Journal(path)
    j.write(records.event("next_run"))
    j.close()
    assert [r["event"] for r in read_journal(path)] == ["first", "next_run"]
    assert path.read_bytes().count(b"torn") == 0


def test_a_journal_of_only_a_torn_line_is_emptied(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"x" * 200_000)
    Journal(path).close()
    assert path.read_bytes() == b""


def test_journals_are_created_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        Journal(tmp_path / "new" / "run.jsonl").close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new" / "run.jsonl").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700


@pytest.mark.parametrize("plant", ["symlink", "fifo", "other-owner"])
def test_a_path_another_user_planted_is_refused(tmp_path: Path, plant: str) -> None:
    """The attack: in a shared folder, another user plants the journal's name (a symlink to a file of ours,
    a FIFO that would hang us, a file of theirs that they can read); the supervisor refuses, writes nothing."""
    path, victim = tmp_path / "run.jsonl", tmp_path / "precious"
    victim.write_bytes(b"keep\n")
    if plant == "symlink":
        path.symlink_to(victim)
    elif plant == "fifo":
        os.mkfifo(path)
    else:
        if os.geteuid() != 0:
            pytest.skip("chown to another uid needs root")
        path.write_bytes(b"")
        os.chown(path, 65534, 65534)
    with pytest.raises(OSError, match="cannot write the journal"):
        Journal(path)
    assert victim.read_bytes() == b"keep\n"
    if plant == "other-owner":
        assert path.read_bytes() == b""


def test_on_a_full_disk_every_line_parses_and_the_gap_is_recorded(tmp_path: Path) -> None:
    """The attack: the disk fills (twice) while the supervisor journals records of every size.

    Before: a partial write moved the file offset past the end, the next failed write's cut kept a
    fragment, and the journal_gap record written when space returned was glued to it, unreadable.
    """
    with small_disk(tmp_path) as (folder, fill, free):
        path = folder / "run.jsonl"
        j = Journal(path, max_bytes=0)
        written = lost = 0
        for cycle in range(2):
            for i in range(20):
                j.append(records.event("before", cycle=cycle, i=i, pad="p" * (37 * i)))
            fill()
            for i in range(30):
                failing = j.lost
                j.append(records.event("during", cycle=cycle, i=i, pad="d" * (53 * i + 100)))
                lost += j.lost > failing
            free()
            gap = j.append(records.event("after", cycle=cycle))
            assert gap is not None and gap["event"] == "journal_gap"
            written += 1
        j.close()
        raw = path.read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    parsed = [json.loads(line) for line in lines]  # every line parses: no fragment, nothing glued
    gaps = [r for r in parsed if r.get("event") == "journal_gap"]
    # a short record may still fit in the last page while the disk is full: gaps can come in between
    assert len(gaps) >= 2 and all(g["lost"] > 0 for g in gaps)
    assert [r["event"] for r in parsed if r.get("event") == "after"] == ["after", "after"]
    kept_during = [r for r in parsed if r.get("event") == "during"]
    assert len(kept_during) + sum(g["lost"] for g in gaps) == 60, "every record is either written or counted"


@pytest.mark.parametrize("bad", [
    '{"v":1,"t":1e308,"kind":"event","event":"x"}',
    '{"v":1,"t":"soon","kind":"event","event":"x"}',
    '{"v":1,"t":5.0,"kind":"sample","sim":true,"server":{},"spec":null,"gpus":[{"index":0,"name":["H","200"]}],"procs":[]}',
    '{"v":1,"t":5.0,"kind":"sample","sim":true,"server":{"running":"many"},"spec":null,"gpus":[],"procs":[]}',
    '{"v":1,"t":5.0,"kind":"sample","sim":true,"server":{},"spec":null,"gpus":{"0":{}},"procs":[]}',
    '{"v":1,"t":5.0,"kind":"command","cmd":["mode"]}',
])
def test_a_record_of_the_wrong_shape_is_skipped_and_counted_like_a_corrupt_line(tmp_path: Path, bad: str) -> None:
    """The attack (issue 19 item 7): a crafted journal whose GPU name is a list or whose timestamp is 1e308
    crashed `specctl replay`; such a record is skipped and counted, as a corrupt line is."""
    path = tmp_path / "crafted.jsonl"
    good = '{"v":1,"t":6.0,"kind":"sample","sim":true,"server":{"state":"ready","running":3,"extra":[1]},' \
           '"spec":null,"gpus":[{"index":0,"name":"H200","util":50.0}],"procs":[]}'
    path.write_text(f"{bad}\nnot json\n{good}\n")
    reader = JournalReader(path)
    assert [r["t"] for r in reader] == [6.0] and reader.skipped == 2
