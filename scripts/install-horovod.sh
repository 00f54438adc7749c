#!/usr/bin/env bash
# Horovod 0.28.1 (its last release) built into the project's venv against the torch installed there
# (`make horovod`). Gloo controller, no MPI.
#
# Patched before the build:
# - the release compiles its PyTorch extension as C++14; torch's headers need C++17 (C++20 from torch 2.14 on):
#   the two CMAKE_CXX_STANDARD lines are raised to what the installed torch's headers ask for;
# - a process set's Gloo context (the global one's included) takes the interface HOROVOD_GLOO_IFACE names;
# - where torch sees no GPU, the CPU extension, even beside a CUDA build of torch and a CUDA toolkit (Horovod
#   would compile CUDA kernels it cannot use, and fails where the toolkit lacks its runtime). Where torch sees a
#   GPU: NCCL operations (HOROVOD_NCCL_HOME, else the nvidia-nccl package torch brings).
# The wheel is cached outside the checkout, keyed by the Horovod version, this patch set, the torch version and
# CPU / CUDA (LBSCALE_HOROVOD_CACHE, default ~/.cache/lbscale/horovod): a second venv on the machine installs it
# in seconds. A Horovod this script did not install (a cluster's module) is left as it is; `lbscale doctor` says
# which it finds.
#
#   scripts/install-horovod.sh [PYTHON]     (PYTHON: the venv's interpreter, default .venv/bin/python)
set -euo pipefail
PY=${1:-.venv/bin/python}
VERSION=0.28.1
CACHE=${LBSCALE_HOROVOD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lbscale/horovod}

die() { echo "install-horovod: $*" >&2; exit 2; }
test -x "$PY" || die "no Python at $PY (run make venv first)"
TORCH=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) || die "torch is not importable from $PY"
for tool in cmake g++ make; do
  command -v "$tool" >/dev/null || die "$tool is needed to build Horovod (Debian: apt-get install cmake g++ make)"
done
CUDA=cpu
"$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && CUDA=cuda
PATCHES=2  # the build's own revision: a changed patch set builds a new wheel
KEY="horovod-$VERSION-p$PATCHES-torch-${TORCH//+/_}-$CUDA"
MARK="$(dirname "$(dirname "$PY")")/.lbscale-horovod"  # which build this script installed in the venv
if "$PY" -c 'import horovod.torch' 2>/dev/null; then
  if [ ! -e "$MARK" ]; then
    echo "install-horovod: a Horovod not built here is importable from $PY (a cluster module?): kept as it is"
    exit 0
  elif [ "$(cat "$MARK")" = "$KEY" ]; then
    echo "install-horovod: Horovod $VERSION ($KEY) is installed in $PY's venv already"
    exit 0
  fi
fi
# Horovod's own requirements, from a cached wheel as for a build (its wheel goes in without them)
"$PY" -m pip install -q cloudpickle psutil pyyaml packaging || die "could not install Horovod's requirements"
mkdir -p "$CACHE/$KEY"
WHEEL=$(ls "$CACHE/$KEY"/horovod-*.whl 2>/dev/null | head -1 || true)
if [ -z "$WHEEL" ]; then
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
  "$PY" -m pip download -q --no-deps --no-binary :all: "horovod==$VERSION" -d "$WORK" \
    || die "could not download the horovod $VERSION sdist from the package index"
  tar -xzf "$WORK/horovod-$VERSION.tar.gz" -C "$WORK"
  SRC="$WORK/horovod-$VERSION"
  STD=17  # what torch's headers ask for: C++20 where they say so (torch 2.14 on), else C++17
  grep -rqs "C++20 or later" "$("$PY" -c 'import torch.utils.cpp_extension as e; print(e.include_paths()[0])')/ATen/ATen.h" \
    && STD=20
  sed -i "s/^set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD $STD)/" "$SRC/CMakeLists.txt"
  sed -i "s/^\( *\)set(CMAKE_CXX_STANDARD 14)/\1set(CMAKE_CXX_STANDARD $STD)/" "$SRC/horovod/torch/CMakeLists.txt"
  grep -q 'CMAKE_CXX_STANDARD 14' "$SRC/CMakeLists.txt" "$SRC/horovod/torch/CMakeLists.txt" \
    && die "the C++$STD patch did not apply to the horovod $VERSION sources"
  # Horovod's Gloo context of a process set (the global one included) forgets HOROVOD_GLOO_IFACE and binds to the
  # address the host name resolves to; on nodes whose name is a management address (JSC's, lbscale's two-node
  # test) the ranks then never meet. It takes the global context's interface instead.
  sed -i '/InitializeForProcessSet(const GlooContext& global_context,/,/auto dev = CreateDevice/ s/device_attr.iface = gloo_iface_;/device_attr.iface = global_context.gloo_iface_;/' \
    "$SRC/horovod/common/gloo/gloo_context.cc"
  grep -q 'device_attr.iface = global_context.gloo_iface_;' "$SRC/horovod/common/gloo/gloo_context.cc" \
    || die "the process-set interface patch did not apply"
  if [ "$CUDA" = cpu ]; then  # the CPU extension: torch's CUDA build is not asked for a toolkit
    sed -i 's/print(True if ((torch.version.cuda is not None) and (CUDA_HOME is not None)) else False)/print(False)/' \
      "$SRC/cmake/Modules/FindPytorch.cmake"
    grep -q 'print(False)' "$SRC/cmake/Modules/FindPytorch.cmake" || die "the CPU patch did not apply"
  fi
  "$PY" -m pip install -q wheel
  export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1
  export HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
  if [ "$CUDA" = cuda ]; then
    export HOROVOD_GPU_OPERATIONS=NCCL
    if [ -z "${HOROVOD_NCCL_HOME:-}" ]; then
      HOROVOD_NCCL_HOME=$("$PY" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
      [ -n "$HOROVOD_NCCL_HOME" ] && export HOROVOD_NCCL_HOME
    fi
  fi
  export MAKEFLAGS="-j$(nproc)"
  start=$(date +%s)
  echo "install-horovod: building Horovod $VERSION against torch $TORCH ($CUDA, C++$STD); about 3 minutes on 2 cores"
  nice -n 10 "$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$WORK/dist" "$SRC" \
    || die "the Horovod build failed (its log is above)"
  cp "$WORK"/dist/horovod-*.whl "$CACHE/$KEY/"
  WHEEL=$(ls "$CACHE/$KEY"/horovod-*.whl | head -1)
  echo "install-horovod: built in $(( $(date +%s) - start )) s, cached as $WHEEL"
fi
"$PY" -m pip install -q --force-reinstall --no-deps "$WHEEL"
"$PY" -c 'import horovod.torch as hvd; assert hvd.gloo_built()' \
  || die "Horovod installed but horovod.torch does not import with Gloo built"
echo "$KEY" > "$MARK"
echo "install-horovod: Horovod $VERSION with PyTorch and Gloo installed in $(dirname "$(dirname "$PY")") from $WHEEL"
