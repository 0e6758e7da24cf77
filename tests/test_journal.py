"""The journal: one flushed line per record, rotation, and a reader that forgives a torn tail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from specctl.runtime.core import records
from specctl.runtime.supervisor.journal import Journal, read_journal


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
                     b'{"v":1,"t":5.0,"kind":"event","event":"x","n":-Infinity}\n{"v":1,"t":6.0,"kind":"event"}\n')
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
