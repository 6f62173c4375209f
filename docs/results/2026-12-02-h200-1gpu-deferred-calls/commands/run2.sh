set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p $OUT
T0=$(date +%s)
( cd gpu-stage/bin && timeout 300 ./test_gpu_multiprocess --gtest_filter='*Deferred*:*TwoCommunicators*:*MemoryCuda*:*Unstaged*:*SendRecv*:*Symmetric*:*Chunked*:*Errors*' > $OUT/mp.log 2>&1; echo "mp rc=$?" )
grep -E "^\[ *(OK|FAILED|PASSED) *\]|host time per call|^  [A-Z0-9]|against| memory CUDA IPC|returned after|FAILED:" $OUT/mp.log | head -70
echo "t=$(( $(date +%s) - T0 ))"
NCCL_DIR=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
( cd gpu-stage/bin && CONCCL_NCCL_REAL_LIB=$NCCL_DIR/libnccl.so.2 LD_LIBRARY_PATH=$NCCL_DIR timeout 60 ./test_gpu_nccl_shim --gtest_filter='NcclShimGpu*' > $OUT/shim.log 2>&1; echo "shim rc=$?" )
grep -E "^\[ *(FAILED|PASSED) *\]|tests ran" $OUT/shim.log | head
echo "t=$(( $(date +%s) - T0 ))"
left=$(( 585 - ($(date +%s) - T0) ))
[ $left -gt 60 ] && NPS=2 NO_NCCL=1 BUDGET_S=$((left-20)) CASES='ordering|skew|workloads' WORKLOAD_CASES=collectives,p2p,moe,ddp,fsdp2_bf16 timeout $((left-5)) bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so $OUT/torch > $OUT/torch.log 2>&1
tail -25 $OUT/torch.log
cd $OUT && tar czf torch.tgz torch 2>/dev/null; rm -rf torch
