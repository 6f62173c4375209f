#!/usr/bin/env bash
# test_gpu_multiprocess shards 2 and 3 of 3 in one call (shard 1 runs with call-order.sh): every bound as the suite
#   sets it.
source "$(dirname "$0")/../../2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=1 mp mp-shard2of3 290 '*'
GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=2 mp mp-shard3of3 290 '*'
pack
true
