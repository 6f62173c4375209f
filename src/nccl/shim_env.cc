#include "nccl/shim_env.h"

#include <array>
#include <string>

namespace conccl::nccl {
namespace {

constexpr std::array<const char*, static_cast<size_t>(Coll::kCount)> kCollNames = {
    "all_reduce", "broadcast", "reduce",  "all_gather", "reduce_scatter",
    "all_to_all", "gather",    "scatter", "send_recv"};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

const char* collName(Coll c) {
  auto i = static_cast<size_t>(c);
  return i < kCollNames.size() ? kCollNames[i] : "invalid";
}

std::optional<uint32_t> parseCollList(std::string_view list, std::string* error) {
  uint32_t mask = 0;
  bool any = false;
  while (true) {
    size_t comma = list.find(',');
    std::string_view item = trim(list.substr(0, comma));
    if (!item.empty()) {
      any = true;
      if (item == "all") {
        mask = kAllColls;
      } else {
        bool found = false;
        for (size_t i = 0; i < kCollNames.size(); ++i) {
          if (item == kCollNames[i]) {
            mask |= 1u << i;
            found = true;
          }
        }
        if (!found) {
          if (error) *error = "CONCCL_NCCL_COLLS: unknown collective '" + std::string(item) + "'";
          return std::nullopt;
        }
      }
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  if (!any) {
    if (error) *error = "CONCCL_NCCL_COLLS is empty (use CONCCL_NCCL_SHIM=0 to forward everything)";
    return std::nullopt;
  }
  return mask;
}

ShimEnv parseShimEnv(const EnvLookup& lookup) {
  ShimEnv env;
  if (const char* v = lookup("CONCCL_NCCL_REAL_LIB"); v != nullptr) env.realLib = v;
  if (const char* v = lookup("CONCCL_NCCL_SHIM"); v != nullptr) {
    std::string_view s = trim(v);
    if (s == "0") {
      env.enabled = false;
    } else if (s != "1") {
      env.enabled = false;
      env.error = "CONCCL_NCCL_SHIM='" + std::string(v) + "' is neither 0 nor 1";
      return env;
    }
  }
  if (const char* v = lookup("CONCCL_NCCL_COLLS"); v != nullptr) {
    std::string error;
    auto mask = parseCollList(v, &error);
    if (!mask) {
      env.enabled = false;
      env.error = error;
      return env;
    }
    env.collMask = *mask;
  }
  return env;
}

}  // namespace conccl::nccl
