// Command line of conccl-bench (nccl-tests flags plus conccl's), parsed with CLI11 into a plain struct.
// No CUDA types: unit-tested on the CPU.
#ifndef CONCCL_TOOLS_BENCH_OPTIONS_H_
#define CONCCL_TOOLS_BENCH_OPTIONS_H_

#include <conccl/conccl.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coll.h"

namespace conccl::bench {

inline constexpr std::string_view kBackendNames[] = {"conccl", "nccl", "nccl-ce", "host"};

struct BenchOptions {
  size_t min_bytes = 32u << 20;                            // -b
  size_t max_bytes = 32u << 20;                            // -e
  double step_factor = 1.0;                                // -f (> 1: multiply; else add step_bytes)
  size_t step_bytes = 1u << 20;                            // -i
  int iters = 20;                                          // -n
  int warmup = 5;                                          // -w
  int nranks = 1;                                          // ranks in all: -g x -t (or the --devices count)
  int threads = 1;                                         // -t: host threads, each drives nranks / threads ranks
  std::vector<int> devices;                                // --devices (one per rank; empty: 0..nranks-1)
  bool check = true;                                       // -c
  bool graph = false;                                      // -G
  std::vector<concclDataType_t> types = {concclFloat32};   // -d
  std::vector<concclRedOp_t> ops = {concclSum};            // -o
  int root = 0;                                            // -r
  std::vector<const CollDesc*> colls = {&kAllGatherColl};  // --coll
  std::vector<std::string> backends;                       // --backend; empty: conccl when a GPU is present, else host
  std::string json_path;                                   // --json
  int lanes = CONCCL_CONFIG_UNDEF_INT;                     // --lanes
  int reduce_ctas = CONCCL_CONFIG_UNDEF_INT;               // --reduce-ctas
  uint64_t seed = 0x5eed;                                  // --seed
  std::string command_line;                                // the arguments, for the JSON metadata line
};

// Outcome of parsing: options, or an exit code with the text CLI11 produced (help or an error).
struct ParseResult {
  std::optional<BenchOptions> options;
  int exit_code = 0;
  std::string output;  // for stdout (--help)
  std::string error;   // for stderr
};

ParseResult ParseOptions(int argc, const char* const* argv);

// "8", "64K", "1M", "2G" (binary multiples; B suffix optional) -> bytes; nullopt when malformed.
std::optional<size_t> ParseBytes(std::string_view text);

// The sizes swept, like nccl-tests: from min to max, multiplying by factor when it is > 1, else adding step.
std::vector<size_t> SizeSweep(size_t min_bytes, size_t max_bytes, double factor, size_t step_bytes);

// Splits "a,b,c" (empty items dropped).
std::vector<std::string> SplitList(std::string_view text);

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_OPTIONS_H_
