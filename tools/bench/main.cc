// conccl-bench: nccl-tests compatible benchmark of conccl's collectives beside NCCL, NCCL-CE and the host
// backend. Usage and output format: docs/bench.md.
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "backend_factory.h"
#include "driver.h"
#include "options.h"
#include "types.h"

namespace conccl::bench {
namespace {

std::string Hostname() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

std::string UtcNow() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int Main(int argc, char** argv) {
  ParseResult parsed = ParseOptions(argc, argv);
  std::cout << parsed.output;
  std::cerr << parsed.error;
  if (!parsed.options) return parsed.exit_code;
  BenchOptions& o = *parsed.options;

  if (o.backends.empty()) {
    if (CudaDeviceCount() > 0) {
      o.backends = {"conccl"};
    } else {
      o.backends = {"host"};
      std::cerr << "conccl-bench: no CUDA device found; using the host backend (--backend host)\n";
    }
  }

  std::ostringstream header;
  header << "# conccl-bench  nThread " << o.threads << " nGpus " << o.nranks / o.threads << " minBytes "
         << o.min_bytes << " maxBytes " << o.max_bytes << " step: ";
  if (o.step_factor > 1.0) {
    header << o.step_factor << "(factor)";
  } else {
    header << o.step_bytes << "(bytes)";
  }
  header << " warmup iters: " << o.warmup << " iters: " << o.iters << " validation: " << o.check
         << " graph: " << o.graph << "\n#\n";
  const std::vector<std::string> machine = MachineDescription();
  for (const std::string& line : machine) header << "# " << line << "\n";

  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends;
  nlohmann::json backend_meta = nlohmann::json::array();
  for (const std::string& name : o.backends) {
    try {
      owned.push_back(MakeBackend(name, o));
    } catch (const std::exception& e) {
      std::cerr << "conccl-bench: backend " << name << " unavailable: " << e.what() << "\n";
      header << "# backend " << name << " unavailable: " << e.what() << "\n";
      continue;
    }
    Backend* b = owned.back().get();
    backends.push_back(b);
    for (const std::string& line : b->Describe()) header << "# " << line << "\n";
    if (b->GpusShared()) {
      const std::string warning =
          "WARNING: " + b->Name() +
          ": several ranks share a GPU. Same-device copies run on SMs, so these are NOT copy-engine numbers "
          "(correctness only; see FACTS.md).";
      header << "# " << warning << "\n";
      std::cerr << "conccl-bench: " << warning << "\n";
    }
    backend_meta.push_back({{"name", b->Name()}, {"description", b->Describe()}, {"gpus_shared", b->GpusShared()}});
  }
  if (backends.empty()) {
    std::cerr << "conccl-bench: no backend could be started\n";
    return 1;
  }
  std::cout << header.str() << std::flush;

  std::ofstream json_file;
  if (!o.json_path.empty()) {
    json_file.open(o.json_path);
    if (!json_file) {
      std::cerr << "conccl-bench: cannot open " << o.json_path << " for writing\n";
      return 1;
    }
  }
  nlohmann::json types = nlohmann::json::array(), ops = nlohmann::json::array(), colls = nlohmann::json::array();
  for (concclDataType_t t : o.types) types.push_back(DTypeOf(t).name);
  for (concclRedOp_t op : o.ops) ops.push_back(RedOpName(op));
  for (const CollDesc* c : o.colls) colls.push_back(c->name);
  const nlohmann::json metadata = {
      {"metadata", true},         {"tool", "conccl-bench"},
      {"date", UtcNow()},         {"host", Hostname()},
      {"machine", machine},       {"command", o.command_line},
      {"nranks", o.nranks},       {"threads", o.threads},
      {"devices", RankDevices(o)},
      {"backends", backend_meta}, {"colls", colls},
      {"types", types},           {"ops", ops},
      {"iters", o.iters},         {"warmup", o.warmup},
      {"graph", o.graph},         {"check", o.check},
      {"seed", o.seed},
  };

  Outputs out;
  out.table = &std::cout;
  out.progress = &std::cerr;
  out.json = json_file.is_open() ? &json_file : nullptr;
  const size_t wrong = RunSweep(o, backends, out, metadata);
  return wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace conccl::bench

int main(int argc, char** argv) {
  try {
    return conccl::bench::Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "conccl-bench: " << e.what() << "\n";
    return 1;
  }
}
