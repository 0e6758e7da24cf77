#!/usr/bin/env python3
"""Wheels for a machine with no network, carried in chunks of a fixed size.

A device call carries at most 64 MiB, the repository included, and the GPU machine
forgets /root 30 s after a call; so the wheels SGLang needs travel as chunk folders,
one a call, back to back. This module is both ends of that trip (standard library
only: it runs on the CPU machine and on the device's bare Python):

  slim SRC_DIR DST_DIR          copy SRC_DIR's wheels to DST_DIR, dropping the files the
                                device never loads (SLIM below; nothing else is changed)
  pack SRC_DIR OUT_DIR MIB [LABEL]
                                pack SRC_DIR's wheels into OUT_DIR/chunk-N/ of at most MIB
                                MiB each (MANIFEST included); a wheel larger than a chunk
                                is cut into parts (as `split -b` would), each in its own
                                chunk; every chunk holds the same MANIFEST
  gather WHEELS_DIR CHUNK...    (device) copy arrived chunks into WHEELS_DIR; say what is
                                still to come (exit 3), or, once all is here, join the
                                parts and check every sha256 (exit 0; exit 1 naming the
                                file on a mismatch, which is removed so it can be re-sent)
  wheels WHEELS_DIR             print the whole wheels' names (for pip install), one a line
  label WHEELS_DIR              print the pack's LABEL (D or C for SGLang 0.5.23)

MANIFEST (text, one record a line, after '#' comments):
  wheel SHA256 BYTES CHUNK NAME            a whole wheel; CHUNK is '-' when it travels in parts
  part  SHA256 BYTES CHUNK NAME OF_WHEEL   a part, in file order (cat them to get OF_WHEEL)
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MIB = 2**20
FORMAT = "wheelpack 1"
# The files the device never loads, per wheel-name prefix (as the 0.5.17 kit slims):
# sglang-kernel: FA3 (flash_ops, most of the wheel), the Blackwell build (sm100/), infllm and
# flashmla; the Hopper build sm90/common_ops stays. xgrammar: its static library.
SLIM = {
    "sglang_kernel-": [r"^sgl_kernel/flash_ops\.", r"^sgl_kernel/sm100/",
                       r"^sgl_kernel/infllm_ops", r"^sgl_kernel/flashmla_ops\."],
    "xgrammar-": [r"^xgrammar/lib/.*\.a$"],
}


class PackError(Exception):
    """A problem the user can act on; printed as one line, never as a traceback."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(MIB), b""):
            h.update(block)
    return h.hexdigest()


# ------------------------------------------------------------------ slim
def slim_one(src: Path, dst: Path, patterns: list[str]) -> None:
    """Copy the wheel without the files matching ``patterns`` (and their RECORD lines)."""
    rx = [re.compile(p) for p in patterns]
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if any(r.search(info.filename) for r in rx):
                continue
            data = zin.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD"):
                keep = [ln for ln in data.decode().splitlines()
                        if not any(r.search(ln.split(",")[0]) for r in rx)]
                data = ("\n".join(keep) + "\n").encode()
            zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)


def slim(src_dir: Path, dst_dir: Path) -> None:
    dst_dir.mkdir(parents=True, exist_ok=True)
    for src in sorted(src_dir.glob("*.whl")):
        dst = dst_dir / src.name
        pats = next((v for k, v in SLIM.items() if src.name.startswith(k)), None)
        if pats is None:
            shutil.copy2(src, dst)
            continue
        slim_one(src, dst, pats)
        print(f"  slimmed {src.name}: {src.stat().st_size / MIB:.1f} MiB -> {dst.stat().st_size / MIB:.1f} MiB")


# ------------------------------------------------------------------ pack
@dataclass
class Item:
    """One file that travels: a whole wheel or one part of a split one."""
    name: str
    size: int
    src: Path
    offset: int = 0          # where a part starts in its wheel
    of_wheel: str = ""       # a part's wheel; "" for a whole wheel
    chunk: int = 0
    sha: str = ""


@dataclass
class Chunk:
    items: list[Item] = field(default_factory=list)
    size: int = 0


def _items(src_dir: Path, cap: int) -> tuple[list[Item], dict[str, tuple[str, int]]]:
    """The files to place (parts of at most ``cap`` bytes for a wheel larger than ``cap``)."""
    items: list[Item] = []
    wheels: dict[str, tuple[str, int]] = {}
    for whl in sorted(src_dir.glob("*.whl")):
        size = whl.stat().st_size
        wheels[whl.name] = (sha256(whl), size)
        if size <= cap:
            items.append(Item(whl.name, size, whl))
            continue
        for i, off in enumerate(range(0, size, cap)):
            items.append(Item(f"{whl.name}.part{i:02d}", min(cap, size - off), whl, off, whl.name))
    if not wheels:
        raise PackError(f"no .whl files in {src_dir}")
    return items, wheels


def _place(items: list[Item], cap: int) -> list[Chunk]:
    """First-fit decreasing; two parts of one wheel never share a chunk."""
    chunks: list[Chunk] = []
    for it in sorted(items, key=lambda i: (-i.size, i.name)):
        for c in chunks:
            clash = it.of_wheel and any(o.of_wheel == it.of_wheel for o in c.items)
            if c.size + it.size <= cap and not clash:
                break
        else:
            c = Chunk()
            chunks.append(c)
        c.items.append(it)
        c.size += it.size
    for n, c in enumerate(chunks, 1):
        for it in c.items:
            it.chunk = n
    return chunks


def _manifest(label: str, items: list[Item], wheels: dict[str, tuple[str, int]], n_chunks: int) -> str:
    parts = [i for i in items if i.of_wheel]
    split = {i.of_wheel for i in parts}
    lines = [f"# {FORMAT} label={label} chunks={n_chunks} wheels={len(wheels)} parts={len(parts)}",
             "# wheel SHA256 BYTES CHUNK NAME | part SHA256 BYTES CHUNK NAME OF_WHEEL (cat parts in order)"]
    whole = {i.name: i for i in items if not i.of_wheel}
    for name, (sha, size) in sorted(wheels.items()):
        chunk = "-" if name in split else str(whole[name].chunk)
        lines.append(f"wheel {sha} {size} {chunk} {name}")
    for p in sorted(parts, key=lambda i: i.name):
        lines.append(f"part {p.sha} {p.size} {p.chunk} {p.name} {p.of_wheel}")
    return "\n".join(lines) + "\n"


def _part_blocks(it: Item) -> Iterator[bytes]:
    """The bytes of a split wheel's part, a MiB at a time (a part is up to a chunk: no whole read)."""
    with it.src.open("rb") as fh:
        fh.seek(it.offset)
        left = it.size
        while left:
            block = fh.read(min(MIB, left))
            if not block:
                raise PackError(f"{it.src} ended {left} bytes before its part {it.name}")
            yield block
            left -= len(block)


def _part_sha(it: Item) -> str:
    h = hashlib.sha256()
    for block in _part_blocks(it):
        h.update(block)
    return h.hexdigest()


def pack(src_dir: Path, out_dir: Path, chunk_mib: float, label: str) -> list[Chunk]:
    """Write OUT_DIR/chunk-N folders, each (MANIFEST included) at most chunk_mib MiB."""
    limit = int(chunk_mib * MIB)
    reserve = 4096  # room for MANIFEST, grown until it fits
    while True:
        cap = limit - reserve
        if cap <= 0:
            raise PackError(f"CHUNK_MIB {chunk_mib} leaves no room beside the MANIFEST ({reserve} bytes)")
        items, wheels = _items(src_dir, cap)
        chunks = _place(items, cap)
        for it in items:
            it.sha = _part_sha(it) if it.of_wheel else wheels[it.name][0]
        text = _manifest(label, items, wheels, len(chunks)).encode()
        if len(text) <= reserve:
            break
        reserve = len(text) + 1024
    if out_dir.exists():
        shutil.rmtree(out_dir)
    for n, c in enumerate(chunks, 1):
        d = out_dir / f"chunk-{n}"
        d.mkdir(parents=True)
        for it in c.items:
            _write(it, d / it.name)
        (d / "MANIFEST").write_bytes(text)
    _table(out_dir, chunks, wheels, limit)
    return chunks


def _write(it: Item, dst: Path) -> None:
    if not it.of_wheel:
        shutil.copy2(it.src, dst)
        return
    with dst.open("wb") as fout:
        for block in _part_blocks(it):
            fout.write(block)


def _table(out_dir: Path, chunks: list[Chunk], wheels: dict[str, tuple[str, int]], limit: int) -> None:
    print(f"  {'chunk':<14} {'files':>5} {'MiB':>7}")
    total = 0
    for n, _c in enumerate(chunks, 1):
        d = out_dir / f"chunk-{n}"
        size = sum(f.stat().st_size for f in d.iterdir())
        total += size
        assert size <= limit, f"{d} is {size} bytes > {limit}"
        print(f"  {out_dir.name + '/' + d.name:<14} {len(list(d.iterdir())) - 1:>5} {size / MIB:>7.1f}")
    n_parts = sum(1 for c in chunks for i in c.items if i.of_wheel)
    print(f"  total: {len(chunks)} chunks, {len(wheels)} wheels ({n_parts} parts), {total / MIB:.1f} MiB")


# ------------------------------------------------------------------ device side
@dataclass
class Manifest:
    label: str
    wheels: list[tuple[str, int, str, str]]          # sha, bytes, chunk, name
    parts: list[tuple[str, int, str, str, str]]      # sha, bytes, chunk, name, of_wheel
    text: str


def read_manifest(path: Path) -> Manifest:
    if not path.is_file():
        raise PackError(f"no MANIFEST in {path.parent} (not a chunk folder made by wheelpack pack)")
    text = path.read_text()
    head = text.splitlines()[0] if text else ""
    if not head.startswith(f"# {FORMAT} "):
        raise PackError(f"{path} is not a '{FORMAT}' MANIFEST")
    label = dict(kv.split("=", 1) for kv in head.split()[3:] if "=" in kv).get("label", "")
    wheels, parts = [], []
    for ln in text.splitlines():
        f = ln.split()
        if not f or f[0].startswith("#"):
            continue
        if f[0] == "wheel" and len(f) == 5:
            wheels.append((f[1], int(f[2]), f[3], f[4]))
        elif f[0] == "part" and len(f) == 6:
            parts.append((f[1], int(f[2]), f[3], f[4], f[5]))
        else:
            raise PackError(f"{path}: unreadable line {ln!r}")
    return Manifest(label, wheels, parts, text)


def _files(m: Manifest) -> list[tuple[str, int, str, str]]:
    """Every file that travels: (sha, bytes, chunk, name)."""
    whole = [w for w in m.wheels if w[2] != "-"]
    return whole + [p[:4] for p in m.parts]


def gather(wheels_dir: Path, chunk_dirs: list[Path]) -> int:
    wheels_dir.mkdir(parents=True, exist_ok=True)
    have = wheels_dir / "MANIFEST"
    for d in chunk_dirs:
        if not d.is_dir():
            raise PackError(f"no such chunk folder: {d} (has it arrived?)")
        m = read_manifest(d / "MANIFEST")
        if have.is_file() and have.read_text() != m.text:
            raise PackError(f"{d} belongs to another pack than the chunks already in {wheels_dir} "
                            f"(MANIFESTs differ); empty {wheels_dir} to start over")
        names = {f[3] for f in _files(m)}
        got = sorted(f.name for f in d.iterdir() if f.name in names)
        for name in got:
            shutil.copyfile(d / name, wheels_dir / name)
        have.write_text(m.text)
        print(f"[install] copied {len(got)} files from {d}")
    m = read_manifest(have)
    missing = [f for f in _files(m) if not (wheels_dir / f[3]).is_file()]
    if missing:
        part_names = {p[3] for p in m.parts}
        n_w = sum(1 for f in missing if f[3] not in part_names)
        chunks = sorted({int(f[2]) for f in missing})
        print(f"[install] still to come: {n_w} wheels and {len(missing) - n_w} parts, "
              f"in chunk(s) {' '.join(f'chunk-{c}' for c in chunks)}")
        for f in missing[:10]:
            print(f"    {f[3]}")
        if len(missing) > 10:
            print(f"    ... and {len(missing) - 10} more")
        return 3
    return _verify(wheels_dir, m)


def _refuse(path: Path, got: str, want: str, chunk: str) -> int:
    path.unlink()
    print(f"[install] REFUSED: sha256 of {path.name} is {got[:16]}..., MANIFEST says {want[:16]}...; "
          f"nothing installed; the file was removed: bring chunk-{chunk} again")
    return 1


def _verify(wheels_dir: Path, m: Manifest) -> int:
    """Check every part, join the parts, check every wheel; 0 if all agree with MANIFEST."""
    for sha, _size, chunk, name, _of in m.parts:
        got = sha256(wheels_dir / name)
        if got != sha:
            return _refuse(wheels_dir / name, got, sha, chunk)
    by_wheel: dict[str, list[str]] = {}
    for p in m.parts:
        by_wheel.setdefault(p[4], []).append(p[3])
    for whl, names in by_wheel.items():
        tmp = wheels_dir / (whl + ".joining")
        with tmp.open("wb") as out:
            for name in sorted(names):
                with (wheels_dir / name).open("rb") as fin:
                    shutil.copyfileobj(fin, out, MIB)
        tmp.replace(wheels_dir / whl)
    for sha, _size, chunk, name in m.wheels:
        got = sha256(wheels_dir / name)
        if got != sha:
            return _refuse(wheels_dir / name, got, sha, chunk)
    print(f"[install] all {len(m.wheels)} wheels here, {len(m.parts)} parts joined, every sha256 agrees with MANIFEST")
    return 0


# ------------------------------------------------------------------ CLI
def main(argv: list[str]) -> int:
    usage = __doc__.split("\n\n")[1] if __doc__ else ""
    try:
        if len(argv) == 3 and argv[0] == "slim":
            slim(Path(argv[1]), Path(argv[2]))
            return 0
        if len(argv) in (4, 5) and argv[0] == "pack":
            pack(Path(argv[1]), Path(argv[2]), float(argv[3]), argv[4] if len(argv) == 5 else "")
            return 0
        if len(argv) >= 3 and argv[0] == "gather":
            return gather(Path(argv[1]), [Path(a) for a in argv[2:]])
        if len(argv) == 2 and argv[0] == "wheels":
            print("\n".join(w[3] for w in read_manifest(Path(argv[1]) / "MANIFEST").wheels))
            return 0
        if len(argv) == 2 and argv[0] == "label":
            print(read_manifest(Path(argv[1]) / "MANIFEST").label)
            return 0
    except (PackError, OSError, ValueError) as exc:
        print(f"[wheelpack] {exc}", file=sys.stderr)
        return 1
    print(f"usage: wheelpack.py COMMAND ...\n{usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
