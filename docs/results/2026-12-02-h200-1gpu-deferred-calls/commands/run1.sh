set -u
cd gpu-stage/bin
export NCCL_NVLS_ENABLE=0
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 560 ./test_gpu_multiprocess --gtest_filter='*Deferred*:*TwoCommunicators*:*MemoryCuda*:*StagedCalls*:*PeerKilled*:*Abort*' > $OUT/mp_new.log 2>&1
echo "rc=$?"
grep -E "^\[  (FAILED|  OK|PASSED) |host time per call|reported|abort from|OK$|FAILED:" $OUT/mp_new.log | head -80
