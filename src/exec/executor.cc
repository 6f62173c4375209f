// Defaults of the multi-process part of the Executor interface: only the CUDA process executor implements it.
#include "exec/executor.h"

#include "base/error.h"

namespace conccl::exec {
namespace {
[[noreturn]] void singleProcessOnly(const char* what) {
  CONCCL_THROW(concclInternalError, std::string(what) + " called on an executor of a single-process communicator");
}
}  // namespace

BufferExport Executor::exportBuffer(int, const void*, size_t, const char*) { singleProcessOnly("exportBuffer"); }
void Executor::retireExport(int, const void*) { singleProcessOnly("retireExport"); }
std::vector<uint64_t> Executor::takeRetiredExports(int, uint64_t) { return {}; }
void Executor::requeueRetiredExports(int, const std::vector<uint64_t>&) { singleProcessOnly("requeueRetiredExports"); }
void* Executor::importBuffer(int, const BufferExport&) { singleProcessOnly("importBuffer"); }
void Executor::closeImport(int, uint64_t) {}
std::optional<BufferExport> Executor::exportIfShareable(int, const void*, size_t, const char*, cudaStream_t) {
  singleProcessOnly("exportIfShareable");
}
std::optional<DeferredCall> Executor::deferCall(int, cudaStream_t, std::string* whyNot) {
  *whyNot = "this backend launches every call on its caller's thread";
  return std::nullopt;
}
void Executor::beginDeferred(int, const DeferredCall&) { singleProcessOnly("beginDeferred"); }
void Executor::endDeferred(int, const DeferredCall&) { singleProcessOnly("endDeferred"); }
bool Executor::drainDeferred(int, std::chrono::milliseconds) { return true; }

}  // namespace conccl::exec
