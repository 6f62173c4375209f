// Probe (not project code): the caller's host time per pool call in five launch forms, one process, one GPU.
// A: program graph + done marker (no bounce copies).  B: copy-in kernel, graph, copy-out kernel (writes marker).
// C: one graph with the copy kernels as nodes, set per call (cudaGraphExecKernelNodeSetParams) + marker.
// D: one graph with constant kernel nodes that read the call's pointers from a pinned ring (device counter) + marker.
// E: one graph with memcpy nodes set per call (cudaGraphExecMemcpyNodeSetParams1D) + marker.
// The stream is held by a wait on a host flag while calls are enqueued (a late peer), then released and checked.
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); std::abort(); } } while (0)
#define DK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char* m_ = ""; cuGetErrorString(r_, &m_); fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, m_); std::abort(); } } while (0)

struct Args { const void* src; void* dst; size_t bytes; volatile unsigned* mark; unsigned markValue; unsigned* finished; };
struct Slot { const void* src; void* dst; size_t bytes; };
constexpr int kRing = 256;

__device__ void copy16(const void* s, void* d, size_t bytes) {
  const uint4* a = static_cast<const uint4*>(s); uint4* b = static_cast<uint4*>(d);
  size_t n = bytes / 16, st = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += st) b[i] = __ldcs(a + i);
}
__device__ void finish(volatile unsigned* mark, unsigned value, unsigned* finished) {
  if (mark == nullptr) return;
  __shared__ bool last; __syncthreads();
  if (threadIdx.x == 0) { __threadfence_system(); last = atomicAdd(finished, 1u) == gridDim.x - 1; }
  __syncthreads();
  if (last && threadIdx.x == 0) { *finished = 0; __threadfence_system(); *mark = value; }
}
__global__ void copyKernel(Args a) { copy16(a.src, a.dst, a.bytes); finish(a.mark, a.markValue, a.finished); }
// Ring form: `side` 0 = in, 1 = out. The out side advances the counter (after every CTA is done).
__global__ void ringKernel(const Slot* ring, unsigned* counter, int side, unsigned* finished) {
  __shared__ Slot s;
  if (threadIdx.x == 0) { unsigned k = *(volatile unsigned*)counter; s = ring[2 * (k % kRing) + side]; }
  __syncthreads();
  copy16(s.src, s.dst, s.bytes);
  if (side == 0) return;
  __shared__ bool last; __syncthreads();
  if (threadIdx.x == 0) { __threadfence(); last = atomicAdd(finished, 1u) == gridDim.x - 1; }
  __syncthreads();
  if (last && threadIdx.x == 0) { *finished = 0; __threadfence(); atomicAdd(counter, 1u); }
}
__global__ void fill(unsigned* p, size_t n, unsigned seed) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = unsigned(i * 2654435761u) ^ seed;
}
__global__ void check(const unsigned* p, size_t n, unsigned seed, unsigned long long* bad) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    if (p[i] != (unsigned(i * 2654435761u) ^ seed)) atomicAdd(bad, 1ull);
}

static double nowUs() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
static CUstreamBatchMemOpParams wr(CUdeviceptr a, unsigned v) { CUstreamBatchMemOpParams o{}; o.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32; o.writeValue.address = a; o.writeValue.value = v; return o; }
static CUstreamBatchMemOpParams wt(CUdeviceptr a, unsigned v) { CUstreamBatchMemOpParams o{}; o.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32; o.waitValue.address = a; o.waitValue.value = v; o.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ; return o; }

struct Ctx {
  cudaStream_t s; size_t bytes; int ctas = 16;
  void* user[2]; void* out[2]; void* bounce; void* scr[2];
  unsigned* flagDev; unsigned* one;              // device words: program signal target, constant 1
  volatile unsigned* hostGate; CUdeviceptr hostGateDev;
  volatile unsigned* marker; CUdeviceptr markerDev;
  unsigned* finished; unsigned* counter; Slot* ring; Slot* ringDev;
};

// The program's ops on a capturing stream: signal, wait, 4 KiB copy, signal.
static void programOps(Ctx& c) {
  CUstreamBatchMemOpParams a[2] = {wr(CUdeviceptr(c.flagDev), 1), wt(CUdeviceptr(c.one), 1)};
  DK(cuStreamBatchMemOp(c.s, 2, a, 0));
  CK(cudaMemcpyAsync(c.scr[1], c.scr[0], 4096, cudaMemcpyDeviceToDevice, c.s));
  CUstreamBatchMemOpParams b[1] = {wr(CUdeviceptr(c.flagDev), 2)};
  DK(cuStreamBatchMemOp(c.s, 1, b, 0));
}
static cudaGraphExec_t capture(Ctx& c, int form, std::vector<cudaGraphNode_t>& nodes, cudaGraph_t& g) {
  CK(cudaStreamBeginCapture(c.s, cudaStreamCaptureModeThreadLocal));
  Args ain{c.user[0], c.bounce, c.bytes, nullptr, 0, nullptr}, aout{c.bounce, c.out[0], c.bytes, nullptr, 0, nullptr};
  if (form == 'C') copyKernel<<<c.ctas, 512, 0, c.s>>>(ain);
  if (form == 'D') ringKernel<<<c.ctas, 512, 0, c.s>>>(c.ringDev, c.counter, 0, c.finished);
  if (form == 'E') CK(cudaMemcpyAsync(c.bounce, c.user[0], c.bytes, cudaMemcpyDeviceToDevice, c.s));
  programOps(c);
  if (form == 'C') copyKernel<<<c.ctas, 512, 0, c.s>>>(aout);
  if (form == 'D') ringKernel<<<c.ctas, 512, 0, c.s>>>(c.ringDev, c.counter, 1, c.finished);
  if (form == 'E') CK(cudaMemcpyAsync(c.out[0], c.bounce, c.bytes, cudaMemcpyDeviceToDevice, c.s));
  CK(cudaStreamEndCapture(c.s, &g));
  cudaGraphExec_t e; CK(cudaGraphInstantiate(&e, g, 0));
  size_t n = 0; CK(cudaGraphGetNodes(g, nullptr, &n)); std::vector<cudaGraphNode_t> all(n); CK(cudaGraphGetNodes(g, all.data(), &n));
  nodes.assign(2, nullptr);
  // The copies' nodes, told apart by their parameters (in: from user[0]; out: into out[0]).
  for (auto nd : all) {
    CUgraphNodeType t; DK(cuGraphNodeGetType(reinterpret_cast<CUgraphNode>(nd), &t));
    if (form == 'C' && t == CU_GRAPH_NODE_TYPE_KERNEL) {
      cudaKernelNodeParams kp; CK(cudaGraphKernelNodeGetParams(nd, &kp));
      const Args* a = static_cast<const Args*>(kp.kernelParams[0]);
      nodes[a->src == c.user[0] ? 0 : 1] = nd;
    }
    if (form == 'E' && t == CU_GRAPH_NODE_TYPE_MEMCPY) {
      cudaMemcpy3DParms mp; CK(cudaGraphMemcpyNodeGetParams(nd, &mp));
      if (mp.extent.width * mp.extent.height * mp.extent.depth < c.bytes) continue;  // the program's 4 KiB copy
      nodes[mp.dstPtr.ptr == c.bounce ? 0 : 1] = nd;
    }
  }
  if (form == 'A' || form == 'D') nodes.clear();
  return e;
}

static void marker(Ctx& c, unsigned v) { DK(cuStreamWriteValue32(c.s, c.markerDev, v, 0)); }

int main(int argc, char** argv) {
  const int calls = argc > 1 ? atoi(argv[1]) : 21;
  const int rounds = argc > 2 ? atoi(argv[2]) : 3;
  CK(cudaSetDevice(0)); CK(cudaFree(nullptr));
  cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, 0));
  printf("device: %s, calls per run %d, rounds %d\n", p.name, calls, rounds);
  const char* forms = "ABCDE";
  int failures = 0;
  for (size_t bytes : {size_t(64) << 20, size_t(1) << 30}) {
    Ctx c; c.bytes = bytes;
    CK(cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking));
    for (int i = 0; i < 2; ++i) { CK(cudaMalloc(&c.user[i], bytes)); CK(cudaMalloc(&c.out[i], bytes)); CK(cudaMalloc(&c.scr[i], 4096)); }
    CK(cudaMalloc(&c.bounce, bytes));
    CK(cudaMalloc(&c.flagDev, 64)); CK(cudaMalloc(&c.one, 64)); CK(cudaMalloc(&c.finished, 64)); CK(cudaMalloc(&c.counter, 64));
    CK(cudaMemset(c.flagDev, 0, 64)); CK(cudaMemset(c.finished, 0, 64)); CK(cudaMemset(c.counter, 0, 64));
    unsigned one = 1; CK(cudaMemcpy(c.one, &one, 4, cudaMemcpyHostToDevice));
    unsigned* h; CK(cudaHostAlloc(&h, 4096, cudaHostAllocMapped)); memset(h, 0, 4096);
    c.hostGate = h; c.marker = h + 32;
    void* dp; CK(cudaHostGetDevicePointer(&dp, h, 0)); c.hostGateDev = CUdeviceptr(dp); c.markerDev = CUdeviceptr(dp) + 128;
    CK(cudaHostAlloc(&c.ring, sizeof(Slot) * 2 * kRing, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void**)&c.ringDev, c.ring, 0));
    unsigned long long* bad; CK(cudaMallocManaged(&bad, 8));
    cudaGraph_t gA, gC, gD, gE; std::vector<cudaGraphNode_t> nA, nC, nD, nE;
    cudaGraphExec_t eA = capture(c, 'A', nA, gA), eC = capture(c, 'C', nC, gC), eD = capture(c, 'D', nD, gD), eE = capture(c, 'E', nE, gE);
    if (!nC[0] || !nC[1] || !nE[0] || !nE[1]) { printf("node walk failed C=%zu E=%zu\n", nC.size(), nE.size()); return 2; }
    cudaKernelNodeParams kp[2]; CK(cudaGraphKernelNodeGetParams(nC[0], &kp[0])); CK(cudaGraphKernelNodeGetParams(nC[1], &kp[1]));
    unsigned markValue = 0, ringUses = 0;
    std::vector<double> us; std::vector<std::vector<double>> all(5);
    for (int round = 0; round < rounds; ++round) {
      for (int fi = 0; fi < 5; ++fi) {
        const char form = forms[fi];
        for (int i = 0; i < 2; ++i) { fill<<<264, 512, 0, c.s>>>((unsigned*)c.user[i], bytes / 4, 1000u * round + 10u * fi + i); CK(cudaMemsetAsync(c.out[i], 0, bytes, c.s)); }
        CK(cudaStreamSynchronize(c.s));
        *c.hostGate = 0;
        DK(cuStreamWaitValue32(c.s, c.hostGateDev, 1, CU_STREAM_WAIT_VALUE_GEQ));  // a late peer
        us.clear();
        for (int k = 0; k < calls; ++k) {
          const int b = k % 2;
          ++markValue;
          const double t0 = nowUs();
          if (form == 'A') { CK(cudaGraphLaunch(eA, c.s)); marker(c, markValue); }
          if (form == 'B') {
            copyKernel<<<c.ctas, 512, 0, c.s>>>(Args{c.user[b], c.bounce, bytes, nullptr, 0, nullptr});
            CK(cudaGetLastError());
            CK(cudaGraphLaunch(eA, c.s));
            copyKernel<<<c.ctas, 512, 0, c.s>>>(Args{c.bounce, c.out[b], bytes, c.marker, markValue, c.finished});
            CK(cudaGetLastError());
          }
          if (form == 'C') {
            Args ain{c.user[b], c.bounce, bytes, nullptr, 0, nullptr}, aout{c.bounce, c.out[b], bytes, nullptr, 0, nullptr};
            void* pin[] = {&ain}; void* pout[] = {&aout};
            cudaKernelNodeParams q0 = kp[0], q1 = kp[1]; q0.kernelParams = pin; q1.kernelParams = pout;
            CK(cudaGraphExecKernelNodeSetParams(eC, nC[0], &q0)); CK(cudaGraphExecKernelNodeSetParams(eC, nC[1], &q1));
            CK(cudaGraphLaunch(eC, c.s)); marker(c, markValue);
          }
          if (form == 'D') {
            Slot* s = c.ring + 2 * (ringUses % kRing);
            s[0] = Slot{c.user[b], c.bounce, bytes}; s[1] = Slot{c.bounce, c.out[b], bytes};
            ++ringUses;
            CK(cudaGraphLaunch(eD, c.s)); marker(c, markValue);
          }
          if (form == 'E') {
            CK(cudaGraphExecMemcpyNodeSetParams1D(eE, nE[0], c.bounce, c.user[b], bytes, cudaMemcpyDeviceToDevice));
            CK(cudaGraphExecMemcpyNodeSetParams1D(eE, nE[1], c.out[b], c.bounce, bytes, cudaMemcpyDeviceToDevice));
            CK(cudaGraphLaunch(eE, c.s)); marker(c, markValue);
          }
          us.push_back(nowUs() - t0);
        }
        *c.hostGate = 1;  // the peer arrives
        const double w0 = nowUs();
        while (*c.marker != markValue && nowUs() - w0 < 20e6) {}
        if (*c.marker != markValue) { printf("%c: marker not seen (%u vs %u)\n", form, *c.marker, markValue); return 3; }
        CK(cudaStreamSynchronize(c.s));
        unsigned long long nb = 0;
        if (form != 'A') {
          for (int i = 0; i < 2; ++i) { *bad = 0; check<<<264, 512, 0, c.s>>>((unsigned*)c.out[i], bytes / 4, 1000u * round + 10u * fi + i, bad); CK(cudaStreamSynchronize(c.s)); nb += *bad; }
        }
        if (nb) { ++failures; printf("%c %zu MiB round %d: %llu words wrong\n", form, bytes >> 20, round, nb); }
        std::vector<double> v = us; v.erase(v.begin(), v.begin() + 2);  // the first two warm up
        for (double x : v) all[fi].push_back(x);
        std::sort(v.begin(), v.end());
        printf("%zu MiB round %d form %c: p10 %.1f p50 %.1f p90 %.1f us (check %s)\n", bytes >> 20, round, form,
               v[v.size() / 10], v[v.size() / 2], v[v.size() * 9 / 10], form == 'A' ? "-" : (nb ? "FAIL" : "ok"));
      }
    }
    for (int fi = 0; fi < 5; ++fi) {
      auto& v = all[fi]; std::sort(v.begin(), v.end());
      printf("SUMMARY %zu MiB form %c: pooled p50 %.1f us (p10 %.1f, p90 %.1f, n=%zu)\n", bytes >> 20, forms[fi], v[v.size() / 2], v[v.size() / 10], v[v.size() * 9 / 10], v.size());
    }
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < 2; ++i) { cudaFree(c.user[i]); cudaFree(c.out[i]); cudaFree(c.scr[i]); }
    cudaFree(c.bounce);
  }
  printf("probe %s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
