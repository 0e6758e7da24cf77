#!/usr/bin/env bash
# install_0523.sh - run ON THE GPU machine, from the repo root, each time a chunk made by
# fetch_wheels_0523.sh has arrived:
#     bash bench/gpu/install_0523.sh .wheelhouse523/D/chunk-1 [.wheelhouse523/D/chunk-2 ...]
# Copies the chunk's files to WHEELS_DIR (/root/wheels523, which lasts only while the machine
# stays warm: bring the chunks back to back) and says how many wheels and parts are still to
# come. When all have arrived: joins the split wheels, checks every sha256 against the MANIFEST
# (a mismatch: refused, the file named and removed, nothing installed), installs them with
#     pip install --no-index --no-deps --no-compile --target SITE        (SITE: /root/site523)
# and checks on the GPU (CHECK=0 skips it): torch's version, sgl_kernel loads (path D: with
# SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1), its rmsnorm against a reference, sglang's version,
# and `import sglang.srt.entrypoints.http_server`; one [check] line each.
# Afterwards: export PYTHONPATH=/root/site523 (and, for path D, SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1),
# or SITE=/root/site523 for bench/gpu/run_fast_off.sh.
# Exit 0: copied (and, once complete, installed and checked); 1: refused or the install or a
# check failed; 2: usage.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
W=${WHEELS_DIR:-/root/wheels523}
SITE=${SITE:-/root/site523}
PY=${PYTHON:-python3}
CHECK=${CHECK:-1}
[ $# -ge 1 ] || { echo "usage: $0 CHUNK_DIR [CHUNK_DIR ...]" >&2; exit 2; }

rc=0
"$PY" "$HERE/wheelpack.py" gather "$W" "$@" || rc=$?
case $rc in
  0) ;;
  3) exit 0 ;;   # still to come: the next call brings them
  *) exit 1 ;;
esac
LABEL=$("$PY" "$HERE/wheelpack.py" label "$W")
PACK="$LABEL $(sha256sum "$W/MANIFEST" | cut -c1-16)"   # what .installed records: this pack and no other

if [ -f "$SITE/.installed" ] && [ "$(cat "$SITE/.installed")" != "$PACK" ]; then
  echo "[install] $SITE holds another pack's install ($(cat "$SITE/.installed"), not $PACK): remove it first (rm -rf $SITE)"
  exit 1
fi
if [ ! -f "$SITE/.installed" ]; then
  mapfile -t WHEELS < <("$PY" "$HERE/wheelpack.py" wheels "$W")
  echo "[install] installing ${#WHEELS[@]} wheels (path $LABEL) into $SITE"
  t0=$(date +%s)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "${WHEELS[@]/#/$W/}" || { echo "[install] pip install failed"; exit 1; }
  echo "$PACK" > "$SITE/.installed"
  echo "[install] installed in $(( $(date +%s) - t0 )) s: $(du -sh "$SITE" | cut -f1)"
fi
fit_site() {  # what the install needs before SGLang 0.5.23 starts (docs/benchmarks.md, "First sitting")
  # Neither pack carries sgl-flash-mla (MLA models only), yet 0.5.23's EAGLE v2 worker imports its FlashMLA
  # backend while capturing graphs, whatever the model: a stand-in that raises if ever called.
  if [ ! -e "$SITE/flash_mla" ]; then
    cp -r "$HERE/stubs/flash_mla" "$SITE/" && echo "[install] flash_mla: a stand-in (bench/gpu/stubs), raises if called"
  fi
  : > "$SITE/bench.env"
  [ "$LABEL" = D ] || return 0
  # Path D keeps torch 2.11 under wheels built for 2.14. deep_gemm's _C.so then fails with OSError, which the
  # import guards (ImportError) let through: set aside, it is absent, and SGLang runs without it (fp8 only).
  if [ -d "$SITE/deep_gemm" ]; then
    mkdir -p "$SITE/.set-aside" && rm -rf "$SITE/.set-aside/deep_gemm" && mv "$SITE/deep_gemm" "$SITE/.set-aside/"
    echo "[install] deep_gemm set aside ($SITE/.set-aside): its library needs torch 2.14"
  fi
  # The Rust radix TreeCore links torch 2.14's C++ API too: under 2.11 it read an int64 tensor as Int16 on the
  # first prefill. SGLang's Python TreeCore stands in (slower on the scheduler's CPU: see the doc).
  printf '%s\n' '# path D (torch 2.11 under 0.5.23): written by install_0523.sh, read by run_fast_off.sh' \
    SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1 SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python \
    SGLANG_ENABLE_JIT_DEEPGEMM=0 > "$SITE/bench.env"
  echo "[install] settings for path D in $SITE/bench.env: $(grep -v '^#' "$SITE/bench.env" | tr '\n' ' ')"
}
fit_site

if [ "$CHECK" = 0 ]; then
  echo "[install] CHECK=0: the GPU check is skipped"
  exit 0
fi

export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
set -a; . "$SITE/bench.env"; set +a
WANT_TORCH=$(sed -n 's/^wheel [0-9a-f]* [0-9]* [0-9-]* torch-\([^-]*\)-.*/\1/p' "$W/MANIFEST")
SITE_DIR=$SITE WANT_TORCH=${WANT_TORCH:-2.11.0} "$PY" - <<'EOF'
import importlib.metadata as md
import os
import site
import sys
import traceback

site.addsitedir(os.environ["SITE_DIR"])  # the .pth files, as the server's run_fast_off.sh runs them

failed = []


def check(what, fn):
    """One [check] line per step; a failure prints its last traceback line and the rest go on."""
    try:
        print(f"[check] {what}: {fn()}", flush=True)
    except BaseException as exc:  # a broken extension can raise anything, SystemExit included
        failed.append(what)
        tail = traceback.format_exception_only(type(exc), exc)[-1].strip()
        print(f"[check] {what}: FAILED {tail}", flush=True)


def torch_version():
    import torch
    want = os.environ["WANT_TORCH"]
    got = torch.__version__
    ok = got.split("+")[0] == want
    where = os.path.dirname(torch.__file__)
    msg = f"{got} (want {want}) cuda {torch.version.cuda} {torch.cuda.get_device_name(0)} from {where}"
    if not ok:
        raise RuntimeError(msg)
    return msg


def kernel_loads():
    import sgl_kernel
    return f"sglang-kernel {md.version('sglang-kernel')} ops from {sgl_kernel.common_ops.__file__}"


def rmsnorm():
    import sgl_kernel
    import torch
    x = torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    y = sgl_kernel.rmsnorm(x, w, 1e-6)
    ref = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
    err = ((y.float() - ref).norm() / ref.norm()).item()
    if not err < 1e-2:
        raise RuntimeError(f"rel err {err:.2e} against the reference")
    return f"rel err {err:.2e} OK"


def sglang_version():
    import sglang
    return f"{sglang.__version__} (dist {md.version('sglang')}) from {os.path.dirname(sglang.__file__)}"


def server_import():
    import sglang.srt.entrypoints.http_server  # noqa: F401  (the whole server import chain)
    return "OK"


def later_imports():
    import cutlass  # noqa: F401  (0.5.23's dual GEMM on a Llama MLP; behind a .pth)
    import sglang.srt.layers.attention.flashmla_backend  # noqa: F401  (the EAGLE v2 worker's graph capture)
    return "cutlass, flashmla_backend OK"


print("[check] python", sys.version.split()[0], "| SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK =",
      os.environ.get("SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK", "(unset)"), flush=True)
check("torch", torch_version)
check("sgl_kernel", kernel_loads)
check("sgl_kernel.rmsnorm", rmsnorm)
check("sglang", sglang_version)
check("import sglang.srt.entrypoints.http_server", server_import)
check("imports a server start makes later", later_imports)
for d in ["transformers", "flashinfer-python", "xgrammar", "triton", "apache-tvm-ffi"]:
    check(d, lambda d=d: md.version(d))
print(f"[check] {'FAILED: ' + ', '.join(failed) if failed else 'all OK'}", flush=True)
sys.exit(1 if failed else 0)
EOF
