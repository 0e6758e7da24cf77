"""A journal line holding an integer beyond float range (a 401-digit ``t``, ``server.running`` or GPU field) is
unreadable: skipped and counted as a corrupt line is, by every reader (the replay's count, depth-costs), never an
OverflowError traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specctl.console.tui.main import _malformed
from specctl.runtime.core import records
from specctl.runtime.supervisor.journal import JournalReader, read_records

HUGE = "9" * 401
GOOD = ('{"v":1,"t":6.0,"kind":"sample","sim":true,"server":{"state":"ready","running":3},'
        '"spec":null,"gpus":[{"index":0,"name":"H200","util":50.0}],"procs":[]}')
BAD = [
    f'{{"v":1,"t":{HUGE},"kind":"event","event":"x"}}',
    f'{{"v":1,"t":5.0,"kind":"sample","sim":true,"server":{{"state":"ready","running":{HUGE}}},"spec":null,'
    '"gpus":[],"procs":[]}',
    f'{{"v":1,"t":5.0,"kind":"sample","sim":true,"server":{{}},"spec":null,"gpus":[{{"index":0,"name":"H200",'
    f'"mem_used":{HUGE}}}],"procs":[]}}',
    f'{{"v":1,"t":5.0,"kind":"sample","sim":true,"server":{{}},"spec":{{"switches":-{HUGE}}},"gpus":[],"procs":[]}}',
]


@pytest.mark.parametrize("bad", BAD)
def test_the_line_is_skipped_and_counted(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text(f"{bad}\n{GOOD}\n")
    reader = JournalReader(path)
    assert [r["t"] for r in reader] == [6.0] and reader.skipped == 1
    assert [r["t"] for r in read_records(path)] == [6.0]
    assert _malformed(path) == 1  # what `specctl replay` says it skipped


def test_an_integer_a_float_holds_still_reads() -> None:
    assert records.loads('{"a": ' + "9" * 300 + "}")["a"] == int("9" * 300)
    with pytest.raises(ValueError):
        records.loads('{"a": ' + HUGE + "}")


def test_depth_costs_reads_past_it_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text("\n".join(BAD) + "\n" + GOOD + "\n")
    proc = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "depth-costs", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr and "OverflowError" not in proc.stderr
    assert proc.returncode == 2 and "no samples of a server built with several depths" in proc.stderr
