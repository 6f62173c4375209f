// Scenario JSON load/save with nlohmann/json (Debian: nlohmann-json3-dev; header-only). A build without
// it still links: the functions then throw concclNotSupported.
#include "c3/scenario.h"
#include "c3/text_file.h"
#include "base/error.h"

#if __has_include(<nlohmann/json.hpp>)
#include <nlohmann/json.hpp>
#define CONCCL_C3_HAVE_JSON 1
#endif

namespace conccl::c3 {

#ifdef CONCCL_C3_HAVE_JSON
namespace {

using nlohmann::json;

// Reads a required field with a message that names the scenario and the field.
template <typename T>
T field(const json& obj, const char* key, const std::string& where) {
  CONCCL_REQUIRE(obj.is_object() && obj.contains(key), where + "missing field '" + key + "'");
  try {
    return obj.at(key).get<T>();
  } catch (const json::exception& e) {
    CONCCL_THROW(concclInvalidArgument, where + "field '" + key + "': " + e.what());
  }
}

Dtype dtypeField(const json& obj, const std::string& where) {
  if (!obj.contains("dtype")) return Dtype::kBf16;
  const std::string name = field<std::string>(obj, "dtype", where);
  const std::optional<Dtype> d = parseDtype(name);
  CONCCL_REQUIRE(d.has_value(), where + "unknown dtype '" + name + "' (bf16, fp16, fp8e4m3, fp32)");
  return *d;
}

int64_t positiveInt(const json& obj, const char* key, const std::string& where) {
  const int64_t v = field<int64_t>(obj, key, where);
  CONCCL_REQUIRE(v > 0, where + "'" + key + "' must be positive");
  return v;
}

json toJson(const Scenario& s) {
  return json{{"name", s.name},
              {"description", s.description},
              {"gemm", {{"m", s.gemm.m}, {"n", s.gemm.n}, {"k", s.gemm.k}, {"dtype", dtypeName(s.gemm.dtype)}}},
              {"collective",
               {{"kind", collLabel(s.coll.kind)},
                {"bytes", s.coll.bytes},
                {"ranks", s.coll.ranks},
                {"dtype", dtypeName(s.coll.dtype)}}}};
}

Scenario fromJson(const json& j, size_t index) {
  std::string where = "scenario #" + std::to_string(index) + ": ";
  CONCCL_REQUIRE(j.is_object(), where + "not an object");
  Scenario s;
  s.name = field<std::string>(j, "name", where);
  where = "scenario '" + s.name + "': ";
  if (j.contains("description")) s.description = field<std::string>(j, "description", where);
  const json gemm = field<json>(j, "gemm", where);
  s.gemm.m = positiveInt(gemm, "m", where + "gemm: ");
  s.gemm.n = positiveInt(gemm, "n", where + "gemm: ");
  s.gemm.k = positiveInt(gemm, "k", where + "gemm: ");
  s.gemm.dtype = dtypeField(gemm, where + "gemm: ");
  const json coll = field<json>(j, "collective", where);
  const std::string kind = field<std::string>(coll, "kind", where + "collective: ");
  const std::optional<CollKind> k = parseCollKind(kind);
  CONCCL_REQUIRE(k.has_value(), where + "unknown collective kind '" + kind + "'");
  s.coll.kind = *k;
  s.coll.bytes = uint64_t(positiveInt(coll, "bytes", where + "collective: "));
  s.coll.ranks = coll.contains("ranks") ? int(positiveInt(coll, "ranks", where + "collective: ")) : 8;
  s.coll.dtype = dtypeField(coll, where + "collective: ");
  validateScenario(s);
  return s;
}

}  // namespace

std::string scenariosToJson(const std::vector<Scenario>& scenarios) {
  json list = json::array();
  for (const Scenario& s : scenarios) list.push_back(toJson(s));
  return json{{"scenarios", list}}.dump(2) + "\n";
}

std::vector<Scenario> scenariosFromJson(std::string_view text) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    CONCCL_THROW(concclInvalidArgument, std::string("scenario JSON: ") + e.what());
  }
  const json* list = &doc;
  if (doc.is_object()) {
    CONCCL_REQUIRE(doc.contains("scenarios"), "scenario JSON: object without a \"scenarios\" array");
    list = &doc["scenarios"];
  }
  CONCCL_REQUIRE(list->is_array(), "scenario JSON: expected an array of scenarios");
  std::vector<Scenario> out;
  for (size_t i = 0; i < list->size(); ++i) out.push_back(fromJson((*list)[i], i));
  validateScenarios(out);
  return out;
}

#else  // !CONCCL_C3_HAVE_JSON

std::string scenariosToJson(const std::vector<Scenario>&) {
  CONCCL_THROW(concclNotSupported, "conccl was built without nlohmann/json");
}
std::vector<Scenario> scenariosFromJson(std::string_view) {
  CONCCL_THROW(concclNotSupported, "conccl was built without nlohmann/json");
}

#endif

std::vector<Scenario> loadScenarios(const std::string& path) {
  const std::string text = readTextFile(path, "scenario");
  try {
    return scenariosFromJson(text);
  } catch (Error& e) {
    e.addContext(path);
    throw;
  }
}

void saveScenarios(const std::string& path, const std::vector<Scenario>& scenarios) {
  writeTextFile(path, scenariosToJson(scenarios), "scenario");
}

}  // namespace conccl::c3
