// The shapes conccl-tp-bench measures: the tensor-parallel MLP of LLaMA-style models, as one rank's GEMM and the
// collective that feeds it (AG->GEMM, the up projection) or drains it (GEMM->RS, the down projection). Pure C++,
// no CUDA types: unit-tested on the CPU (tests/unit/tp_bench/test_tp_shapes.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace conccl::tp {

// A model's MLP dimensions (the published LLaMA-3 configs).
struct ModelDims {
  std::string name;
  int64_t hidden = 0;
  int64_t ffn = 0;  // intermediate size
};

// llama3-70b (8192, 28672) and llama3-405b (16384, 53248).
const std::vector<ModelDims>& builtinModels();
std::optional<ModelDims> findModel(std::string_view name);

enum class TpOp {
  kAllGatherGemm,      // C[m, n] = allgather(A_shard[m/tp, k]) @ B[k, n]
  kGemmReduceScatter,  // C_shard[m/tp, n] = reduce_scatter(A[m, k] @ B_shard[k, n])
};
const char* opName(TpOp op);                         // "ag-gemm", "gemm-rs"
std::optional<TpOp> parseOp(std::string_view name);  // also accepts "ag" and "rs"

// One measured case. m, n, k are one rank's GEMM: for AG->GEMM k = hidden and n = ffn / tp (column-parallel up
// projection); for GEMM->RS k = ffn / tp and n = hidden (row-parallel down projection). m = tokens always.
struct TpShape {
  std::string model;  // a builtin model's name, or "custom" (--shapes)
  TpOp op = TpOp::kAllGatherGemm;
  int tp = 1;
  int64_t m = 0, n = 0, k = 0;

  int64_t mShard() const { return m / tp; }
  // GEMM floating-point operations of one rank (2 m n k).
  double flopsPerRank() const { return 2.0 * double(m) * double(n) * double(k); }
  // Device memory of one rank's buffers (bf16): AG: A gathered [m,k], B [k,n], C [m,n]; RS: A [m,k], B [k,n],
  // partial [m,n], C [m/tp,n]. With `check`, one more output-sized buffer holds the reference result.
  size_t bytesPerRank(bool check) const;
  // The elements of one rank's output (what --check compares): AG m*n, RS (m/tp)*n.
  size_t outputElems() const;
  // "llama3-70b ag-gemm m=4096 n=3584 k=8192".
  std::string label() const;
};

// A shape given on the command line: "ag:MxNxK" or "rs:MxNxK", with M, N, K one rank's GEMM as in TpShape
// (e.g. "ag:4096x3584x8192"). nullopt when malformed or a dimension is not positive.
std::optional<TpShape> parseShapeSpec(std::string_view spec, int tp);

// A case that cannot run, and why (printed by the tool, and written as a JSON line).
struct SkippedShape {
  std::string what;    // "llama3-70b ag-gemm tokens=3000", or the --shapes spec
  std::string reason;  // "tokens not divisible by tp=8"
};

// What was selected, and what could not be.
struct ShapeSelection {
  std::vector<TpShape> shapes;
  std::vector<SkippedShape> skipped;
};

// The builtin table: for each model, each token count and each op (in that order), the MLP shape at tensor
// parallelism tp. A case whose tokens or ffn is not divisible by tp is skipped with a reason.
ShapeSelection builtinShapes(const std::vector<ModelDims>& models, const std::vector<int64_t>& tokens,
                             const std::vector<TpOp>& ops, int tp);

// Shapes from --shapes specs (each one "ag:MxNxK" / "rs:MxNxK"); m not divisible by tp is skipped with a reason.
// Throws conccl::Error(concclInvalidArgument) on a malformed spec.
ShapeSelection customShapes(const std::vector<std::string>& specs, int tp);

}  // namespace conccl::tp
