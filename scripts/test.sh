#!/usr/bin/env bash
# The test command (README, and what CI runs): installs dependencies, builds conccl with warnings as errors and
# runs every test. GPU tests (ctest label "gpu") skip cleanly on a machine without a GPU. Then the host code
# again under AddressSanitizer + UBSan, and an install + find_package(conccl) consumer build.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ -d /usr/local/cuda/bin ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
JOBS="$(nproc)"

echo "== build (Release, -Werror) and all tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCONCCL_WERROR=ON
cmake --build build -j "$JOBS"
ctest --test-dir build --output-on-failure -j "$JOBS" --timeout 600

echo "== host code under AddressSanitizer + UBSan"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCONCCL_ENABLE_CUDA=OFF -DCONCCL_SANITIZE=ON \
  -DCONCCL_WERROR=ON
cmake --build build-asan -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan -L unit --output-on-failure -j "$JOBS" --timeout 900

echo "== install and find_package(conccl) from a separate project"
rm -rf build/install build/install-consumer
cmake --install build --prefix "$PWD/build/install" >/dev/null
cmake -S tests/install -B build/install-consumer -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
cmake --build build/install-consumer
build/install-consumer/conccl_consumer
build/install-consumer/conccl_consumer_static
if [ -x build/install-consumer/conccl_ops_consumer ]; then build/install-consumer/conccl_ops_consumer; fi
python3 tests/docs/check_links.py --allow-missing docs/pytorch.md  # relative links in README, CHANGELOG, docs/
echo "== all tests passed"
