// C3 scenarios: one GEMM beside one collective, taken from real models, plus JSON load/save so that
// users can run their own (`conccl-c3 --scenarios FILE`). Pure C++: no CUDA types.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "c3/workload.h"

namespace conccl::c3 {

struct Scenario {
  std::string name;         // unique within a grid; [A-Za-z0-9._+-]
  std::string description;  // where the shapes come from
  GemmShape gemm;
  CollectiveSpec coll;
  friend bool operator==(const Scenario&, const Scenario&) = default;
};

// Throws conccl::Error(concclInvalidArgument) with the scenario's name and the problem.
void validateScenario(const Scenario& s);
// Also checks that names are unique.
void validateScenarios(const std::vector<Scenario>& scenarios);

// The built-in grid: LLaMA-70B/405B FSDP weight all-gathers beside the previous layer's GEMMs, TP=8
// activation all-gather/reduce-scatter beside the MLP GEMMs, Mixtral- and DeepSeek-like MoE all-to-all
// beside expert GEMMs; compute- and memory-bound GEMMs; collectives from 1 MB to ~1 GB, 8 ranks.
std::vector<Scenario> builtinGrid();
// A few cheap scenarios (seconds on one GPU) covering each collective kind and both GEMM bounds.
std::vector<Scenario> smallGrid();
// "builtin" or "small".
std::optional<std::vector<Scenario>> gridByName(std::string_view name);

// JSON: {"scenarios": [{"name", "description", "gemm": {"m","n","k","dtype"},
//                       "collective": {"kind","bytes","ranks","dtype"}}, ...]}.
// Reading also accepts a bare array; "description" and the dtypes may be left out (bf16).
// Errors (bad JSON, missing or wrong fields, invalid scenarios) throw conccl::Error(concclInvalidArgument).
std::string scenariosToJson(const std::vector<Scenario>& scenarios);
std::vector<Scenario> scenariosFromJson(std::string_view text);
std::vector<Scenario> loadScenarios(const std::string& path);
void saveScenarios(const std::string& path, const std::vector<Scenario>& scenarios);

}  // namespace conccl::c3
