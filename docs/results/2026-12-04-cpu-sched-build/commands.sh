#!/bin/bash
# Built against the objects of build-gpu (Release) on the 2-core dev machine, no GPU, 2026-12-04, sched sources of
# commit 4a538cc (options with ownBlockViaPeer on: pair-owned AllToAll includes its own-block bounces).
set -e
cd "$(dirname "$0")/../../../build-gpu"
g++ -O2 -std=c++20 -I../src -I../include -Iinclude ../docs/results/2026-12-04-cpu-sched-build/sched_build_timing.cc \
  -o /tmp/sched_build_timing CMakeFiles/conccl_obj.dir/src/sched/*.o CMakeFiles/conccl_obj.dir/src/base/*.o -lpthread
/tmp/sched_build_timing
