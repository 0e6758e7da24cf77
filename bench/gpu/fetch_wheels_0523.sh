#!/usr/bin/env bash
# fetch_wheels_0523.sh - run on the CPU machine (pip + the package registry), from the repo root:
#     PATH_KIND=D CHUNK_MIB=48 bash bench/gpu/fetch_wheels_0523.sh
#     PATH_KIND=C CHUNK_MIB=48 bash bench/gpu/fetch_wheels_0523.sh
#     PATH_KIND=D CHUNK_MIB=48 bash bench/gpu/fetch_wheels_0523.sh --pack-only DIR   (no download:
#         pack DIR's wheels as they are)
# The wheels SGLang 0.5.23 needs on the GPU machine's image (Python 3.12, manylinux x86_64; the
# image's packages: /work/.library/device/KINDS.md) that the image lacks or holds at another
# version, for one of the two paths of docs/sglang-plugin.md:
#   D  torch 2.11.0 stays; the 0.5.17 kit's sglang-kernel 0.4.5, run with
#      SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1                                     (94 wheels)
#   C  torch 2.14.1, triton 3.8.0, nvidia-nccl-cu13 2.30.7, torchvision 0.29.1, sglang-kernel
#      0.4.10; cuDNN, cuSPARSELt and the CUDA 13.0.3 set left at the image's versions (98 wheels)
# Both leave out the 20 wheels a Llama-8B proof does not import (LEFT_OUT below). Slims
# sglang-kernel as the 0.5.17 kit does (bench/gpu/wheelpack.py, SLIM) and packs
# .wheelhouse523/$PATH_KIND/chunk-N/ (git-ignored), each at most CHUNK_MIB MiB, a wheel larger
# than that cut into parts; every chunk holds a MANIFEST with every wheel's sha256. On the GPU
# machine: bench/gpu/install_0523.sh (docs/sglang-plugin.md, "The device calls").
# Downloads go to .wheelhouse523/dl/ (kept: D and C share 93 wheels, and a second run is quick).
set -euo pipefail

ROOT=${REPO:-$(git rev-parse --show-toplevel 2>/dev/null || pwd)}
WH=${WHEELHOUSE:-$ROOT/.wheelhouse523}
PATH_KIND=${PATH_KIND:-D}
CHUNK_MIB=${CHUNK_MIB:-48}
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case $PATH_KIND in D|C) ;; *) echo "PATH_KIND must be D or C, got '$PATH_KIND'" >&2; exit 2 ;; esac

if [ "${1:-}" = --pack-only ]; then
  [ $# -eq 2 ] && [ -d "$2" ] || { echo "usage: $0 --pack-only DIR_OF_WHEELS" >&2; exit 2; }
  echo "[fetch] packing $2 into $WH/$PATH_KIND (chunks of <= $CHUNK_MIB MiB)"
  exec "$PY" "$HERE/wheelpack.py" pack "$2" "$WH/$PATH_KIND" "$CHUNK_MIB" "$PATH_KIND"
fi
[ $# -eq 0 ] || { echo "usage: $0 [--pack-only DIR]" >&2; exit 2; }

# Exact pins, from sglang 0.5.23's METADATA and pip's resolution for the device (2026-12-01),
# minus what the image holds (by name; at the right version where known), minus LEFT_OUT.
COMMON=(
  sglang==0.5.23 transformers==5.19.0 flashinfer-python==0.7.2 xgrammar==0.2.7
  apache-tvm-ffi==0.1.11 torch-c-dlpack-ext==0.1.5 torch-memory-saver==0.0.10
  nvidia-cutlass-dsl==4.8.0 nvidia-cutlass-dsl-libs-base==4.8.0 nvidia-cutlass-dsl-libs-core==4.8.0
  nvidia-cutlass-dsl-libs-cu13==4.8.0 nvidia-cudnn-frontend==1.32.0 nvidia-cuda-cccl==13.3.5.0.6
  cuda-python==13.4.4 cuda-tile==1.7.0 nccl-extensions==0.1.0 nccl4py==0.6.0
  sgl-deep-gemm==0.2.3.post2 flash-attn-4==4.0.0b36 quack-kernels==0.6.5 humming-kernels==0.1.12
  kernels==0.14.1 kernels-data==0.16.2 llguidance==1.9.1 outlines==0.1.11 outlines-core==0.1.26
  airportsdata==20261103 interegular==0.3.3 lark==1.3.1 nest-asyncio==1.6.0 diskcache==5.6.3
  fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 python-multipart==0.0.34 watchfiles==1.3.0
  opentelemetry-api==1.45.2 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
  typing-inspection==0.4.5 orjson==3.13.0 pyzmq==27.3.0 setproctitle==1.3.8 msgspec==0.23.0
  pybase64==1.5.1 partial-json-parser==0.2.1.1.post7 dill==0.4.1 multiprocess==0.70.19
  loguru==0.7.3 openai==2.8.0 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1 anthropic==2.15.0
  docstring-parser==0.18.0 openai-harmony==0.0.4 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
  blobfile==3.0.0 pycryptodomex==3.24.2 compressed-tensors==0.18.0 gguf==0.19.0 datasets==5.2.0
  smg-grpc-servicer==0.14.1 smg-grpc-proto==0.4.28 grpcio-health-checking==1.85.1
  grpcio-reflection==1.85.1 soundfile==0.13.1 cffi==2.1.1 pycparser==3.12 easydict==1.14
  zstandard==0.25.0 tomlkit==0.15.2
  ipython==9.18.1 ipython-pygments-lexers==1.1.1 jedi==0.20.1 parso==0.8.7 matplotlib-inline==0.2.2
  pexpect==4.9.0 ptyprocess==0.7.0 prompt-toolkit==3.0.53 wcwidth==0.9.4 stack-data==0.6.3
  executing==2.3.0 asttokens==3.0.2 pure-eval==0.2.4 traitlets==5.16.1
)
# Left out of both (resolved by pip, not imported on a Llama-3.1-8B + EAGLE-3 launch; the doc's table):
LEFT_OUT=(tilelang z3-solver nvidia-cutlass-dsl-libs-cu12 nvidia-nvvm nvidia-cuda-nvcc nvidia-cuda-crt
  nvidia-mathdx sgl-deep-ep deepseek-recipe torchcodec sgl-flash-mla mistral-common pycountry
  pydantic-extra-types modelscope modelscope-hub cryptography nvshmem4py-cu13 tml-renderers py-spy)
C_ONLY=(torch==2.14.1 triton==3.8.0 nvidia-nccl-cu13==2.30.7 torchvision==0.29.1 sglang-kernel==0.4.10)
D_ONLY=(sglang-kernel==0.4.5)
if [ "$PATH_KIND" = C ]; then PKGS=("${COMMON[@]}" "${C_ONLY[@]}"); else PKGS=("${COMMON[@]}" "${D_ONLY[@]}"); fi

PLAT=(--only-binary=:all: --no-deps --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none)
for m in $(seq 39 -1 5); do PLAT+=(--platform "manylinux_2_${m}_x86_64"); done  # pip matches N exactly
PLAT+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64
       --platform linux_x86_64 --platform any)

mkdir -p "$WH/dl"
echo "[fetch] path $PATH_KIND: downloading ${#PKGS[@]} wheels into $WH/dl (left out: ${#LEFT_OUT[@]})"
"$PY" -m pip download -q "${PLAT[@]}" -d "$WH/dl" "${PKGS[@]}" 2>&1 | { grep -v "^WARNING: Location" || true; }

# this path's wheels only (dl/ holds both paths'), named as pip saved them
sel=$WH/sel-$PATH_KIND
rm -rf "$sel" && mkdir -p "$sel"
"$PY" - "$WH/dl" "$sel" "${PKGS[@]}" <<'EOF'
import os, re, sys
dl, sel, pkgs = sys.argv[1], sys.argv[2], sys.argv[3:]
norm = lambda s: re.sub(r"[-_.]+", "_", s).lower()
files = os.listdir(dl)
for spec in pkgs:
    name, ver = spec.split("==")
    hit = [f for f in files if f.endswith(".whl") and norm(f.split("-")[0]) == norm(name) and f.split("-")[1] == ver]
    if len(hit) != 1:
        sys.exit(f"[fetch] {spec}: expected one wheel in {dl}, found {hit}")
    os.symlink(os.path.join(dl, hit[0]), os.path.join(sel, hit[0]))
print(f"[fetch] {len(pkgs)} wheels selected")
EOF

echo "[fetch] slimming (wheelpack.py SLIM: sglang-kernel's FA3, sm100/, infllm, flashmla; xgrammar's .a)"
rm -rf "$WH/slim-$PATH_KIND"
"$PY" "$HERE/wheelpack.py" slim "$sel" "$WH/slim-$PATH_KIND"
rm -rf "$sel"

echo "[fetch] packing into $WH/$PATH_KIND (chunks of <= $CHUNK_MIB MiB, MANIFEST included)"
"$PY" "$HERE/wheelpack.py" pack "$WH/slim-$PATH_KIND" "$WH/$PATH_KIND" "$CHUNK_MIB" "$PATH_KIND"
rm -rf "$WH/slim-$PATH_KIND"
echo "[fetch] done. One chunk a device call, back to back, each with .whl; on the machine:"
echo "        bash bench/gpu/install_0523.sh .wheelhouse523/$PATH_KIND/chunk-N   (docs/sglang-plugin.md)"
