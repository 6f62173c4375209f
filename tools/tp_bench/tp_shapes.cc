#include "tp_shapes.h"

#include <charconv>
#include <sstream>

#include "base/error.h"

namespace conccl::tp {

const std::vector<ModelDims>& builtinModels() {
  // hidden_size and intermediate_size of Meta's LLaMA-3 / 3.1 configs.
  static const std::vector<ModelDims> models = {{"llama3-70b", 8192, 28672}, {"llama3-405b", 16384, 53248}};
  return models;
}

std::optional<ModelDims> findModel(std::string_view name) {
  for (const ModelDims& m : builtinModels()) {
    if (m.name == name) return m;
  }
  return std::nullopt;
}

const char* opName(TpOp op) { return op == TpOp::kAllGatherGemm ? "ag-gemm" : "gemm-rs"; }

std::optional<TpOp> parseOp(std::string_view name) {
  if (name == "ag-gemm" || name == "ag") return TpOp::kAllGatherGemm;
  if (name == "gemm-rs" || name == "rs") return TpOp::kGemmReduceScatter;
  return std::nullopt;
}

size_t TpShape::bytesPerRank(bool check) const {
  const size_t mm = size_t(m), nn = size_t(n), kk = size_t(k);
  size_t elems = mm * kk + kk * nn + mm * nn;                  // A (gathered, or the full K-slice), B, C or partial
  if (op == TpOp::kGemmReduceScatter) elems += outputElems();  // C_shard beside the partial product
  if (check) elems += outputElems();
  return elems * 2;  // bf16
}

size_t TpShape::outputElems() const {
  return op == TpOp::kAllGatherGemm ? size_t(m) * size_t(n) : size_t(mShard()) * size_t(n);
}

std::string TpShape::label() const {
  std::ostringstream s;
  s << model << ' ' << opName(op) << " m=" << m << " n=" << n << " k=" << k;
  return s.str();
}

namespace {

bool parseDim(std::string_view text, int64_t* out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && *out > 0;
}

}  // namespace

std::optional<TpShape> parseShapeSpec(std::string_view spec, int tp) {
  const size_t colon = spec.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::optional<TpOp> op = parseOp(spec.substr(0, colon));
  if (!op) return std::nullopt;
  std::string_view dims = spec.substr(colon + 1);
  int64_t v[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    const size_t x = i < 2 ? dims.find('x') : dims.size();
    if (x == std::string_view::npos || !parseDim(dims.substr(0, x), &v[i])) return std::nullopt;
    dims = i < 2 ? dims.substr(x + 1) : std::string_view();
  }
  TpShape s;
  s.model = "custom";
  s.op = *op;
  s.tp = tp;
  s.m = v[0];
  s.n = v[1];
  s.k = v[2];
  return s;
}

ShapeSelection builtinShapes(const std::vector<ModelDims>& models, const std::vector<int64_t>& tokens,
                             const std::vector<TpOp>& ops, int tp) {
  CONCCL_REQUIRE(tp >= 1, "tensor parallelism must be >= 1");
  ShapeSelection out;
  for (const ModelDims& model : models) {
    for (int64_t t : tokens) {
      for (TpOp op : ops) {
        const std::string what = model.name + " " + opName(op) + " tokens=" + std::to_string(t);
        if (t <= 0 || t % tp != 0) {
          out.skipped.push_back({what, "tokens not divisible by tp=" + std::to_string(tp)});
          continue;
        }
        if (model.ffn % tp != 0) {
          out.skipped.push_back(
              {what, "ffn " + std::to_string(model.ffn) + " not divisible by tp=" + std::to_string(tp)});
          continue;
        }
        TpShape s;
        s.model = model.name;
        s.op = op;
        s.tp = tp;
        s.m = t;
        s.n = op == TpOp::kAllGatherGemm ? model.ffn / tp : model.hidden;
        s.k = op == TpOp::kAllGatherGemm ? model.hidden : model.ffn / tp;
        out.shapes.push_back(s);
      }
    }
  }
  return out;
}

ShapeSelection customShapes(const std::vector<std::string>& specs, int tp) {
  CONCCL_REQUIRE(tp >= 1, "tensor parallelism must be >= 1");
  ShapeSelection out;
  for (const std::string& spec : specs) {
    const std::optional<TpShape> s = parseShapeSpec(spec, tp);
    CONCCL_REQUIRE(s.has_value(), "--shapes: '" + spec + "' is not ag:MxNxK or rs:MxNxK with positive M, N, K");
    if (s->m % tp != 0) {
      out.skipped.push_back({spec, "m not divisible by tp=" + std::to_string(tp)});
      continue;
    }
    out.shapes.push_back(*s);
  }
  return out;
}

}  // namespace conccl::tp
