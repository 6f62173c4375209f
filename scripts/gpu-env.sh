# Sourced by every GPU-machine script (run there from the repo root, gpu-stage/ carried): what all of them need.
# Never NVLink multicast: it can take the shared GPUs out of service (../shared/DEVICE.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# gpu-build.sh packs bin/ into bin.tgz when the stage would not fit the device tool's carry limit.
if [ -f "${STAGE:-gpu-stage}/bin.tgz" ] && [ ! -d "${STAGE:-gpu-stage}/bin" ]; then
  tar -xzf "${STAGE:-gpu-stage}/bin.tgz" -C "${STAGE:-gpu-stage}"
fi
