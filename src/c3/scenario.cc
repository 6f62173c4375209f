#include "c3/scenario.h"

#include <cctype>
#include <set>

#include "base/error.h"

namespace conccl::c3 {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

// Model dimensions (public model cards).
// LLaMA-3 70B: hidden 8192, ffn 28672, 64 query / 8 KV heads of 128 -> fused QKV output 8192 + 2x1024.
constexpr int64_t k70bHidden = 8192;
constexpr int64_t k70bFfn = 28672;
constexpr int64_t k70bQkv = 10240;
// LLaMA-3 405B: hidden 16384, ffn 53248, 128 query / 8 KV heads of 128 -> fused QKV output 16384 + 2x1024.
constexpr int64_t k405bHidden = 16384;
constexpr int64_t k405bFfn = 53248;
constexpr int64_t k405bQkv = 18432;
// Mixtral 8x7B: hidden 4096, expert ffn 14336, 8 experts, top-2.
constexpr int64_t kMixtralHidden = 4096;
constexpr int64_t kMixtralFfn = 14336;
// DeepSeek-V3: hidden 7168, routed-expert ffn 2048, 256 routed experts, top-8 (+1 shared expert).
constexpr int64_t kDsHidden = 7168;
constexpr int64_t kDsFfn = 2048;
constexpr int64_t kDsTopK = 8;

constexpr int kTp = 8;  // tensor-parallel / expert-parallel / FSDP group: one NVLink node

Scenario make(std::string name, std::string description, GemmShape gemm, CollKind kind, uint64_t bytes,
              Dtype collDtype = Dtype::kBf16) {
  return Scenario{std::move(name), std::move(description), gemm, CollectiveSpec{kind, bytes, kTp, collDtype}};
}

uint64_t bytesOf(int64_t elems, Dtype dtype) { return uint64_t(elems) * dtypeSize(dtype); }

bool validName(const std::string& name) {
  if (name.empty()) return false;
  for (unsigned char c : name) {
    if (!(std::isalnum(c) || c == '.' || c == '_' || c == '+' || c == '-')) return false;
  }
  return true;
}

}  // namespace

void validateScenario(const Scenario& s) {
  const std::string where = "scenario '" + s.name + "': ";
  CONCCL_REQUIRE(validName(s.name), where + "name must be non-empty and use only [A-Za-z0-9._+-]");
  CONCCL_REQUIRE(s.gemm.m > 0 && s.gemm.n > 0 && s.gemm.k > 0, where + "GEMM dimensions must be positive");
  CONCCL_REQUIRE(s.coll.ranks >= 1 && s.coll.ranks <= 1024, where + "ranks must be in 1..1024");
  CONCCL_REQUIRE(isC3Collective(s.coll.kind), where + "collective " + sched::collKindName(s.coll.kind) +
                                                 " is not one of the C3 collectives");
  CONCCL_REQUIRE(s.coll.bytes > 0, where + "collective bytes must be positive");
  CONCCL_REQUIRE(s.coll.dtype != Dtype::kFp8E4M3 || !isReduction(s.coll.kind),
                 where + "fp8 collectives are for data movement only (no " + collLabel(s.coll.kind) + ")");
  CONCCL_REQUIRE(s.coll.callCount() > 0, where + "collective bytes too small for " + std::to_string(s.coll.ranks) +
                                             " ranks of " + dtypeName(s.coll.dtype));
}

void validateScenarios(const std::vector<Scenario>& scenarios) {
  std::set<std::string> names;
  for (const Scenario& s : scenarios) {
    validateScenario(s);
    CONCCL_REQUIRE(names.insert(s.name).second, "duplicate scenario name '" + s.name + "'");
  }
}

std::vector<Scenario> builtinGrid() {
  using enum CollKind;
  constexpr Dtype kBf16 = Dtype::kBf16;
  constexpr Dtype kFp8 = Dtype::kFp8E4M3;
  std::vector<Scenario> g;

  // FSDP (ZeRO-3) over 8 ranks: while layer i computes, layer i+1's weights are all-gathered. The all-gather
  // output per rank is the whole weight (nccl-tests counts the output). Per-linear wrapping keeps each
  // gather <= 1 GB; the GEMM is layer i's matching linear with the rank's local tokens.
  g.push_back(make("llama70b-fsdp-ag-w13-t8192", "LLaMA-70B FSDP: gather fused gate/up weights beside gate/up GEMM",
                   {8192, 2 * k70bFfn, k70bHidden, kBf16}, kAllGather, bytesOf(k70bHidden * 2 * k70bFfn, kBf16)));
  g.push_back(make("llama70b-fsdp-ag-w1-t4096", "LLaMA-70B FSDP: gather up weights beside up GEMM, 4096 tokens",
                   {4096, k70bFfn, k70bHidden, kBf16}, kAllGather, bytesOf(k70bHidden * k70bFfn, kBf16)));
  g.push_back(make("llama70b-fsdp-ag-qkv-t2048", "LLaMA-70B FSDP: gather QKV weights beside QKV GEMM, 2048 tokens",
                   {2048, k70bQkv, k70bHidden, kBf16}, kAllGather, bytesOf(k70bHidden * k70bQkv, kBf16)));
  g.push_back(make("llama70b-fsdp-ag-w1-t128", "LLaMA-70B FSDP, small micro-batch: memory-bound up GEMM",
                   {128, k70bFfn, k70bHidden, kBf16}, kAllGather, bytesOf(k70bHidden * k70bFfn, kBf16)));
  g.push_back(make("llama405b-fsdp-ag-qkv-t4096", "LLaMA-405B FSDP: gather QKV weights beside QKV GEMM",
                   {4096, k405bQkv, k405bHidden, kBf16}, kAllGather, bytesOf(k405bHidden * k405bQkv, kBf16)));
  g.push_back(make("llama405b-fsdp-ag-o-t1024", "LLaMA-405B FSDP: gather attention-output weights, 1024 tokens",
                   {1024, k405bHidden, k405bHidden, kBf16}, kAllGather, bytesOf(k405bHidden * k405bHidden, kBf16)));
  g.push_back(make("llama405b-fsdp-ag-fp8-w1-t2048",
                   "LLaMA-405B FSDP2 float8: gather fp8 up weights beside fp8 up GEMM",
                   {2048, k405bFfn, k405bHidden, kFp8}, kAllGather, bytesOf(k405bHidden * k405bFfn, kFp8), kFp8));

  // Tensor parallel (TP=8, sequence parallel): all-gather the activations [tokens, hidden] before the MLP's
  // column-parallel fused gate/up GEMM, reduce-scatter them after the row-parallel down GEMM.
  for (int64_t t : {int64_t(4096), int64_t(16384)}) {
    const std::string ts = std::to_string(t);
    g.push_back(make("llama70b-tp8-ag-t" + ts, "LLaMA-70B TP=8: activation all-gather beside the gate/up GEMM shard",
                     {t, 2 * k70bFfn / kTp, k70bHidden, kBf16}, kAllGather, bytesOf(t * k70bHidden, kBf16)));
    g.push_back(make("llama70b-tp8-rs-t" + ts, "LLaMA-70B TP=8: activation reduce-scatter beside the down GEMM shard",
                     {t, k70bHidden, k70bFfn / kTp, kBf16}, kReduceScatter, bytesOf(t * k70bHidden, kBf16)));
  }
  g.push_back(make("llama405b-tp8-ag-t8192", "LLaMA-405B TP=8: activation all-gather beside the gate/up GEMM shard",
                   {8192, 2 * k405bFfn / kTp, k405bHidden, kBf16}, kAllGather, bytesOf(8192 * k405bHidden, kBf16)));
  g.push_back(make("llama405b-tp8-rs-t8192", "LLaMA-405B TP=8: activation reduce-scatter beside the down GEMM shard",
                   {8192, k405bHidden, k405bFfn / kTp, kBf16}, kReduceScatter, bytesOf(8192 * k405bHidden, kBf16)));
  // Decode-sized batches: memory-bound GEMMs and latency-bound collectives (1-4 MiB).
  g.push_back(make("llama70b-tp8-ag-t128", "LLaMA-70B TP=8 decode: memory-bound gate/up shard, 2 MiB all-gather",
                   {128, 2 * k70bFfn / kTp, k70bHidden, kBf16}, kAllGather, bytesOf(128 * k70bHidden, kBf16)));
  g.push_back(make("llama70b-tp8-rs-t64", "LLaMA-70B TP=8 decode: memory-bound down shard, 1 MiB reduce-scatter",
                   {64, k70bHidden, k70bFfn / kTp, kBf16}, kReduceScatter, bytesOf(64 * k70bHidden, kBf16)));
  g.push_back(make("llama405b-tp8-ag-t128", "LLaMA-405B TP=8 decode: memory-bound gate/up shard, 4 MiB all-gather",
                   {128, 2 * k405bFfn / kTp, k405bHidden, kBf16}, kAllGather, bytesOf(128 * k405bHidden, kBf16)));

  // MoE expert parallelism over 8 ranks: token dispatch all-to-all beside expert GEMMs (of the previous
  // micro-batch). All-to-all bytes = everything a rank sends = tokens x top-k x hidden x dtype.
  // Mixtral 8x7B, EP=8: one expert per rank, so a balanced rank's expert GEMM has tokens x top-2 rows.
  g.push_back(make("mixtral-ep8-a2a-t8192", "Mixtral 8x7B EP=8: bf16 dispatch of 8192 tokens beside expert w1 GEMM",
                   {8192 * 2, kMixtralFfn, kMixtralHidden, kBf16}, kAllToAll,
                   bytesOf(8192 * 2 * kMixtralHidden, kBf16)));
  g.push_back(make("mixtral-ep8-a2a-t1024", "Mixtral 8x7B EP=8: bf16 dispatch of 1024 tokens beside expert w1 GEMM",
                   {1024 * 2, kMixtralFfn, kMixtralHidden, kBf16}, kAllToAll,
                   bytesOf(1024 * 2 * kMixtralHidden, kBf16)));
  // DeepSeek-V3, EP=8: 32 experts per rank; their grouped GEMM is modelled as one GEMM with the same FLOPs
  // (all 32768 routed rows of a rank), which overstates its arithmetic intensity (32 weight matrices).
  g.push_back(make("deepseekv3-ep8-a2a-fp8-t4096",
                   "DeepSeek-V3 EP=8: fp8 dispatch of 4096 tokens x top-8 beside fp8 expert gate/up GEMMs",
                   {4096 * kDsTopK, 2 * kDsFfn, kDsHidden, kFp8}, kAllToAll, bytesOf(4096 * kDsTopK * kDsHidden, kFp8),
                   kFp8));
  g.push_back(make("deepseekv3-ep8-a2a-combine-t4096",
                   "DeepSeek-V3 EP=8: bf16 combine of 4096 tokens x top-8 beside expert down GEMMs",
                   {4096 * kDsTopK, kDsHidden, kDsFfn, kBf16}, kAllToAll, bytesOf(4096 * kDsTopK * kDsHidden, kBf16)));
  g.push_back(make("deepseekv3-ep8-a2a-decode-t128",
                   "DeepSeek-V3 EP=8 decode: fp8 dispatch of 128 tokens beside the memory-bound shared-expert GEMM",
                   {128, 2 * kDsFfn, kDsHidden, kBf16}, kAllToAll, bytesOf(128 * kDsTopK * kDsHidden, kFp8), kFp8));
  return g;
}

std::vector<Scenario> smallGrid() {
  using enum CollKind;
  constexpr Dtype kBf16 = Dtype::kBf16;
  std::vector<Scenario> g;
  g.push_back(make("small-ag-16m", "4096^3 bf16 GEMM beside a 16 MiB all-gather", {4096, 4096, 4096, kBf16}, kAllGather,
                   16 * kMiB));
  g.push_back(make("small-a2a-64m", "8192^3 bf16 GEMM beside a 64 MiB all-to-all", {8192, 8192, 8192, kBf16}, kAllToAll,
                   64 * kMiB));
  g.push_back(make("small-rs-1m-mem", "memory-bound 128x8192x8192 GEMM beside a 1 MiB reduce-scatter",
                   {128, 8192, 8192, kBf16}, kReduceScatter, 1 * kMiB));
  g.push_back(make("small-ag-256m-mem", "memory-bound 32768x8192x128 GEMM beside a 256 MiB all-gather",
                   {32768, 8192, 128, kBf16}, kAllGather, 256 * kMiB));
  return g;
}

std::optional<std::vector<Scenario>> gridByName(std::string_view name) {
  if (name == "builtin") return builtinGrid();
  if (name == "small") return smallGrid();
  return std::nullopt;
}

}  // namespace conccl::c3
