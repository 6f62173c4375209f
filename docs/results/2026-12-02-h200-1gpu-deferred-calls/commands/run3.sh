set -u
mkdir -p $OUT
cd gpu-stage/bin
for t in DeferredCallsDoNotWaitForLatePeers EveryCollectiveMatchesTheReferenceUnstaged CallsOnTwoCommunicatorsInDifferentOrdersFinish MemoryCudaIpcCannotShareWorksAtEverySize; do
  timeout 55 ./test_gpu_multiprocess --gtest_filter="Ranks/MultiProcess.$t/0" > $OUT/$t.log 2>&1; echo "$t rc=$?"
  grep -E "^\[ *(OK|FAILED) *\]|^  [A-Z0-9p]|against| memory CUDA IPC|FAILED:" $OUT/$t.log | cut -c1-300 | head -14
done
