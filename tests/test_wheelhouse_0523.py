"""The SGLang 0.5.23 wheelhouse: packed here into chunks, gathered and installed as on the GPU machine.

bench/gpu/fetch_wheels_0523.sh packs wheels into chunk folders that travel one device
call each; bench/gpu/install_0523.sh runs on the device after every call. A mistake
there costs a whole session (the machine forgets /root 30 s after a call), so these
tests run the real scripts here, on small real wheels, with a chunk size small enough
that one wheel has to travel in parts. No network: pip installs with --no-index.
"""

from __future__ import annotations

import base64
import hashlib
import os
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # tests a bench/ script: the second tier

REPO = Path(__file__).resolve().parent.parent
FETCH = REPO / "bench" / "gpu" / "fetch_wheels_0523.sh"
INSTALL = REPO / "bench" / "gpu" / "install_0523.sh"
CHUNK_MIB = "0.25"   # 262,144 bytes a chunk
LIMIT = int(float(CHUNK_MIB) * 2**20)


def make_wheel(folder: Path, name: str, version: str, payload: bytes) -> Path:
    """A real, installable pure-Python wheel holding module ``name`` with ``payload`` as data."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n".encode(),
        f"{name}/blob.bin": payload,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    whl = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_STORED) as zf:  # stored: the size is the payload's
        for path, data in files.items():
            zf.writestr(path, data)
    return whl


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    """Three wheels: one of 700 kB (travels in three parts), two small ones."""
    src = tmp_path / "src"
    src.mkdir()
    rnd = random.Random(523)
    make_wheel(src, "bigpkg", "1.0", rnd.randbytes(700_000))
    make_wheel(src, "smallpkg", "2.0", rnd.randbytes(90_000))
    make_wheel(src, "tinypkg", "3.0", b"x" * 100)
    return src


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, **env})


def pack(src: Path, tmp_path: Path, kind: str = "D") -> Path:
    res = run(["bash", str(FETCH), "--pack-only", str(src)],
              {"WHEELHOUSE": str(tmp_path / "wh"), "PATH_KIND": kind, "CHUNK_MIB": CHUNK_MIB})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "total: " in res.stdout and "3 wheels (3 parts)" in res.stdout, res.stdout
    return tmp_path / "wh" / kind


def install(tmp_path: Path, *chunks: Path, check: str = "0") -> subprocess.CompletedProcess[str]:
    return run(["bash", str(INSTALL), *map(str, chunks)],
               {"WHEELS_DIR": str(tmp_path / "wheels"), "SITE": str(tmp_path / "site"), "CHECK": check,
                "PYTHON": sys.executable})


def chunks_of(out: Path) -> list[Path]:
    return sorted(out.glob("chunk-*"), key=lambda d: int(d.name.split("-")[1]))


def test_chunks_never_exceed_the_limit_and_each_part_travels_alone(wheels: Path, tmp_path: Path) -> None:
    out = pack(wheels, tmp_path)
    chunks = chunks_of(out)
    assert len(chunks) >= 3
    for d in chunks:
        assert sum(f.stat().st_size for f in d.iterdir()) <= LIMIT, d
        assert (d / "MANIFEST").read_text() == (chunks[0] / "MANIFEST").read_text()
        assert len([f for f in d.iterdir() if ".whl.part" in f.name]) <= 1, sorted(os.listdir(d))
    manifest = (chunks[0] / "MANIFEST").read_text()
    big = hashlib.sha256((wheels / "bigpkg-1.0-py3-none-any.whl").read_bytes()).hexdigest()
    assert f"wheel {big} " in manifest and " - bigpkg-1.0-py3-none-any.whl" in manifest
    assert manifest.count("\npart ") == 3


def test_a_split_wheel_reassembles_byte_identical_and_installs(wheels: Path, tmp_path: Path) -> None:
    chunks = chunks_of(pack(wheels, tmp_path))
    for i, d in enumerate(chunks):
        res = install(tmp_path, d)
        assert res.returncode == 0, res.stdout + res.stderr
        if i < len(chunks) - 1:  # "still to come" until the last chunk has arrived
            assert "still to come" in res.stdout and "installing" not in res.stdout, res.stdout
            assert not (tmp_path / "site").exists()
    assert "still to come" not in res.stdout
    assert "every sha256 agrees" in res.stdout and "installing 3 wheels (path D)" in res.stdout, res.stdout
    for whl in wheels.iterdir():
        assert (tmp_path / "wheels" / whl.name).read_bytes() == whl.read_bytes()
    site = tmp_path / "site"
    blob = zipfile.ZipFile(wheels / "bigpkg-1.0-py3-none-any.whl").read("bigpkg/blob.bin")
    assert (site / "bigpkg" / "blob.bin").read_bytes() == blob
    assert (site / "tinypkg" / "__init__.py").read_text() == "VERSION = '3.0'\n"
    assert "CHECK=0" in res.stdout


def test_still_to_come_names_what_and_where(wheels: Path, tmp_path: Path) -> None:
    chunks = chunks_of(pack(wheels, tmp_path))
    res = install(tmp_path, chunks[0])
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if "still to come" in ln)
    assert "chunk-1" not in line and f"chunk-{len(chunks)}" in line, line
    res = install(tmp_path, *chunks[1:])  # several chunks in one call
    assert "installing 3 wheels" in res.stdout, res.stdout


def test_a_corrupted_part_is_refused_by_name_and_nothing_installed(wheels: Path, tmp_path: Path) -> None:
    chunks = chunks_of(pack(wheels, tmp_path))
    part = next(f for d in chunks for f in d.iterdir() if f.name.endswith(".whl.part01"))
    data = bytearray(part.read_bytes())
    data[1000] ^= 0xFF
    part.write_bytes(bytes(data))
    res = install(tmp_path, *chunks)
    assert res.returncode == 1
    assert f"REFUSED: sha256 of {part.name}" in res.stdout and "nothing installed" in res.stdout, res.stdout
    assert not (tmp_path / "site").exists()
    # the bad part was removed: it is "still to come" until a good copy arrives
    good = tmp_path / "good"
    shutil.copytree(part.parent, good)
    data[1000] ^= 0xFF
    (good / part.name).write_bytes(bytes(data))
    res = install(tmp_path, good)
    assert res.returncode == 0 and "installing 3 wheels" in res.stdout, res.stdout + res.stderr


def test_a_chunk_of_another_pack_is_refused(wheels: Path, tmp_path: Path) -> None:
    d_chunks = chunks_of(pack(wheels, tmp_path, "D"))
    c_chunks = chunks_of(pack(wheels, tmp_path, "C"))
    assert install(tmp_path, d_chunks[0]).returncode == 0
    res = install(tmp_path, c_chunks[1])
    assert res.returncode == 1 and "belongs to another pack" in res.stderr, res.stdout + res.stderr
    assert not (tmp_path / "site").exists()


def test_bad_input_gets_one_line(tmp_path: Path) -> None:
    res = install(tmp_path, tmp_path / "nope")
    assert res.returncode == 1 and "no such chunk folder" in res.stderr and "Traceback" not in res.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    res = run(["bash", str(FETCH), "--pack-only", str(empty)], {"WHEELHOUSE": str(tmp_path / "wh")})
    assert res.returncode == 1 and "no .whl files" in res.stderr and "Traceback" not in res.stderr
    res = run(["bash", str(FETCH)], {"PATH_KIND": "E"})
    assert res.returncode == 2 and "PATH_KIND must be D or C" in res.stderr


def test_slim_drops_fa3_and_keeps_the_hopper_ops(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    whl = src / "sglang_kernel-0.4.5-cp310-abi3-manylinux2014_x86_64.whl"
    names = ["sgl_kernel/__init__.py", "sgl_kernel/flash_ops.abi3.so", "sgl_kernel/sm100/common_ops.abi3.so",
             "sgl_kernel/sm90/common_ops.abi3.so", "sgl_kernel/infllm_ops.abi3.so",
             "sgl_kernel/flashmla_ops.abi3.so", "sglang_kernel-0.4.5.dist-info/RECORD"]
    with zipfile.ZipFile(whl, "w") as zf:
        for n in names[:-1]:
            zf.writestr(n, b"x")
        zf.writestr(names[-1], "".join(f"{n},sha256=x,1\n" for n in names[:-1]))
    res = subprocess.run([sys.executable, str(REPO / "bench" / "gpu" / "wheelpack.py"), "slim", str(src), str(dst)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    with zipfile.ZipFile(dst / whl.name) as zf:
        kept = set(zf.namelist())
        record = zf.read(names[-1]).decode()
    assert kept == {"sgl_kernel/__init__.py", "sgl_kernel/sm90/common_ops.abi3.so", names[-1]}
    assert "flash_ops" not in record and "sm90/common_ops" in record


def test_an_install_of_another_pack_is_not_taken_for_this_one(wheels: Path, tmp_path: Path) -> None:
    """Path C after path D on one machine: the C chunks must not find D's install and skip their own."""
    d_chunks = chunks_of(pack(wheels, tmp_path, "D"))
    assert "installing 3 wheels (path D)" in install(tmp_path, *d_chunks).stdout
    c_chunks = chunks_of(pack(wheels, tmp_path, "C"))
    shutil.rmtree(tmp_path / "wheels")  # as the doc's first C call does; the site stays
    res = install(tmp_path, *c_chunks)
    assert res.returncode == 1 and "holds another pack's install (D " in res.stdout, res.stdout + res.stderr
    shutil.rmtree(tmp_path / "site")
    res = install(tmp_path, *c_chunks)
    assert res.returncode == 0 and "installing 3 wheels (path C)" in res.stdout, res.stdout + res.stderr


KERNEL_OPS = REPO / "bench" / "gpu" / "kernel_ops.py"


def ops_tool(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(KERNEL_OPS), *argv], capture_output=True, text=True, timeout=120)


def fake_library(path: Path, *schemas: str) -> Path:
    """Bytes shaped like a shared library: binary noise with NUL-terminated schema strings among other strings."""
    rnd = random.Random(path.name)
    blob = bytearray(rnd.randbytes(2000))
    for s in ("GLIBC_2.2.5", "sgl_kernel", *schemas, "std::vector<int> -> nothing"):
        blob += b"\0" + s.encode() + b"\0" + rnd.randbytes(50)
    path.write_bytes(bytes(blob))
    return path


def test_kernel_ops_schemas_names_removed_added_and_changed_ops(tmp_path: Path) -> None:
    old = fake_library(tmp_path / "old.so", "rmsnorm(Tensor! output, Tensor input, float eps) -> ()",
                       "verify_tree_greedy(Tensor! predicts, Tensor candidates) -> ()",
                       "silu_and_mul(Tensor! out,\n   Tensor input) -> ()")
    new = fake_library(tmp_path / "new.so", "rmsnorm(Tensor! output, Tensor input, float eps, bool enable_pdl) -> ()",
                       "get_device_accessible_ptr(Tensor tensor, int device_index) -> int",
                       "silu_and_mul(Tensor! out, Tensor input) -> ()")
    res = ops_tool("schemas", str(old), str(new))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "removed  verify_tree_greedy(Tensor! predicts, Tensor candidates) -> ()" in lines
    assert "added    get_device_accessible_ptr(Tensor tensor, int device_index) -> int" in lines
    assert "changed  rmsnorm(Tensor! output, Tensor input, float eps) -> ()" in lines
    assert lines[-1] == "# unchanged: 1"  # silu_and_mul: the same once whitespace is normalised


def test_kernel_ops_uses_finds_unguarded_imports_of_what_the_old_kernel_lacks(tmp_path: Path) -> None:
    for ver, extra in (("old", ""), ("new", "def new_op(x):\n    pass\n")):
        pkg = tmp_path / ver / "sgl_kernel"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(f"def rmsnorm(x, w, eps):\n    pass\n{extra}")
        (pkg / "sm90").mkdir()
        fake_library(pkg / "sm90" / "common_ops.abi3.so")
    srt = tmp_path / "sg" / "sglang" / "srt" / "entrypoints"
    srt.mkdir(parents=True)
    (srt / "http_server.py").write_text("from sgl_kernel import rmsnorm\nfrom sgl_kernel import new_op\n")
    (srt / "guarded.py").write_text("try:\n    from sgl_kernel import new_op\nexcept ImportError:\n    new_op = None\n")
    res = ops_tool("uses", str(tmp_path / "sg"), str(tmp_path / "old"), str(tmp_path / "new"))
    assert res.returncode == 0, res.stderr
    assert "imports of a name new has and old lacks: 2" in res.stdout
    assert ("ON  sglang/srt/entrypoints/http_server.py:2 from sgl_kernel import new_op "
            "[unguarded, module level]") in res.stdout
    guarded = "off sglang/srt/entrypoints/guarded.py:2 from sgl_kernel import new_op [try/except ImportError]"
    assert guarded in res.stdout


@pytest.mark.parametrize("kind", ["D", "C"])
def test_the_install_fits_the_site_for_a_server_start(tmp_path: Path, kind: str) -> None:
    # Found on the H200: under torch 2.11 (path D) deep_gemm's library raised OSError on import, which
    # SGLang's guards let through, and the Rust TreeCore misread int64 tensors; neither pack carries
    # sgl-flash-mla, which the EAGLE v2 worker imports at graph capture.
    src = tmp_path / "src"
    src.mkdir()
    make_wheel(src, "deep_gemm", "2.3", random.Random(2).randbytes(700_000))  # travels in three parts
    make_wheel(src, "tinypkg", "3.0", b"x" * 100)
    make_wheel(src, "smallpkg", "2.0", random.Random(1).randbytes(90_000))
    for d in chunks_of(pack(src, tmp_path, kind)):
        res = install(tmp_path, d)
        assert res.returncode == 0, res.stdout + res.stderr
    site = tmp_path / "site"
    settings = (site / "bench.env").read_text()
    stub = subprocess.run([sys.executable, "-c", "import flash_mla; flash_mla.flash_mla_with_kvcache()"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(site)})
    assert "NotImplementedError: flash_mla is a stand-in" in stub.stderr, stub.stderr
    if kind == "D":
        assert not (site / "deep_gemm").exists() and (site / ".set-aside" / "deep_gemm" / "__init__.py").exists()
        assert "deep_gemm set aside" in res.stdout
        for line in ("SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1", "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python"):
            assert line in settings.splitlines() and line in res.stdout
    else:  # torch 2.14 travels: every library loads, and no setting is needed
        assert (site / "deep_gemm" / "__init__.py").exists() and "set aside" not in res.stdout
        assert settings == ""
    again = install(tmp_path, d)  # a later call on the same machine: the same site, unharmed
    assert again.returncode == 0 and (site / "bench.env").read_text() == settings
