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
python3 tests/docs/check_links.py  # relative links in README, CHANGELOG, docs/
python3 tests/docs/check_layers.py  # no include runs up the layers (README, "How it is built")
# ---------------------------------------------------------------------------------------------------------------
# Python package (issue 26, docs/pytorch.md): `pip install .` into a venv (scikit-build-core runs this CMake with
# CONCCL_PYTHON_PACKAGE=ON: libconccl, libconccl_nccl and libconccl_ops only), then tests/python (no torch, no GPU).
echo "== python package: pip install . into a venv, pytest tests/python"
if ! python3 -c "import ensurepip" 2>/dev/null; then  # Debian's python3 needs python3-venv for `python3 -m venv`
  py_sudo=""
  if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null; then py_sudo="sudo"; fi
  $py_sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi
rm -rf build/pyvenv
python3 -m venv build/pyvenv
CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" build/pyvenv/bin/pip install -q --config-settings=build-dir=build/python-build . pytest
py_rc=0
build/pyvenv/bin/python -m pytest -q -p no:cacheprovider tests/python || py_rc=$?
if [ "$py_rc" -eq 5 ]; then echo "tests/python: pytest collected no tests" >&2; exit 1; fi
[ "$py_rc" -eq 0 ] || exit "$py_rc"
# ---------------------------------------------------------------------------------------------------------------
echo "== all tests passed"
