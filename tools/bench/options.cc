#include "options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <sstream>

#include "types.h"

namespace conccl::bench {

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    if (end > start) out.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::optional<size_t> ParseBytes(std::string_view text) {
  if (text.empty()) return std::nullopt;
  size_t pos = 0;
  unsigned long long value = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
    const unsigned long long next = value * 10 + static_cast<unsigned>(text[pos] - '0');
    if (next / 10 != value) return std::nullopt;  // overflow
    value = next;
    ++pos;
  }
  if (pos == 0) return std::nullopt;
  std::string_view suffix = text.substr(pos);
  int shift = 0;
  if (!suffix.empty()) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      case 'T':
        shift = 40;
        break;
      case 'B':
        break;
      default:
        return std::nullopt;
    }
    suffix.remove_prefix(1);
    if (shift != 0 && !suffix.empty() && (suffix == "B" || suffix == "b")) suffix.remove_prefix(1);
    if (!suffix.empty()) return std::nullopt;
  }
  if (shift && value > (~0ull >> shift)) return std::nullopt;
  return static_cast<size_t>(value << shift);
}

std::vector<size_t> SizeSweep(size_t min_bytes, size_t max_bytes, double factor, size_t step_bytes) {
  std::vector<size_t> sizes;
  size_t size = min_bytes;
  while (size <= max_bytes) {
    sizes.push_back(size);
    size_t next;
    if (factor > 1.0) {
      next = size == 0 ? 1 : static_cast<size_t>(static_cast<double>(size) * factor);
      if (next <= size) next = size + 1;
    } else {
      if (step_bytes == 0) break;
      next = size + step_bytes;
    }
    if (next < size) break;  // wrapped around
    size = next;
  }
  return sizes;
}

namespace {

// Runs the post-parse checks and conversions CLI11 cannot express; returns an error text or "".
std::string Finish(BenchOptions& o, const std::string& b, const std::string& e, const std::string& i,
                   const std::string& d, const std::string& op, const std::string& coll, const std::string& backend,
                   bool g_given) {
  auto min = ParseBytes(b), max = ParseBytes(e), step = ParseBytes(i);
  if (!min) return "-b: bad size '" + b + "'";
  if (!max) return "-e: bad size '" + e + "'";
  if (!step) return "-i: bad size '" + i + "'";
  o.min_bytes = *min;
  o.max_bytes = *max;
  o.step_bytes = *step;
  if (o.min_bytes > o.max_bytes) return "-b must not be larger than -e";
  if (o.step_factor <= 1.0 && o.step_bytes == 0 && o.min_bytes != o.max_bytes) return "-i 0 needs -f > 1";

  // nccl-tests: -g GPUs per thread, -t threads; rank r is driven by thread r / g.
  if (!o.devices.empty()) {
    if (g_given && o.nranks * o.threads != static_cast<int>(o.devices.size())) {
      return "-g " + std::to_string(o.nranks) + " x -t " + std::to_string(o.threads) + " does not match the " +
             std::to_string(o.devices.size()) + " devices of --devices";
    }
    if (o.devices.size() % static_cast<size_t>(o.threads) != 0) {
      return "-t " + std::to_string(o.threads) + " does not divide the " + std::to_string(o.devices.size()) +
             " devices of --devices";
    }
    o.nranks = static_cast<int>(o.devices.size());
  } else {
    o.nranks *= o.threads;
  }
  if (o.threads > 1 && o.graph) return "-G 1 needs -t 1 (one thread captures every rank's stream)";
  if (o.root < 0 || o.root >= o.nranks) {
    return "-r " + std::to_string(o.root) + ": root must be in [0, ranks) (ranks = -g x -t)";
  }

  o.types.clear();
  for (const std::string& name : SplitList(d)) {
    if (name == "all") {
      for (const DTypeInfo& t : AllDTypes()) o.types.push_back(t.type);
      continue;
    }
    const DTypeInfo* t = FindDType(name);
    if (!t) return "-d: unknown type '" + name + "'";
    o.types.push_back(t->type);
  }
  if (o.types.empty()) return "-d: no type";

  o.ops.clear();
  for (const std::string& name : SplitList(op)) {
    if (name == "all") {
      for (const RedOpInfo& r : AllRedOps()) o.ops.push_back(r.op);
      continue;
    }
    const RedOpInfo* r = FindRedOp(name);
    if (!r) return "-o: unknown op '" + name + "'";
    o.ops.push_back(r->op);
  }
  if (o.ops.empty()) return "-o: no op";

  o.colls.clear();
  for (const std::string& name : SplitList(coll)) {
    if (name == "all") {
      o.colls = AllColls();
      continue;
    }
    std::string n = name;
    std::replace(n.begin(), n.end(), '-', '_');
    if (n == "allgather") n = "all_gather";
    if (n == "alltoall") n = "all_to_all";
    if (n == "reducescatter") n = "reduce_scatter";
    if (n == "allreduce") n = "all_reduce";
    const CollDesc* c = FindColl(n);
    if (!c) return "--coll: unknown collective '" + name + "'";
    if (std::find(o.colls.begin(), o.colls.end(), c) == o.colls.end()) o.colls.push_back(c);
  }
  if (o.colls.empty()) return "--coll: no collective";

  o.backends.clear();
  for (const std::string& name : SplitList(backend)) {
    if (std::find(std::begin(kBackendNames), std::end(kBackendNames), name) == std::end(kBackendNames)) {
      return "--backend: unknown backend '" + name + "' (conccl, nccl, nccl-ce, host)";
    }
    if (std::find(o.backends.begin(), o.backends.end(), name) == o.backends.end()) o.backends.push_back(name);
  }
  return "";
}

}  // namespace

ParseResult ParseOptions(int argc, const char* const* argv) {
  BenchOptions o;
  CLI::App app{
      "conccl-bench: nccl-tests compatible collective benchmark for conccl (copy-engine collectives), "
      "with NCCL / NCCL-CE / host baselines side by side.",
      "conccl-bench"};
  std::string b = "32M", e = "32M", i = "1M", d = "float", op = "sum", coll = "all_gather", backend;
  int check = 1, graph = 0;
  app.add_option("-b,--minbytes", b, "Minimum size in bytes (K/M/G suffixes)")->capture_default_str();
  app.add_option("-e,--maxbytes", e, "Maximum size in bytes")->capture_default_str();
  app.add_option("-f,--stepfactor", o.step_factor, "Multiply the size by this factor (> 1), else add -i")
      ->capture_default_str();
  app.add_option("-i,--stepbytes", i, "Size increment when -f is not > 1")->capture_default_str();
  app.add_option("-n,--iters", o.iters, "Timed iterations per size")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  app.add_option("-w,--warmup_iters", o.warmup, "Warm-up iterations per size")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  CLI::Option* g_opt = app.add_option("-g,--ngpus", o.nranks, "Ranks per thread (all ranks: CUDA devices 0..g*t-1)")
                           ->check(CLI::Range(1, 1024))
                           ->capture_default_str();
  app.add_option("-t,--nthreads", o.threads, "Host threads, each driving -g ranks on its own streams (no group)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--devices", o.devices, "CUDA device of each rank, repeats allowed (e.g. 0,1,1,2)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  app.add_option("-c,--check", check, "Check results (0/1)")->check(CLI::IsMember({0, 1}))->capture_default_str();
  app.add_option("-G,--cudagraph", graph, "Capture the iteration loop in a CUDA graph (0/1)")
      ->check(CLI::IsMember({0, 1}))
      ->capture_default_str();
  app.add_option("-d,--datatype", d,
                 "Types, comma list or all: int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double "
                 "fp8e4m3 fp8e5m2")
      ->capture_default_str();
  app.add_option("-o,--op", op, "Reduction ops, comma list or all: sum prod max min avg")->capture_default_str();
  app.add_option("-r,--root", o.root, "Root rank of broadcast/reduce/gather/scatter")->capture_default_str();
  app.add_option("--coll", coll,
                 "Collectives, comma list or all: all_gather all_to_all reduce_scatter all_reduce broadcast "
                 "reduce gather scatter sendrecv")
      ->capture_default_str();
  app.add_option("--backend", backend,
                 "Backends side by side, comma list: conccl nccl nccl-ce host (default: conccl with a GPU, "
                 "else host)");
  app.add_option("--json", o.json_path, "Write JSON lines (metadata line, then one object per row) to FILE");
  app.add_option("--lanes", o.lanes, "conccl config.lanes (parallel copy queues per rank)")->check(CLI::Range(1, 16));
  app.add_option("--reduce-ctas", o.reduce_ctas, "conccl config.reduceCtas (CTAs of each reduction kernel)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--seed", o.seed, "Base seed of the random input data")->capture_default_str();

  ParseResult result;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    std::ostringstream out, errs;
    result.exit_code = app.exit(err, out, errs);
    result.output = out.str();
    result.error = errs.str();
    return result;
  }
  o.check = check != 0;
  o.graph = graph != 0;
  const std::string problem = Finish(o, b, e, i, d, op, coll, backend, g_opt->count() > 0);
  if (!problem.empty()) {
    result.exit_code = 2;
    result.error = "conccl-bench: " + problem + "\nRun with --help for more information.\n";
    return result;
  }
  for (int k = 0; k < argc; ++k) o.command_line += (k ? " " : "") + std::string(argv[k]);
  result.options = std::move(o);
  return result;
}

}  // namespace conccl::bench
