#!/usr/bin/env bash
# Installs what conccl needs to build, test and plot on Debian/Ubuntu (the CUDA toolkit is expected under
# /usr/local/cuda or on PATH; without it only the host backend is built).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  cmake ninja-build g++ make libgtest-dev libcli11-dev nlohmann-json3-dev python3 python3-pip >/dev/null
# matplotlib only draws conccl-c3's plots; a failure here must not stop the build.
python3 -c "import matplotlib" 2>/dev/null || python3 -m pip install -q matplotlib 2>/dev/null \
  || python3 -m pip install -q --break-system-packages matplotlib \
  || echo "setup: matplotlib not installed (plots disabled)" >&2
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  echo "setup: add /usr/local/cuda/bin to PATH to build the CUDA backend" >&2
fi
