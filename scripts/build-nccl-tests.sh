#!/usr/bin/env bash
# Builds NVIDIA's nccl-tests (the reference the field quotes, FACTS.md) HERE from a source tree outside this
# repository, strips the *_perf binaries and stages them as gpu-stage/nccl-tests.tar.xz for scripts/gpu.sh (sweep, shim)
# (the nine stripped binaries take ~37 MiB, mostly the same device code in each; xz makes them ~0.6 MiB of the
# 64 MiB carry limit). Run it AFTER scripts/gpu-build.sh, which empties gpu-stage/.
# The sources and binaries are never committed. Get the sources, e.g. from a bare mirror:
#   git --git-dir=<mirror> archive HEAD | tar -x -C /tmp/nccl-tests-src
#   scripts/build-nccl-tests.sh /tmp/nccl-tests-src        # or NCCL_TESTS_SRC=/tmp/nccl-tests-src
# Env: NCCL_TESTS_SRC (source dir), JOBS (default 2), CUDA_HOME / NCCL_HOME (default /usr/local/cuda),
#      NCCL_TESTS_BINS (default: the nine collectives conccl-bench has), NCCL_TESTS_BUILD (default <src>/build).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="${1:-${NCCL_TESTS_SRC:-}}"
if [ -z "$src" ] || [ ! -f "$src/src/common.h" ]; then
  echo "usage: $0 <nccl-tests source dir> (or NCCL_TESTS_SRC); '$src' is not an nccl-tests tree" >&2
  exit 2
fi
src="$(cd "$src" && pwd)"
case "$src/" in
  "$root"/*) echo "build-nccl-tests: keep the nccl-tests sources outside the repository ($src)" >&2; exit 2 ;;
esac
cuda="${CUDA_HOME:-/usr/local/cuda}"
nccl="${NCCL_HOME:-$cuda}"
build="${NCCL_TESTS_BUILD:-$src/build}"
bins="${NCCL_TESTS_BINS:-all_gather reduce_scatter all_reduce broadcast reduce alltoall gather scatter sendrecv}"
stage="$root/gpu-stage"
export PATH="$cuda/bin:$PATH"

# MPI=0: one process drives all GPUs (-g / -t). BIN_FILES_LIST limits the build to the binaries we run.
make -C "$src" -j "${JOBS:-2}" MPI=0 CUDA_HOME="$cuda" NCCL_HOME="$nccl" BUILDDIR="$build" \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BIN_FILES_LIST="$bins"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/nccl-tests" "$stage"
for b in $bins; do
  cp "$build/${b}_perf" "$tmp/nccl-tests/"
  strip --strip-unneeded "$tmp/nccl-tests/${b}_perf"
done
git -C "$src" rev-parse HEAD >"$tmp/nccl-tests/VERSION" 2>/dev/null || echo "source: $src" >"$tmp/nccl-tests/VERSION"
rm -rf "$stage/nccl-tests" "$stage/nccl-tests.tar.xz"
tar -cJf "$stage/nccl-tests.tar.xz" -C "$tmp" nccl-tests

# Keep the stage out of git without touching the shared .gitignore (as gpu-build.sh does).
exclude="$root/.git/info/exclude"
if [ -d "$root/.git" ]; then
  mkdir -p "$(dirname "$exclude")"
  grep -qx '/gpu-stage/' "$exclude" 2>/dev/null || echo '/gpu-stage/' >>"$exclude"
fi

raw="$(du -sk "$tmp/nccl-tests" | cut -f1)"
kib="$(du -sk "$stage/nccl-tests.tar.xz" | cut -f1)"
total="$(du -sk "$stage" | cut -f1)"
echo "build-nccl-tests: staged $(ls "$tmp/nccl-tests" | grep -c _perf) binaries (${raw} KiB stripped) as" \
  "gpu-stage/nccl-tests.tar.xz (${kib} KiB; gpu-stage ${total} KiB of the 64 MiB carry limit)"
if [ "$total" -gt $((60 * 1024)) ]; then
  echo "build-nccl-tests: gpu-stage is larger than 60 MiB; the device tool carries at most 64 MiB" >&2
  exit 1
fi
