#!/usr/bin/env bash
# test_gpu_multiprocess on the stage: `mp.sh K N` runs gtest shard K of N (the whole suite in N calls), `mp.sh FILTER`
#   the tests a gtest filter names. Every bound as the suite sets it.
source "$(dirname "$0")/../../2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
if [ $# -ge 2 ]; then
  GTEST_TOTAL_SHARDS="$2" GTEST_SHARD_INDEX="$(($1 - 1))" mp "mp-shard$1of$2" 575 '*'
else
  mp mp 575 "$1"
fi
pack
true
