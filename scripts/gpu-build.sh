#!/usr/bin/env bash
# Builds the CUDA configuration here (CPU machine, no GPU needed) and stages what the GPU machine runs into
# gpu-stage/ (GPU test binaries, tools, libraries, the runner; stripped, < 64 MiB), to be carried with the device tool:
#   scripts/gpu-build.sh && <run with carry ["gpu-stage"]>: bash scripts/gpu.sh <phase...>   (docs/dev/gpu-runner.md)
# Env: JOBS (default 2), BUILD_DIR (default build-gpu), TARGETS (override the list of targets to build).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-gpu}"
stage="$root/gpu-stage"
jobs="${JOBS:-2}"

cmake_args=(-S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
            -DCONCCL_ENABLE_CUDA=ON)
# CMake < 3.26 does not know nvcc's C++20 flag ("CUDA20 dialect not supported"); tell it.
cmake_version="$(cmake --version | head -1 | awk '{print $3}')"
if [ "$(printf '%s\n3.26\n' "$cmake_version" | sort -V | head -1)" != "3.26" ]; then
  cmake_args+=(-DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20)
fi
cmake "${cmake_args[@]}" >/dev/null

# The GPU tests (one executable per tests/gpu/*.cc|cu) and the tools' executables.
if [ -z "${TARGETS:-}" ]; then
  TARGETS=""
  for src in "$root"/tests/gpu/*.cc "$root"/tests/gpu/*.cu; do
    [ -e "$src" ] || continue
    name="$(basename "$src")"
    TARGETS+=" ${name%.*}"
  done
  known="$(ninja -C "$build" -t targets all 2>/dev/null | cut -d: -f1)"
  for tool in conccl-kernel-bench conccl-bench conccl-c3 conccl-tp-bench conccl-ce-probe conccl_mp_worker \
              multiprocess_allreduce conccl_nccl_shim test_gpu_nccl_shim conccl conccl_ops test_gpu_ops_c_api; do
    if grep -qx "$tool" <<<"$known"; then TARGETS+=" $tool"; fi
  done
fi
# test_gpu_ops_c_api loads libconccl_ops.so from gpu-stage/lib: a TARGETS list naming it stages the library too.
if [[ " $TARGETS " == *" test_gpu_ops_c_api "* ]] && [[ " $TARGETS " != *" conccl_ops "* ]]; then
  TARGETS+=" conccl_ops"
fi
# conccl_nccl_shim (libconccl_nccl.so, the NCCL drop-in), conccl (libconccl.so) and conccl_ops (libconccl_ops.so, the
# fused ops' C interface) are shared libraries, staged in gpu-stage/lib/ below; the other targets are executables,
# staged as gpu-stage/bin/.
shim_target=""
ops_target=""
executables=""
for t in $TARGETS; do
  case "$t" in
    conccl_nccl_shim) shim_target=1 ;;
    conccl_ops) ops_target=1 ;;
    conccl) ;;
    *) executables+=" $t" ;;
  esac
done
echo "gpu-build: building$TARGETS"
# Remove the old executables first: with -k 0 a target that fails to compile would otherwise be staged stale.
for t in $executables; do find "$build" -type f -name "$t" -perm -u+x -delete 2>/dev/null; done
[ -n "$shim_target" ] && rm -f "$build/libconccl_nccl.so"
[ -n "$ops_target" ] && rm -f "$build"/libconccl_ops.so*
# -k 0: a target another engineer is still writing must not keep the others from being staged.
build_rc=0
ninja -C "$build" -j "$jobs" -k 0 $TARGETS || build_rc=$?

rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/scripts"
staged=""
missing=""
for t in $executables; do
  f="$(find "$build" -type f -name "$t" -perm -u+x 2>/dev/null | head -1)"
  if [ -n "$f" ]; then
    cp "$f" "$stage/bin/$t"
    strip --strip-unneeded "$stage/bin/$t" 2>/dev/null || true
    staged+=" $t"
  else
    missing+=" $t"
  fi
done
# The NCCL shim (scripts/gpu.sh's shim phase preloads it from here; ~5 MiB stripped).
if [ -n "$shim_target" ]; then
  if [ -f "$build/libconccl_nccl.so" ]; then
    mkdir -p "$stage/lib"
    cp "$build/libconccl_nccl.so" "$stage/lib/libconccl_nccl.so"
    strip --strip-unneeded "$stage/lib/libconccl_nccl.so" 2>/dev/null || true
    staged+=" conccl_nccl_shim(lib/libconccl_nccl.so)"
  else
    missing+=" conccl_nccl_shim"
  fi
fi
cp "$root/scripts/gpu.sh" "$stage/scripts/"
# The native-backtrace helper of gpu.sh's shim-diag phase (LD_PRELOADed; SIGUSR2 prints a thread's stack).
if command -v gcc >/dev/null; then
  mkdir -p "$stage/lib"
  gcc -shared -fPIC -O1 -o "$stage/lib/libbt_on_signal.so" "$root/scripts/bt_on_signal.c" 2>/dev/null || true
fi
# The shared library and the PyTorch snippet of docs/multiprocess.md (run by gpu.sh's multiproc phase).
so="$(find "$build" -maxdepth 1 -name 'libconccl.so.*.*' -type f | head -1)"
if [ -n "$so" ]; then
  mkdir -p "$stage/lib"
  cp "$so" "$stage/lib/libconccl.so.0"
  strip --strip-unneeded "$stage/lib/libconccl.so.0" 2>/dev/null || true
fi
# The fused ops' C interface, for examples/torch/fused_ops.py (gpu.sh's fused phase) and test_gpu_ops_c_api
# (which finds it in ../lib); under its soname, and it finds libconccl.so.0 beside itself ($ORIGIN).
if [ -n "$ops_target" ]; then
  ops_so="$(find "$build" -maxdepth 1 -name 'libconccl_ops.so.*.*' -type f | head -1)"
  if [ -n "$ops_so" ]; then
    mkdir -p "$stage/lib"
    cp "$ops_so" "$stage/lib/libconccl_ops.so.0"
    strip --strip-unneeded "$stage/lib/libconccl_ops.so.0" 2>/dev/null || true
    staged+=" conccl_ops(lib/libconccl_ops.so.0)"
  else
    missing+=" conccl_ops"
  fi
fi
awk '/^```python/{f=1;next} /^```/{f=0} f' "$root/docs/multiprocess.md" >"$stage/scripts/conccl_allreduce.py"
[ -f "$root/tools/c3/plot_c3.py" ] && cp "$root/tools/c3/plot_c3.py" "$stage/scripts/"

# What was built: the device copy's git metadata can be stale (it showed an older commit than the tree it ran), so the
# runners print this stamp (gpu.sh in machine.txt, tests/torch/run_all.sh in environment.txt).
{
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
    git -C "$root" diff --quiet HEAD -- src include CMakeLists.txt tests 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)  targets: ${TARGETS# }"
} >"$stage/BUILD_INFO"

# Keep the stage out of git without touching the shared .gitignore.
exclude="$root/.git/info/exclude"
if [ -d "$root/.git" ]; then
  mkdir -p "$(dirname "$exclude")"
  grep -qx '/gpu-stage/' "$exclude" 2>/dev/null || echo '/gpu-stage/' >>"$exclude"
fi

size_kib="$(du -sk "$stage" | cut -f1)"
if [ "$size_kib" -gt $((60 * 1024)) ]; then
  # Statically linked test binaries are ~5 MiB each; gzip takes them to about a quarter. scripts/gpu.sh unpacks
  # bin.tgz when bin/ is absent.
  tar -czf "$stage/bin.tgz" -C "$stage" bin && rm -rf "$stage/bin"
  echo "gpu-build: bin/ packed into gpu-stage/bin.tgz (${size_kib} KiB unpacked)"
  size_kib="$(du -sk "$stage" | cut -f1)"
fi
echo "gpu-build: staged$staged into gpu-stage/ (${size_kib} KiB)"
[ -n "$missing" ] && echo "gpu-build: NOT built:$missing"
if [ "$size_kib" -gt $((60 * 1024)) ]; then
  echo "gpu-build: gpu-stage is larger than 60 MiB; the device tool carries at most 64 MiB" >&2
  exit 1
fi
exit "$build_rc"
