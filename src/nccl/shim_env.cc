#include "nccl/shim_env.h"

#include <array>
#include <cstdint>
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

std::optional<uint64_t> parseByteCount(std::string_view text) {
  text = trim(text);
  uint64_t unit = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K':
      case 'k':
        unit = 1ull << 10;
        break;
      case 'M':
      case 'm':
        unit = 1ull << 20;
        break;
      case 'G':
      case 'g':
        unit = 1ull << 30;
        break;
      default:
        break;
    }
    if (unit != 1) text.remove_suffix(1);
  }
  if (text.empty() || text.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v == 0 || v > UINT64_MAX / unit) return std::nullopt;
  return v * unit;
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
  if (const char* v = lookup("CONCCL_NCCL_SCRATCH_MAX_BYTES"); v != nullptr) {
    auto bytes = parseByteCount(v);
    if (!bytes) {
      env.enabled = false;
      env.error = "CONCCL_NCCL_SCRATCH_MAX_BYTES='" + std::string(v) + "' is not a positive byte count (e.g. 8G)";
      return env;
    }
    env.scratchMaxBytes = *bytes;
  }
  if (const char* v = lookup("CONCCL_NCCL_HIERARCHICAL"); v != nullptr) {
    std::string_view s = trim(v);
    if (s != "0" && s != "1") {
      env.enabled = false;
      env.error = "CONCCL_NCCL_HIERARCHICAL='" + std::string(v) + "' is neither 0 nor 1";
      return env;
    }
    env.hierarchical = s == "1";
  }
  if (const char* v = lookup("CONCCL_NCCL_HIER_CHUNKS"); v != nullptr) {
    std::string_view s = trim(v);
    int k = 0;
    bool ok = !s.empty() && s.size() <= 2;
    for (char ch : s) {
      ok = ok && ch >= '0' && ch <= '9';
      k = k * 10 + (ch - '0');
    }
    if (!ok || k < 1 || k > 64) {
      env.enabled = false;
      env.error = "CONCCL_NCCL_HIER_CHUNKS='" + std::string(v) + "' is not a count from 1 to 64";
      return env;
    }
    env.hierChunks = k;
  }
  return env;
}

}  // namespace conccl::nccl
