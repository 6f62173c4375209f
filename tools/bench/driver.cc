#include "driver.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>

#include "host_clock.h"
#include "thread_team.h"
#include "types.h"

namespace conccl::bench {

namespace {

// Written into receive buffers before a checked run, so that an output that is never written shows up.
constexpr unsigned char kPoison = 0xA5;

// All allocations of one variant of one case; freed (and released by the backend) on scope exit.
class CaseBuffers {
 public:
  CaseBuffers(Backend& backend, int nranks) : backend_(backend), send_(nranks), recv_(nranks), owned_(nranks) {}
  ~CaseBuffers() {
    if (prepared_) backend_.Release();
    for (size_t r = 0; r < owned_.size(); ++r) {
      for (void* p : owned_[r]) backend_.Free(static_cast<int>(r), p);
    }
  }
  CaseBuffers(const CaseBuffers&) = delete;
  CaseBuffers& operator=(const CaseBuffers&) = delete;

  void* Alloc(int rank, size_t bytes) {
    // At least one cache line, so that empty cases still pass valid, distinct pointers.
    void* p = backend_.Alloc(rank, std::max<size_t>(bytes, 128));
    owned_[rank].push_back(p);
    return p;
  }
  void Prepare() {
    backend_.Prepare(owned_);
    prepared_ = true;
  }

  std::vector<void*>& send() { return send_; }
  std::vector<void*>& recv() { return recv_; }

 private:
  Backend& backend_;
  std::vector<void*> send_, recv_;
  std::vector<std::vector<void*>> owned_;
  bool prepared_ = false;
};

unsigned char* At(void* base, size_t elems, size_t elem_size) {
  return static_cast<unsigned char*>(base) + elems * elem_size;
}

VariantResult RunVariant(Backend& backend, const BenchOptions& o, const CollDesc& coll, const CaseArgs& args,
                         bool in_place, const std::vector<Bytes>& inputs,
                         const std::vector<std::optional<Bytes>>& expected,
                         const std::vector<std::vector<double>>& scales) {
  VariantResult v;
  v.present = !in_place || coll.in_place;
  if (!v.present) return v;
  const int n = args.nranks;
  const size_t es = DTypeOf(args.type).size;
  try {
    CaseBuffers bufs(backend, n);
    for (int r = 0; r < n; ++r) {
      if (in_place) {
        const size_t so = coll.send_offset_in_place(args, r), ro = coll.recv_offset_in_place(args, r);
        const size_t bytes = std::max(so + args.counts.send, ro + args.counts.recv) * es;
        void* base = bufs.Alloc(r, bytes);
        bufs.send()[r] = At(base, so, es);
        bufs.recv()[r] = At(base, ro, es);
      } else {
        bufs.send()[r] = bufs.Alloc(r, args.counts.send * es);
        bufs.recv()[r] = bufs.Alloc(r, args.counts.recv * es);
      }
    }
    bufs.Prepare();
    // Only a checked run needs the poison (and the time to write gigabytes of it).
    const Bytes poison(o.check ? args.counts.recv * es : 0, kPoison);
    auto upload = [&] {
      for (int r = 0; r < n; ++r) {
        if (!in_place && o.check) backend.CopyIn(r, bufs.recv()[r], poison.data(), poison.size());
        backend.CopyIn(r, bufs.send()[r], inputs[r].data(), inputs[r].size());
      }
    };
    // One launch of ranks [first, first + count), inside GroupStart/End when `group`.
    auto issue = [&](int first, int count, bool group) {
      if (group) backend.GroupStart();
      try {
        for (int r = first; r < first + count; ++r) coll.run(backend, args, r, bufs.send()[r], bufs.recv()[r]);
      } catch (...) {
        try {
          if (group) backend.GroupEnd();  // close the group; the first error is the one reported
        } catch (...) {
        }
        throw;
      }
      if (group) backend.GroupEnd();
    };
    // `iters` iterations: this thread issues every rank in one group (-t 1), or a team of threads (-t N) each
    // issues its own ranks; also the per-rank host time of a launch (median).
    const int per_thread = n / o.threads;
    // A rank's Send and Recv of the ring must be one group even on its own thread (nccl-tests does the same):
    // issued one by one, each rank's send would wait for a receive queued behind the peer's send.
    const bool thread_group = per_thread > 1 || coll.kind == CollKind::kSendRecv;
    auto timed = [&](int iters, bool graph) -> std::pair<std::vector<double>, double> {
      if (o.threads > 1) {
        TeamTiming team = TimeThreads(
            backend, o.threads, [&](int t) { issue(t * per_thread, per_thread, thread_group); }, iters);
        return {std::move(team.seconds), team.host_s};
      }
      HostClock clock;
      std::vector<double> seconds = backend.Time([&] { clock.Measure(n, [&] { issue(0, n, true); }); }, iters, graph);
      return {std::move(seconds), ComputeStats(clock.samples()).p50_s};
    };
    upload();
    if (o.warmup > 0) timed(o.warmup, o.graph);
    auto [seconds, host_s] = timed(o.iters, o.graph);
    v.time = ComputeStats(std::move(seconds));
    v.host_s = host_s;
    v.algbw = AlgBw(args.counts.size * es, v.time.mean_s);
    v.busbw = v.algbw * coll.bus_factor(n);
    if (o.check) {
      // The timed loop may have changed the data (in-place reductions); check one fresh run.
      upload();
      timed(1, false);
      size_t wrong = 0;
      Bytes got(args.counts.recv * es);
      for (int r = 0; r < n; ++r) {
        if (!expected[r]) continue;
        backend.CopyOut(r, got.data(), bufs.recv()[r], got.size());
        wrong += CountWrong(args.type, coll.reduces ? static_cast<int>(args.op) : -1, n, got.data(),
                            expected[r]->data(), args.counts.recv, coll.reduces ? &scales[r] : nullptr);
      }
      v.wrong = wrong;
    }
  } catch (const std::exception& e) {
    v.error = e.what();
  }
  return v;
}

// Random inputs of `count` elements. Unchecked cases above kTiledInputBytes repeat one random block instead
// (random values, never zeros): generating gigabytes per rank, backend and case on one core would take most
// of a GPU sweep's wall time, and copies and reductions run at the same speed on repeated data.
constexpr size_t kTiledInputBytes = 64u << 20;

Bytes InputData(bool check, concclDataType_t type, size_t count, uint64_t seed, int op, int nranks) {
  const size_t es = DTypeOf(type).size;
  if (check || count * es <= kTiledInputBytes) return RandomElements(type, count, seed, op, nranks);
  const size_t block_elems = kTiledInputBytes / es;
  const Bytes block = RandomElements(type, block_elems, seed, op, nranks);
  Bytes out;
  out.reserve(count * es);
  while (out.size() < count * es) {
    const size_t n = std::min(block.size(), count * es - out.size());
    out.insert(out.end(), block.begin(), block.begin() + static_cast<std::ptrdiff_t>(n));
  }
  return out;
}

std::string FactorText(const CollDesc& c) {
  const double f = c.bus_factor(4);
  if (f == 1.0) return "busbw = algbw";
  if (f == 1.5) return "busbw = algbw x 2(n-1)/n";
  return "busbw = algbw x (n-1)/n";
}

}  // namespace

RowResult RunCase(Backend& backend, const BenchOptions& o, const CollDesc& coll, concclDataType_t type, int op,
                  size_t bytes) {
  const DTypeInfo& info = DTypeOf(type);
  CaseArgs args;
  args.nranks = backend.NumRanks();
  args.counts = coll.counts(bytes / info.size, args.nranks);
  args.type = type;
  args.op = coll.reduces ? static_cast<concclRedOp_t>(op) : concclSum;
  args.root = coll.uses_root ? o.root : 0;

  RowResult row;
  row.backend = backend.Name();
  row.coll = coll.name;
  row.size_bytes = args.counts.size * info.size;
  row.count = args.counts.size;
  row.type = info.name;
  row.redop = coll.reduces ? RedOpName(args.op) : "none";
  row.root = coll.uses_root ? args.root : -1;
  row.nranks = args.nranks;
  row.threads = o.threads;
  row.gpus_shared = backend.GpusShared();

  // Fresh random inputs per size, one seeded generator per rank, and the host reference.
  std::vector<Bytes> inputs(args.nranks);
  const int data_op = coll.reduces ? op : -1;
  for (int r = 0; r < args.nranks; ++r) {
    inputs[r] = InputData(o.check, type, args.counts.send,
                          InputSeed(o.seed, r, bytes, static_cast<int>(coll.kind), type, data_op), data_op, args.nranks);
  }
  std::vector<std::optional<Bytes>> expected(args.nranks);
  std::vector<std::vector<double>> scales(args.nranks);
  if (o.check) {
    for (int r = 0; r < args.nranks; ++r) expected[r] = coll.reference(args, inputs, r, &scales[r]);
  }
  row.out_of_place = RunVariant(backend, o, coll, args, false, inputs, expected, scales);
  row.in_place = RunVariant(backend, o, coll, args, true, inputs, expected, scales);
  row.sms = backend.Sms(coll.kind, bytes);  // after the runs: NCCL-CE knows only then whether registration worked
  return row;
}

size_t RunSweep(const BenchOptions& o, const std::vector<Backend*>& backends, const Outputs& out,
                const nlohmann::json& metadata) {
  std::ostream& table = *out.table;
  if (out.json) *out.json << metadata.dump() << "\n";
  const std::vector<size_t> sizes = SizeSweep(o.min_bytes, o.max_bytes, o.step_factor, o.step_bytes);

  // Progress: the number of cases up front, then at most one line a second on stderr.
  size_t total = 0, done = 0;
  for (const CollDesc* c : o.colls) total += o.types.size() * (c->reduces ? o.ops.size() : 1);
  total *= sizes.size() * backends.size();
  const auto start = std::chrono::steady_clock::now();
  auto last_progress = start;

  size_t total_wrong = 0;
  for (const CollDesc* coll : o.colls) {
    table << "#\n# Collective " << coll->name << " (" << FactorText(*coll) << ", nranks " << o.nranks << ", threads "
          << o.threads << ")\n";
    for (const std::string& line : ColumnHeader()) table << line << "\n";
    std::map<std::string, std::pair<double, int>> busbw_sum;  // backend -> (sum, rows)
    std::map<std::string, bool> noted;
    for (concclDataType_t type : o.types) {
      const std::vector<int> ops = coll->reduces ? std::vector<int>(o.ops.begin(), o.ops.end()) : std::vector<int>{-1};
      for (int op : ops) {
        for (size_t bytes : sizes) {
          for (Backend* b : backends) {
            ++done;
            if (!b->Supports(coll->kind, type, op)) {
              const std::string key = b->Name() + "/" + DTypeOf(type).name + "/" + std::to_string(op);
              if (!noted[key]) {
                table << "# " << b->Name() << ": skipping " << coll->name << " " << DTypeOf(type).name
                      << (op >= 0 ? std::string(" ") + RedOpName(static_cast<concclRedOp_t>(op)) : "")
                      << " (not supported)\n";
                noted[key] = true;
              }
              continue;
            }
            const auto now = std::chrono::steady_clock::now();
            if (out.progress && total > 1 && now - last_progress > std::chrono::seconds(1)) {
              last_progress = now;
              *out.progress << "[conccl-bench] " << done << "/" << total << " " << coll->name << " "
                            << DTypeOf(type).name << " " << bytes << " B on " << b->Name() << " ("
                            << std::chrono::duration_cast<std::chrono::seconds>(now - start).count() << " s)\n"
                            << std::flush;
            }
            RowResult row = RunCase(*b, o, *coll, type, op, bytes);
            table << FormatRow(row) << "\n";
            if (row.sms.sm_path && !noted[b->Name() + "/sm"]) {
              table << "# " << b->Name() << ": " << row.sms.note << "\n";
              noted[b->Name() + "/sm"] = true;
            }
            for (const VariantResult* v : {&row.out_of_place, &row.in_place}) {
              if (!v->present) continue;
              if (!v->error.empty()) {
                table << "# " << b->Name() << " " << coll->name << " " << row.size_bytes << " B"
                      << (v == &row.in_place ? " in-place" : "") << ": error: " << v->error << "\n";
                ++total_wrong;
                continue;
              }
              total_wrong += v->wrong.value_or(0);
              busbw_sum[b->Name()].first += v->busbw;
              busbw_sum[b->Name()].second += 1;
            }
            if (out.json) {
              *out.json << JsonRow(row, false).dump() << "\n";
              if (coll->in_place) *out.json << JsonRow(row, true).dump() << "\n";
              *out.json << std::flush;  // a sweep stopped by its timeout keeps the rows it finished
            }
            table << std::flush;
          }
        }
      }
    }
    for (Backend* b : backends) {
      const auto& [sum, rows] = busbw_sum[b->Name()];
      char line[160];
      std::snprintf(line, sizeof(line), "# Avg bus bandwidth    : %g  (%s, %s)", rows ? sum / rows : 0.0,
                    b->Name().c_str(), coll->name);
      table << line << "\n";
    }
  }
  table << "#\n# Out of bounds values : " << total_wrong << (total_wrong ? " FAILED" : " OK") << "\n#\n";
  return total_wrong;
}

}  // namespace conccl::bench
