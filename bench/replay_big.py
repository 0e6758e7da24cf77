"""Replay of a large journal: time to the first frame, peak memory, and a seek, indexed against read-whole.

Generates a journal of ``--mb`` megabytes (the samples and events of tests/tui/fixtures/one_gpu.jsonl,
repeated with times moved on), then, each in a fresh process so that peak RSS is its own:

- ``indexed``: what `specctl replay` does now before its first frame: the pre-screen check, the
  journal's index (console.tui.links.ReplayLink.open), the first records delivered;
- ``whole``: what it did before: every record parsed and kept (``list(read_records(...))``), sorted.

Printed: seconds to the first frame, peak RSS in MB and as a multiple of the file, and for ``indexed``
the seconds a seek to the middle takes (every record up to there is parsed and delivered, as the
console rebuilds its state from them); then the ratios.

    python bench/replay_big.py [--mb 200] [--keep FILE.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "tui" / "fixtures" / "one_gpu.jsonl"


def generate(path: Path, mb: float) -> int:
    """A journal of about ``mb`` MB: the fixture's lines again and again, each pass later in time."""
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    t0 = lines[0]["t"]
    span = lines[-1]["t"] - t0 + 1.0
    target, written, n, rounds = mb * 1e6, 0, 0, 0
    with open(path, "w", encoding="utf-8") as fh:
        while written < target:
            for record in lines:
                record = dict(record, t=round(record["t"] + rounds * span, 3))
                text = json.dumps(record, separators=(",", ":")) + "\n"
                fh.write(text)
                written += len(text)
                n += 1
            rounds += 1
    return n


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(mode: str, path: Path) -> None:
    """One measurement, in this process; prints a JSON line."""
    base = _rss_mb()
    t0 = time.perf_counter()
    out: dict[str, float] = {}
    if mode == "whole":
        from specctl.runtime.supervisor.journal import read_records

        timed = sorted(read_records(path), key=lambda r: float(r["t"]))
        assert timed
        out["first_s"] = time.perf_counter() - t0
    else:
        from specctl.console.tui.links import ReplayLink
        from specctl.console.tui.main import PRECOUNT_BYTES, _journal_problem, _malformed

        async def run() -> None:
            assert not _journal_problem(path)
            if path.stat().st_size <= PRECOUNT_BYTES:
                _malformed(path)
            link = ReplayLink(path, paused=True)
            await link.open()
            stream = link.records()
            await anext(stream)  # the first frame's record
            out["first_s"] = time.perf_counter() - t0
            delivered = 0

            async def drain() -> None:
                nonlocal delivered
                async for _ in stream:
                    delivered += 1

            consumer = asyncio.create_task(drain())
            await link.settled.wait()  # the rest of the opening seek (the records at the first time)
            t1 = time.perf_counter()
            before = delivered
            link.seek((link.start + link.end) / 2)
            await link.settled.wait()
            n = delivered - before
            consumer.cancel()
            out["seek_s"] = time.perf_counter() - t1
            out["seek_records"] = n
            await link.close()

        asyncio.run(run())
    out["peak_rss_mb"] = _rss_mb()
    out["base_rss_mb"] = base
    print(json.dumps(out))


def measure(mode: str, path: Path) -> dict[str, float]:
    done = subprocess.run([sys.executable, __file__, "--child", mode, str(path)], capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{mode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], Path(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=200.0)
    ap.add_argument("--keep", type=Path, help="write the journal here (and keep it) instead of a temporary file")
    ap.add_argument("--modes", default="indexed,whole")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="replay-big-") as tmp:
        path = args.keep or Path(tmp) / "big.jsonl"
        n = generate(path, args.mb)
        size_mb = os.path.getsize(path) / 1e6
        print(f"journal: {size_mb:.0f} MB, {n} records")
        results = {}
        for mode in args.modes.split(","):
            r = results[mode] = measure(mode, path)
            seek = f", seek to the middle {r['seek_s']:.2f} s ({int(r['seek_records'])} records)" \
                if "seek_s" in r else ""
            print(f"{mode:8} first frame {r['first_s']:.2f} s, peak RSS {r['peak_rss_mb']:.0f} MB "
                  f"({r['peak_rss_mb'] / size_mb:.2f}x the file; {r['base_rss_mb']:.0f} MB before){seek}")
        if "indexed" in results and "whole" in results:
            a, b = results["indexed"], results["whole"]
            print(f"ratios (whole / indexed): first frame {b['first_s'] / a['first_s']:.1f}x, "
                  f"peak RSS {b['peak_rss_mb'] / a['peak_rss_mb']:.1f}x")


if __name__ == "__main__":
    main()
