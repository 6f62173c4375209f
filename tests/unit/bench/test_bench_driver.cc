// conccl-bench driver end to end on the CPU: a fake backend that implements every collective with plain
// loops over host memory runs the whole sweep (all collectives, types, ops, odd rank counts, in place and
// out of place) and must report zero #wrong; a faulty one must be caught.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "driver.h"
#include "reference.h"
#include "types.h"

namespace conccl::bench {
namespace {

// memcpy with a NULL pointer is undefined even for 0 bytes (UBSan stops on it), and empty buffers may be NULL.
void copyBytes(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);
}

class FakeBackend : public Backend {
 public:
  explicit FakeBackend(int nranks, bool faulty = false) : nranks_(nranks), faulty_(faulty) {}
  std::string Name() const override { return faulty_ ? "faulty" : "fake"; }
  int NumRanks() const override { return nranks_; }
  std::vector<std::string> Describe() const override { return {"fake"}; }
  bool Supports(CollKind, concclDataType_t type, int op) const override { return op < 0 || DTypeOf(type).reducible; }
  SmUsage Sms(CollKind, size_t) const override { return {0, false, false, "fake"}; }
  void* Alloc(int, size_t bytes) override { return new unsigned char[bytes]; }
  void Free(int, void* p) override { delete[] static_cast<unsigned char*>(p); }
  void CopyIn(int, void* dst, const void* src, size_t n) override { copyBytes(dst, src, n); }
  void CopyOut(int, void* dst, const void* src, size_t n) override { copyBytes(dst, src, n); }
  void GroupStart() override { ops_.clear(); }
  void GroupEnd() override {
    // Snapshot all sends first, so that in-place operations read their inputs before anything is written.
    for (Op& op : ops_)
      op.in.assign(static_cast<const unsigned char*>(op.send),
                   static_cast<const unsigned char*>(op.send) + op.send_bytes);
    for (Op& op : ops_) Execute(op);
    ops_.clear();
  }

  void AllGather(int rank, const void* s, void* r, size_t n, concclDataType_t t) override {
    Add(CollKind::kAllGather, rank, s, r, n, n, t);
  }
  void ReduceScatter(int rank, const void* s, void* r, size_t n, concclDataType_t t, concclRedOp_t op) override {
    Add(CollKind::kReduceScatter, rank, s, r, n, n * nranks_, t, op);
  }
  void AllReduce(int rank, const void* s, void* r, size_t n, concclDataType_t t, concclRedOp_t op) override {
    Add(CollKind::kAllReduce, rank, s, r, n, n, t, op);
  }
  void Broadcast(int rank, const void* s, void* r, size_t n, concclDataType_t t, int root) override {
    Add(CollKind::kBroadcast, rank, s, r, n, n, t, concclSum, root);
  }
  void Reduce(int rank, const void* s, void* r, size_t n, concclDataType_t t, concclRedOp_t op, int root) override {
    Add(CollKind::kReduce, rank, s, r, n, n, t, op, root);
  }
  void AllToAll(int rank, const void* s, void* r, size_t n, concclDataType_t t) override {
    Add(CollKind::kAllToAll, rank, s, r, n, n * nranks_, t);
  }
  void Gather(int rank, const void* s, void* r, size_t n, concclDataType_t t, int root) override {
    Add(CollKind::kGather, rank, s, r, n, n, t, concclSum, root);
  }
  void Scatter(int rank, const void* s, void* r, size_t n, concclDataType_t t, int root) override {
    Add(CollKind::kScatter, rank, s, r, n, rank == root ? n * nranks_ : 0, t, concclSum, root);
  }
  void Send(int rank, const void* s, size_t n, concclDataType_t t, int peer) override {
    Add(CollKind::kSendRecv, rank, s, nullptr, n, n, t, concclSum, peer);
  }
  void Recv(int rank, void* r, size_t n, concclDataType_t t, int peer) override {
    Add(CollKind::kSendRecv, rank, nullptr, r, n, 0, t, concclSum, peer);
  }
  std::vector<double> Time(const std::function<void()>& launch, int iters, bool) override {
    for (int i = 0; i < iters; ++i) launch();
    return std::vector<double>(iters, 1e-6);
  }

 private:
  struct Op {
    CollKind kind;
    int rank;
    const void* send;
    void* recv;
    size_t count;
    size_t send_bytes;
    concclDataType_t type;
    concclRedOp_t op;
    int root;
    bool recv_only;  // the Recv half of a send/recv pair
    Bytes in;
  };

  void Add(CollKind k, int rank, const void* s, void* r, size_t n, size_t send_elems, concclDataType_t t,
           concclRedOp_t op = concclSum, int root = 0) {
    ops_.push_back({k, rank, s ? s : r, r, n, s ? send_elems * DTypeOf(t).size : 0, t, op, root, s == nullptr, {}});
  }

  const Op& Of(CollKind k, int rank, bool send_side = true) const {
    for (const Op& o : ops_) {
      if (o.kind == k && o.rank == rank && (k != CollKind::kSendRecv || o.recv_only != send_side)) return o;
    }
    throw std::logic_error("missing rank");
  }

  void Reduce(const Op& me, size_t offset, size_t count, unsigned char* out) {
    std::vector<const unsigned char*> in;
    for (int p = 0; p < nranks_; ++p) in.push_back(Of(me.kind, p).in.data());
    ReduceRanks(me.type, me.op, in, offset, count, out, nullptr);
  }

  void Execute(const Op& me) {
    const size_t es = DTypeOf(me.type).size, n = me.count, chunk = n * es;
    auto* out = static_cast<unsigned char*>(me.recv);
    switch (me.kind) {
      case CollKind::kAllGather:
        for (int p = 0; p < nranks_; ++p) copyBytes(out + p * chunk, Of(me.kind, p).in.data(), chunk);
        break;
      case CollKind::kAllToAll:
        for (int p = 0; p < nranks_; ++p)
          copyBytes(out + p * chunk, Of(me.kind, p).in.data() + me.rank * chunk, chunk);
        break;
      case CollKind::kReduceScatter:
        Reduce(me, me.rank * n, n, out);
        break;
      case CollKind::kAllReduce:
        Reduce(me, 0, n, out);
        break;
      case CollKind::kReduce:
        if (me.rank == me.root) Reduce(me, 0, n, out);
        break;
      case CollKind::kBroadcast:
        copyBytes(out, Of(me.kind, me.root).in.data(), chunk);
        break;
      case CollKind::kGather:
        if (me.rank != me.root) break;
        for (int p = 0; p < nranks_; ++p) copyBytes(out + p * chunk, Of(me.kind, p).in.data(), chunk);
        break;
      case CollKind::kScatter:
        copyBytes(out, Of(me.kind, me.root).in.data() + me.rank * chunk, chunk);
        break;
      case CollKind::kSendRecv:
        if (me.recv_only) copyBytes(out, Of(me.kind, me.root, true).in.data(), chunk);  // root = peer
        break;
      case CollKind::kAllToAllv:
        ADD_FAILURE() << "the bench has no AllToAllv";
        break;
    }
    if (faulty_ && out && n > 1 && (me.kind != CollKind::kSendRecv || me.recv_only) &&
        ((me.kind != CollKind::kReduce && me.kind != CollKind::kGather) || me.rank == me.root)) {
      out[0] ^= 0x40;  // one wrong element per rank
    }
  }

  int nranks_;
  bool faulty_;
  std::vector<Op> ops_;
};

BenchOptions SmallSweep(int nranks) {
  BenchOptions o;
  o.nranks = nranks;
  o.min_bytes = 0;
  o.max_bytes = 4096;
  o.step_factor = 4;
  o.iters = 2;
  o.warmup = 1;
  o.colls = AllColls();
  o.types.clear();
  for (const DTypeInfo& t : AllDTypes()) o.types.push_back(t.type);
  o.ops.clear();
  for (const RedOpInfo& r : AllRedOps()) o.ops.push_back(r.op);
  o.root = nranks - 1;
  return o;
}

TEST(BenchDriver, FullSweepOnFakeBackendHasNoWrongElements) {
  for (int nranks : {1, 2, 3, 5}) {
    FakeBackend fake(nranks);
    std::ostringstream table, json;
    Outputs out{&table, nullptr, &json};
    const size_t wrong = RunSweep(SmallSweep(nranks), {&fake}, out, {{"metadata", true}});
    EXPECT_EQ(wrong, 0u) << "nranks " << nranks << "\n" << table.str();
    EXPECT_NE(table.str().find("# Avg bus bandwidth"), std::string::npos);
    EXPECT_NE(table.str().find("skipping reduce_scatter fp8e4m3"), std::string::npos);
    // The first JSON line is the metadata; every other line is a row object.
    std::istringstream lines(json.str());
    std::string line;
    ASSERT_TRUE(std::getline(lines, line));
    EXPECT_TRUE(nlohmann::json::parse(line)["metadata"].get<bool>());
    size_t rows = 0;
    while (std::getline(lines, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      EXPECT_EQ(j["nranks"], nranks);
      EXPECT_EQ(j["wrong"], 0) << line;
      ++rows;
    }
    EXPECT_GT(rows, 100u);
  }
}

TEST(BenchDriver, FaultyBackendIsCaught) {
  FakeBackend faulty(3, true);
  BenchOptions o = SmallSweep(3);
  o.min_bytes = o.max_bytes = 1024;
  o.types = {concclFloat32, concclInt32};
  std::ostringstream table;
  Outputs out{&table, nullptr, nullptr};
  EXPECT_GT(RunSweep(o, {&faulty}, out, {}), 0u);
  EXPECT_NE(table.str().find("FAILED"), std::string::npos);
}

TEST(BenchDriver, RunCaseRowFields) {
  FakeBackend fake(4);
  BenchOptions o = SmallSweep(4);
  const RowResult row = RunCase(fake, o, kReduceScatterColl, concclBfloat16, concclAvg, 1000);
  EXPECT_EQ(row.count, 500u / 4 * 4);  // 500 bf16 elements, equal parts of 125
  EXPECT_EQ(row.size_bytes, 1000u);
  EXPECT_EQ(row.type, "bfloat16");
  EXPECT_EQ(row.redop, "avg");
  EXPECT_EQ(row.root, -1);
  ASSERT_TRUE(row.out_of_place.wrong);
  EXPECT_EQ(*row.out_of_place.wrong, 0u);
  ASSERT_TRUE(row.in_place.wrong);
  EXPECT_EQ(*row.in_place.wrong, 0u);
  EXPECT_DOUBLE_EQ(row.out_of_place.busbw, row.out_of_place.algbw * 3 / 4);
}

}  // namespace
}  // namespace conccl::bench
