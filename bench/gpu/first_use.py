#!/usr/bin/env python3
"""Each speculation state's first-use pause per batch-size bucket, and the kernels that compiled for it.

Why: on a fresh GPU machine the first switch to off (steps 0) paused a
specctl-steered SGLang server for 7-10 s. Kernels on that path (Triton's, in
SGLang's speculative post-processing, specialised on the draft token count
and on the next power of two of the batch size) compile on first use into a
disk cache. This sends, per bucket N and state, a first burst of N fresh
requests and then a second; the first's excess over the second is the pause
that state and bucket cost once, and the files that appeared in the JIT
caches during the first burst name what compiled. On a warm cache (or after
specctl's switch warm-up) every excess should be about zero and no kernel
should appear.

    first_use.py --url http://127.0.0.1:30000 --states "off 3" --buckets "1 2 4 8 16 32 64 128 256" \
        --new-tokens 4 --prompt-len 8 --label coldA-triton --csv OUT.csv \
        [--cache-dirs DIR,DIR] [--seed N] [--timeout 300] [--append]

A state is "off" or a depth d (forced on at d), set through /set_internal_state;
a refused one ends the run (exit 2). Mode auto (and the launch depth read at
the start) is put back at the end, whatever happened. A burst is ONE /generate
with N prompts (SGLang's batch form, so that the scheduler sees the batch at
once; specctl's simulator takes it too). Every prompt is new to the
server (seeded, never repeated in the run): a radix-cache hit would make a
later burst's prefill cheaper than the first's for another reason than a
compile.

Kernels: a Triton cache holds one hash folder per kernel with
``<kernel>.json`` (and ``__grp__<kernel>.json``, skipped); TVM-FFI and
FlashInfer caches hold ``<op>.so``. A file counts as new when it was not
there before the burst or its mtime changed (a listing before and after, so
no clock comparison can miss one). Standard library only, as ctl.py.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ctl import MODE_CODES, http, refused, spec_block  # bench/gpu is not a package

COLUMNS = ("label", "state", "batch", "first_s", "second_s", "excess_s", "kernels_first", "kernels_second")
ID_LOW, ID_HIGH = 100, 30_000        # token ids every vocabulary here has, clear of special tokens
COMPILED = (".cubin", ".hsaco", ".ptx")  # what a Triton kernel's folder holds beside its metadata


class Stop(Exception):
    """The run cannot go on; the message is the one line the user sees."""


@dataclass
class Row:
    state: str
    batch: int
    first_s: float
    second_s: float
    kernels_first: list[str]
    kernels_second: list[str]

    @property
    def excess_s(self) -> float:
        return self.first_s - self.second_s


def call(url: str, path: str, payload: dict[str, Any] | None, timeout: float) -> Any:
    """ctl.http with every failure turned into a Stop that says what and where, never a traceback."""
    try:
        return http(url, path, payload, timeout=timeout)
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace").strip().replace("\n", " ")
        raise Stop(f"{url}{path} answered HTTP {exc.code}: {body[:200]}") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise Stop(f"{url}{path}: no answer within {timeout:g} s") from None
        raise Stop(f"cannot reach {url} ({path}): {exc.reason}") from None
    except TimeoutError:
        raise Stop(f"{url}{path}: no answer within {timeout:g} s") from None
    except OSError as exc:
        raise Stop(f"{url}{path}: {exc}") from None


def state_args(state: str) -> dict[str, int]:
    """The /set_internal_state server_args for a state: off, or a depth forced on."""
    if state == "off":
        return {"specctl_mode": MODE_CODES["off"]}
    if state.isdigit():
        return {"specctl_mode": MODE_CODES["on"], "specctl_steps": int(state)}
    raise argparse.ArgumentTypeError(f"a state is 'off' or a depth (a whole number), got {state!r}")


def set_state(url: str, args: dict[str, int], timeout: float) -> None:
    answer = call(url, "/set_internal_state", {"server_args": args}, timeout)
    if refused(answer):
        raise Stop(f"the server refused {json.dumps(args)} (answer {json.dumps(answer)})")


def launch_steps(url: str, timeout: float) -> int | None:
    """The plugin's depth before this run (restored with auto at the end); None without the plugin's state."""
    spec = spec_block(call(url, "/server_info", None, timeout))
    steps = ((spec or {}).get("settings") or {}).get("steps")
    return steps if isinstance(steps, int) else None


class Prompts:
    """Fresh prompts from a seeded generator; none is ever handed out twice in one run."""

    def __init__(self, seed: int, length: int) -> None:
        self._rng, self._length = random.Random(seed), length
        self._seen: set[tuple[int, ...]] = set()

    def take(self, n: int) -> list[list[int]]:
        out: list[list[int]] = []
        while len(out) < n:
            ids = tuple(self._rng.randrange(ID_LOW, ID_HIGH) for _ in range(self._length))
            if ids not in self._seen:
                self._seen.add(ids)
                out.append(list(ids))
        return out


def listing(dirs: list[Path]) -> dict[Path, int]:
    """Every file under the cache dirs with its mtime (ns); a dir that is not there adds nothing."""
    files: dict[Path, int] = {}
    for top in dirs:
        for folder, _, names in os.walk(top):
            for name in names:
                path = Path(folder, name)
                try:
                    files[path] = path.stat().st_mtime_ns
                except OSError:  # removed while we walked (a compile's temporary file)
                    continue
    return files


def kernel_name(path: Path) -> str | None:
    """A compiled kernel's name from a cache file, or None for every other file."""
    if path.suffix == ".so":
        return path.stem
    if path.suffix == ".json" and not path.name.startswith("__grp__"):
        folder = path.parent
        if (folder / f"__grp__{path.name}").exists() or any((folder / (path.stem + s)).exists() for s in COMPILED):
            return path.stem
    return None


def new_kernels(before: dict[Path, int], after: dict[Path, int]) -> list[str]:
    """The names of kernels whose files appeared (or were rewritten) between two listings."""
    names = {kernel_name(p) for p, mtime in after.items() if before.get(p) != mtime}
    return sorted(n for n in names if n)


def burst(url: str, prompts: list[list[int]], new_tokens: int, timeout: float) -> float:
    """Seconds from sending N prompts (one batched /generate) to its answer, one per prompt."""
    params = {"max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True}
    t0 = time.perf_counter()
    answer = call(url, "/generate", {"input_ids": prompts, "sampling_params": params}, timeout)
    if not (isinstance(answer, list) and len(answer) == len(prompts)):
        raise Stop(f"/generate answered {str(answer)[:200]} to a batch of {len(prompts)}")
    return time.perf_counter() - t0


def measure(url: str, state: str, n: int, prompts: Prompts, dirs: list[Path], new_tokens: int,
            timeout: float) -> Row:
    """Two bursts of n in the state set now; the kernels that appeared during each."""
    times: list[float] = []
    kernels: list[list[str]] = []
    for _ in range(2):
        before = listing(dirs)
        times.append(burst(url, prompts.take(n), new_tokens, timeout))
        kernels.append(new_kernels(before, listing(dirs)))
    return Row(state, n, times[0], times[1], kernels[0], kernels[1])


def run(url: str, steps: int | None, states: list[str], buckets: list[int], prompts: Prompts, dirs: list[Path],
        new_tokens: int, timeout: float, emit: Callable[[Row], None]) -> None:
    """Every bucket ascending, every state in it; mode auto (and the launch depth, steps) restored at the end."""
    try:
        for n in buckets:
            for state in states:
                set_state(url, state_args(state), timeout)
                emit(measure(url, state, n, prompts, dirs, new_tokens, timeout))
    finally:
        restore = {"specctl_mode": MODE_CODES["auto"]} | ({} if steps is None else {"specctl_steps": steps})
        try:
            set_state(url, restore, timeout)
        except Stop as exc:
            print(f"first_use: mode auto NOT restored: {exc}", file=sys.stderr)


HEAD = f"{'state':>6} {'batch':>5} {'first s':>9} {'second s':>9} {'excess s':>9}  new kernels"


def line(row: Row) -> str:
    kernels = ";".join(row.kernels_first) or "-"
    if row.kernels_second:
        kernels += f"  (second burst: {';'.join(row.kernels_second)})"
    return (f"{row.state:>6} {row.batch:>5} {row.first_s:>9.3f} {row.second_s:>9.3f} {row.excess_s:>9.3f}"
            f"  {kernels}")


def csv_cells(label: str, row: Row) -> list[str | int]:
    return [label, row.state, row.batch, f"{row.first_s:.4f}", f"{row.second_s:.4f}", f"{row.excess_s:.4f}",
            ";".join(row.kernels_first), ";".join(row.kernels_second)]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--states", required=True, help='e.g. "off 3": off, or a depth forced on')
    p.add_argument("--buckets", required=True, help='batch sizes, e.g. "1 2 4 8"; run ascending')
    p.add_argument("--new-tokens", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--label", required=True)
    p.add_argument("--csv", required=True, type=Path)
    p.add_argument("--append", action="store_true", help="add to the CSV's rows instead of replacing them")
    p.add_argument("--cache-dirs", default="", help="comma-separated JIT cache dirs to watch (missing ones skipped)")
    p.add_argument("--seed", type=int, default=0, help="the prompts' seed: give each run on one server its own")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for each HTTP call (a cold compile is slow)")
    args = p.parse_args(argv)
    args.states = args.states.split()
    for state in args.states:
        try:
            state_args(state)
        except argparse.ArgumentTypeError as exc:
            p.error(str(exc))
    try:
        args.buckets = sorted({int(b) for b in args.buckets.split()})
    except ValueError:
        p.error(f"--buckets must be whole numbers, got {args.buckets!r}")
    if not args.states or not args.buckets or args.buckets[0] < 1:
        p.error("give at least one state and batch sizes of 1 or more")
    if args.new_tokens < 1 or args.prompt_len < 1:
        p.error("--new-tokens and --prompt-len must be 1 or more")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    dirs = [Path(d) for d in args.cache_dirs.split(",") if d]
    url = args.url.rstrip("/")
    try:
        steps = launch_steps(url, args.timeout)  # also the check that the server is there, before anything is set
    except Stop as exc:
        print(f"first_use: {exc}", file=sys.stderr)
        return 2
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    fresh = not (args.append and args.csv.exists() and args.csv.stat().st_size > 0)
    print(f"first_use {args.label}: states {' '.join(args.states)}, buckets {' '.join(map(str, args.buckets))},"
          f" {args.prompt_len} in / {args.new_tokens} out, watching {len(dirs)} cache dirs")
    print(HEAD, flush=True)
    with args.csv.open("w" if fresh else "a", newline="") as fh:
        out = csv.writer(fh)
        if fresh:
            out.writerow(COLUMNS)

        def emit(row: Row) -> None:  # each row at once: a run cut off by the call's limit keeps its rows
            print(line(row), flush=True)
            out.writerow(csv_cells(args.label, row))
            fh.flush()

        try:
            run(url, steps, args.states, args.buckets, Prompts(args.seed, args.prompt_len), dirs,
                args.new_tokens, args.timeout, emit)
        except Stop as exc:
            print(f"first_use: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
