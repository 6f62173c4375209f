// The schedule checker (see checker.h for what it proves).
//
// Design: one discrete-event simulation of all ranks, in some order the execution model allows, with
//   * vector clocks per thread, a thread being a (rank, stream) pair plus one "host" thread per rank whose
//     clock ticks at program start (2k+1 for call k) and program end (2k+2). Every race check compares the
//     current op's clock with the epochs recorded in memory, so a race is found whatever order the
//     simulation happened to pick (FastTrack-style: last write epoch + read epochs since that write);
//   * interval maps of symbolic values per memory: a segment holds Undefined, Initial(source) or
//     Reduced(op, sorted sources), with sources stored once and shifted by an offset when segments split.
#include "sched/checker.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>

#include "sched/builder_util.h"

namespace conccl::sched {

namespace {

using detail::typeSize;

// Internal: the first error found aborts the check.
struct CheckFailure {
  std::string message;
};

[[noreturn]] void fail(std::string message) { throw CheckFailure{std::move(message)}; }

std::string bufferName(int buffer) {
  if (buffer == kScratch) return "scratch";
  if (buffer == 0) return "buf0";
  if (buffer == 1) return "buf1";
  return "buf" + std::to_string(buffer);
}

std::string locStr(const Location& l) {
  return "r" + std::to_string(l.rank) + "." + bufferName(l.buffer) + "+" + std::to_string(l.offset);
}

std::string laneStr(int lane) { return lane == kMainStream ? "M" : "lane " + std::to_string(lane); }

// ---------------------------------------------------------------------------------------------------
// Symbolic values.

struct Src {
  int call = 0;
  int rank = 0;
  int buffer = 0;
  uint64_t off = 0;
  auto key() const { return std::tie(call, rank, buffer, off); }
  bool operator<(const Src& o) const { return key() < o.key(); }
};

struct Value {
  enum Kind : uint8_t { kUndefined, kInitial, kReduced };
  Kind kind = kUndefined;
  concclRedOp_t op = concclSum;
  uint64_t shift = 0;  // added to every source offset: the value `shift` bytes into the stored sources
  std::shared_ptr<const std::vector<Src>> srcs;

  Value shifted(uint64_t d) const {
    Value v = *this;
    v.shift += d;
    return v;
  }
};

Value initialValue(int call, const Location& l) {
  Value v;
  v.kind = Value::kInitial;
  v.srcs = std::make_shared<const std::vector<Src>>(1, Src{call, l.rank, l.buffer, l.offset});
  return v;
}

// Builds the value of op over `srcs` (already shifted), normalising a single source to Initial.
Value makeReduced(concclRedOp_t op, std::vector<Src> srcs) {
  std::sort(srcs.begin(), srcs.end());
  Value v;
  v.kind = srcs.size() == 1 ? Value::kInitial : Value::kReduced;
  v.op = op;
  v.srcs = std::make_shared<const std::vector<Src>>(std::move(srcs));
  return v;
}

bool sameValue(const Value& a, const Value& b) {
  if (a.kind != b.kind) return false;
  if (a.kind == Value::kUndefined) return true;
  if (a.kind == Value::kReduced && a.op != b.op) return false;
  if (a.srcs->size() != b.srcs->size()) return false;
  for (size_t i = 0; i < a.srcs->size(); ++i) {
    const Src& x = (*a.srcs)[i];
    const Src& y = (*b.srcs)[i];
    if (x.call != y.call || x.rank != y.rank || x.buffer != y.buffer || x.off + a.shift != y.off + b.shift)
      return false;
  }
  return true;
}

std::string valueStr(const Value& v, const char* callNames) {
  if (v.kind == Value::kUndefined) return "undefined";
  std::string s;
  auto one = [&](const Src& x) {
    return std::string(1, callNames[x.call]) + ":r" + std::to_string(x.rank) + "." + bufferName(x.buffer) + "+" +
           std::to_string(x.off + v.shift);
  };
  if (v.kind == Value::kInitial) return one((*v.srcs)[0]);
  s = std::string(detail::opName(v.op)) + "(";
  for (size_t i = 0; i < v.srcs->size(); ++i) {
    if (i == 6) {
      s += ", ... " + std::to_string(v.srcs->size()) + " sources";
      break;
    }
    s += (i ? ", " : "") + one((*v.srcs)[i]);
  }
  return s + ")";
}

// ---------------------------------------------------------------------------------------------------
// Clocks and memory.

using Clock = uint32_t;
using VC = std::vector<Clock>;

void join(VC& a, const VC& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::max(a[i], b[i]);
}

// Which op an epoch belongs to, for messages.
struct OpId {
  int call = -1;
  int rank = -1;
  int index = -1;
};

struct Epoch {
  int thread = -1;  // -1: none
  Clock clock = 0;
  OpId op;
};

struct Seg {
  size_t end = 0;
  Value val;
  int writeCall = -1;    // call of the last write (scratch: contents are defined only within that call)
  bool written = false;  // call buffers: written at least once
  Epoch write;
  std::vector<Epoch> reads;  // since the last write, latest per thread
};

struct Memory {
  size_t size = 0;
  bool isScratch = false;
  std::map<size_t, Seg> segs;  // start -> segment; covers [0, size)

  // Makes x a segment boundary (x <= size) and returns the segment starting there (or end()).
  std::map<size_t, Seg>::iterator split(size_t x) {
    auto it = segs.lower_bound(x);
    if (it != segs.end() && it->first == x) return it;
    if (it == segs.begin()) return it;
    auto prev = std::prev(it);
    if (x >= prev->second.end) return it;
    Seg right = prev->second;
    right.val = prev->second.val.shifted(x - prev->first);
    prev->second.end = x;
    return segs.emplace_hint(it, x, std::move(right));
  }
};

struct Piece {
  size_t rel = 0;
  size_t len = 0;
  Value val;
};

struct FlagState {
  bool pending = false;
  VC signalClock;
  OpId signaller;
  Epoch lastConsume;  // the Wait that consumed the previous signal
};

// ---------------------------------------------------------------------------------------------------

class Checker {
 public:
  Checker(std::vector<const CollectiveCall*> calls, std::vector<const Schedule*> scheds)
      : calls_(std::move(calls)), scheds_(std::move(scheds)) {}

  void run() {
    validateStructure();
    setup();
    simulate();
    finalChecks();
  }

 private:
  // ---- names -------------------------------------------------------------------------------------
  std::string opStr(const OpId& id) const {
    std::string s = "rank " + std::to_string(id.rank) + " op #" + std::to_string(id.index);
    if (calls_.size() > 1) s += std::string(" of call ") + kCallNames[id.call];
    if (id.call >= 0 && id.rank >= 0 && id.index >= 0) {
      s += " " + describeOp(scheds_[static_cast<size_t>(id.call)]
                                ->programs[static_cast<size_t>(id.rank)]
                                .ops[static_cast<size_t>(id.index)]);
    }
    return s;
  }

  // ---- (a) structure -----------------------------------------------------------------------------
  void checkLoc(int k, int rank, int index, const Location& l, size_t bytes, const char* role) {
    const CollectiveCall& call = *calls_[static_cast<size_t>(k)];
    const Schedule& s = *scheds_[static_cast<size_t>(k)];
    const OpId id{k, rank, index};
    if (l.rank < 0 || l.rank >= call.nranks)
      fail(opStr(id) + ": " + role + " rank " + std::to_string(l.rank) + " out of range");
    size_t size = 0;
    if (l.buffer == kScratch) {
      size = s.scratchBytes;
    } else {
      const auto& sizes = bufferSizes_[static_cast<size_t>(k)][static_cast<size_t>(l.rank)];
      if (l.buffer < 0 || static_cast<size_t>(l.buffer) >= sizes.size()) {
        fail(opStr(id) + ": " + role + " buffer index " + std::to_string(l.buffer) + " does not exist on rank " +
             std::to_string(l.rank));
      }
      size = sizes[static_cast<size_t>(l.buffer)];
      if (call.kind != CollKind::kSendRecv && detail::inPlaceRank(call, l.rank) &&
          l.buffer != inPlaceBuffer(call.kind)) {
        fail(opStr(id) + ": " + role + " references " + bufferName(l.buffer) + " of rank " + std::to_string(l.rank) +
             ", which runs in place and only uses " + bufferName(inPlaceBuffer(call.kind)));
      }
    }
    if (l.offset > size || bytes > size - l.offset) {
      fail(opStr(id) + ": " + role + " [" + std::to_string(l.offset) + ", +" + std::to_string(bytes) +
           ") exceeds the " + std::to_string(size) + " bytes of " + locStr(Location{l.rank, l.buffer, 0}));
    }
  }

  void validateStructure() {
    for (size_t k = 0; k < calls_.size(); ++k) {
      const CollectiveCall& call = *calls_[k];
      const Schedule& s = *scheds_[k];
      try {
        detail::validateCall(call);
      } catch (const std::exception& e) {
        fail(std::string("invalid call: ") + e.what());
      }
      if (s.nranks != call.nranks || s.programs.size() != static_cast<size_t>(call.nranks)) {
        fail("schedule has nranks " + std::to_string(s.nranks) + " and " + std::to_string(s.programs.size()) +
             " programs, call has " + std::to_string(call.nranks) + " ranks");
      }
      if (s.nranks != calls_[0]->nranks) fail("the two calls have different rank counts");
      if (s.lanes < 1) fail("schedule lanes must be >= 1");
      if (s.slots < 0) fail("schedule slots must be >= 0");
      std::vector<std::vector<size_t>> sizes;
      for (int r = 0; r < call.nranks; ++r) sizes.push_back(bufferBytes(call, r));
      bufferSizes_.push_back(std::move(sizes));
      const size_t es = typeSize(call.dtype);
      const int k32 = static_cast<int>(k);
      for (int r = 0; r < s.nranks; ++r) {
        const auto& ops = s.programs[static_cast<size_t>(r)].ops;
        for (size_t i = 0; i < ops.size(); ++i) {
          const OpId id{k32, r, static_cast<int>(i)};
          const int ii = static_cast<int>(i);
          auto checkLane = [&](int lane) {
            if (lane != kMainStream && (lane < 0 || lane >= s.lanes)) {
              fail(opStr(id) + ": lane " + std::to_string(lane) + " out of range (lanes = " + std::to_string(s.lanes) +
                   ")");
            }
          };
          auto checkSlot = [&](int slot) {
            if (slot < 0 || slot >= s.slots) {
              fail(opStr(id) + ": slot " + std::to_string(slot) + " out of range (slots = " + std::to_string(s.slots) +
                   ")");
            }
          };
          if (const auto* c = std::get_if<Copy>(&ops[i])) {
            checkLane(c->lane);
            if (c->bytes == 0) fail(opStr(id) + ": zero-byte copy");
            checkLoc(k32, r, ii, c->src, c->bytes, "source");
            checkLoc(k32, r, ii, c->dst, c->bytes, "destination");
            if (c->src.rank != r && c->dst.rank != r)
              fail(opStr(id) + ": a copy must have its issuing rank as source or destination");
            if (c->src.rank == c->dst.rank && c->src.buffer == c->dst.buffer &&
                c->src.offset < c->dst.offset + c->bytes && c->dst.offset < c->src.offset + c->bytes) {
              fail(opStr(id) + ": source and destination overlap");
            }
          } else if (const auto* sg = std::get_if<Signal>(&ops[i])) {
            checkLane(sg->lane);
            checkSlot(sg->slot);
            if (sg->peer < 0 || sg->peer >= s.nranks) fail(opStr(id) + ": signal peer out of range");
          } else if (const auto* w = std::get_if<Wait>(&ops[i])) {
            checkSlot(w->slot);
          } else if (const auto* mark = std::get_if<Ready>(&ops[i])) {
            if (mark->at.rank != r) fail(opStr(id) + ": marks another rank's memory");
            if (mark->at.buffer == kScratch) fail(opStr(id) + ": marks scratch (marks claim call results)");
            if (mark->bytes == 0) fail(opStr(id) + ": zero-byte mark");
            if (mark->tag < 0) fail(opStr(id) + ": negative mark tag");
            checkLoc(k32, r, ii, mark->at, mark->bytes, "mark");
          } else if (const auto* red = std::get_if<Reduce>(&ops[i])) {
            if (!detail::isReduction(call.kind)) fail(opStr(id) + ": Reduce in a collective without reduction");
            if (red->dtype != call.dtype || red->op != call.op)
              fail(opStr(id) + ": Reduce dtype/op differ from the call's");
            if (red->count == 0) fail(opStr(id) + ": zero-element Reduce");
            if (red->inputs.empty()) fail(opStr(id) + ": Reduce without inputs");
            const size_t bytes = red->count * es;
            for (const Location& in : red->inputs) {
              if (in.rank != r && !s.peerReads)
                fail(opStr(id) + ": Reduce reads another rank's memory (" + locStr(in) + ") without peerReads");
              checkLoc(k32, r, ii, in, bytes, "reduce input");
              const Location& out = red->output;
              if (in.rank == out.rank && in.buffer == out.buffer && !(in == out) && in.offset < out.offset + bytes &&
                  out.offset < in.offset + bytes) {
                fail(opStr(id) + ": Reduce output partially overlaps input " + locStr(in));
              }
            }
            if (red->output.rank != r) fail(opStr(id) + ": Reduce writes another rank's memory");
            checkLoc(k32, r, ii, red->output, bytes, "reduce output");
          }
        }
      }
    }
  }

  // ---- setup ---------------------------------------------------------------------------------------
  int thread(int rank, int stream) const { return rank * (lanes_ + 2) + 1 + (stream + 1); }  // stream -1 = M
  int hostThread(int rank) const { return rank * (lanes_ + 2); }

  void setup() {
    n_ = calls_[0]->nranks;
    want_.assign(calls_.size(), std::nullopt);
    lanes_ = 1;
    int slots = 0;
    size_t scratch = 0;
    for (const Schedule* s : scheds_) {
      lanes_ = std::max(lanes_, s->lanes);
      slots = std::max(slots, s->slots);
      scratch = std::max(scratch, s->scratchBytes);
    }
    threads_ = n_ * (lanes_ + 2);
    vcs_.assign(static_cast<size_t>(threads_), VC(static_cast<size_t>(threads_), 0));
    flags_.assign(static_cast<size_t>(n_), std::vector<FlagState>(static_cast<size_t>(slots)));
    for (auto& row : flags_) {
      for (auto& f : row) f.signalClock.assign(static_cast<size_t>(threads_), 0);
    }
    // Call buffers: one memory per (call, rank, buffer), holding Initial values.
    buffers_.resize(calls_.size());
    for (size_t k = 0; k < calls_.size(); ++k) {
      buffers_[k].resize(static_cast<size_t>(n_));
      for (int r = 0; r < n_; ++r) {
        const auto& sizes = bufferSizes_[k][static_cast<size_t>(r)];
        for (size_t b = 0; b < sizes.size(); ++b) {
          Memory m;
          m.size = sizes[b];
          if (m.size > 0) {
            Seg seg;
            seg.end = m.size;
            seg.val = initialValue(static_cast<int>(k), Location{r, static_cast<int>(b), 0});
            m.segs.emplace(0, std::move(seg));
          }
          buffers_[k][static_cast<size_t>(r)].push_back(std::move(m));
        }
      }
    }
    scratch_.resize(static_cast<size_t>(n_));
    for (Memory& m : scratch_) {
      m.size = scratch;
      m.isScratch = true;
      if (scratch > 0) m.segs.emplace(0, Seg{scratch, Value{}, -1, false, Epoch{}, {}});
    }
    remote_.assign(static_cast<size_t>(n_),
                   std::vector<std::vector<Epoch>>(calls_.size(), std::vector<Epoch>(static_cast<size_t>(threads_))));
    endClock_.assign(static_cast<size_t>(n_), std::vector<VC>(calls_.size()));
    // Per rank and call: ops per stream, and for lane ops the M op they must follow.
    ranks_.resize(static_cast<size_t>(n_));
    for (int r = 0; r < n_; ++r) ranks_[static_cast<size_t>(r)].call = -1;
  }

  struct RankState {
    int call = -1;                         // current call; calls_.size() when finished
    std::vector<std::vector<int>> stream;  // [stream + 1] -> program indices
    std::vector<size_t> pos;               // [stream + 1] -> next position
    std::vector<int> predM;                // [index] -> last M op before it (-1 none)
    std::vector<bool> snapNeeded;          // [index] (M ops) -> some lane op follows it
    std::map<int, VC> snaps;               // M op index -> clock after it
  };

  static int streamOf(const Op& op) {
    if (const auto* c = std::get_if<Copy>(&op)) return c->lane;
    if (const auto* s = std::get_if<Signal>(&op)) return s->lane;
    return kMainStream;
  }

  // Program start of call k on rank r: the host ticks, every stream starts after it.
  void startCall(int r, int k) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    st.call = k;
    st.stream.assign(static_cast<size_t>(lanes_ + 1), {});
    st.pos.assign(static_cast<size_t>(lanes_ + 1), 0);
    st.snaps.clear();
    if (static_cast<size_t>(k) >= calls_.size()) return;
    const auto& ops = scheds_[static_cast<size_t>(k)]->programs[static_cast<size_t>(r)].ops;
    st.predM.assign(ops.size(), -1);
    st.snapNeeded.assign(ops.size(), false);
    int lastM = -1;
    for (size_t i = 0; i < ops.size(); ++i) {
      const int s = streamOf(ops[i]);
      st.stream[static_cast<size_t>(s + 1)].push_back(static_cast<int>(i));
      if (s == kMainStream) {
        lastM = static_cast<int>(i);
      } else {
        st.predM[i] = lastM;
        if (lastM >= 0) st.snapNeeded[static_cast<size_t>(lastM)] = true;
      }
    }
    VC& h = vcs_[static_cast<size_t>(hostThread(r))];
    h[static_cast<size_t>(hostThread(r))]++;
    for (int s = -1; s < lanes_; ++s) join(vcs_[static_cast<size_t>(thread(r, s))], h);
  }

  void endCall(int r) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    VC& h = vcs_[static_cast<size_t>(hostThread(r))];
    for (int s = -1; s < lanes_; ++s) join(h, vcs_[static_cast<size_t>(thread(r, s))]);
    h[static_cast<size_t>(hostThread(r))]++;
    endClock_[static_cast<size_t>(r)][static_cast<size_t>(st.call)] = h;
    startCall(r, st.call + 1);
  }

  // ---- memory accesses -------------------------------------------------------------------------------
  Memory& memoryOf(int k, const Location& l) {
    if (l.buffer == kScratch) return scratch_[static_cast<size_t>(l.rank)];
    return buffers_[static_cast<size_t>(k)][static_cast<size_t>(l.rank)][static_cast<size_t>(l.buffer)];
  }

  // Common to reads and writes: rank r touching rank q's memory must be inside q's program of call k.
  void checkRemote(const Epoch& e, int k, const Location& l) {
    if (l.rank == e.op.rank) return;
    const VC& v = vcs_[static_cast<size_t>(e.thread)];
    const auto start = static_cast<Clock>(2 * k + 1);
    if (v[static_cast<size_t>(hostThread(l.rank))] < start) {
      fail(opStr(e.op) + ": accesses " + locStr(l) + " without being ordered after rank " + std::to_string(l.rank) +
           "'s program start (missing or misplaced ready handshake)");
    }
    Epoch& rec = remote_[static_cast<size_t>(l.rank)][static_cast<size_t>(k)][static_cast<size_t>(e.thread)];
    if (rec.thread < 0 || rec.clock < e.clock) rec = e;
  }

  void checkOrdered(const Epoch& prior, const Epoch& now, const char* what, size_t lo, size_t hi, const Location& l) {
    if (prior.thread < 0) return;
    if (vcs_[static_cast<size_t>(now.thread)][static_cast<size_t>(prior.thread)] >= prior.clock) return;
    fail(std::string("race: ") + what + " on bytes [" + std::to_string(lo) + ", " + std::to_string(hi) + ") of r" +
         std::to_string(l.rank) + "." + bufferName(l.buffer) + " between " + opStr(prior.op) + " and " + opStr(now.op) +
         ", which nothing orders");
  }

  std::vector<Piece> read(int k, const Location& l, size_t bytes, const Epoch& e) {
    checkRemote(e, k, l);
    Memory& m = memoryOf(k, l);
    auto it = m.split(l.offset);
    m.split(l.offset + bytes);
    std::vector<Piece> out;
    for (; it != m.segs.end() && it->first < l.offset + bytes; ++it) {
      Seg& seg = it->second;
      checkOrdered(seg.write, e, "write then read", it->first, seg.end, l);
      if (seg.val.kind == Value::kUndefined || (m.isScratch && seg.writeCall != k)) {
        fail(opStr(e.op) + ": reads bytes [" + std::to_string(it->first) + ", " + std::to_string(seg.end) + ") of " +
             locStr(Location{l.rank, l.buffer, 0}) + " before they were produced in this call");
      }
      out.push_back(Piece{it->first - l.offset, seg.end - it->first, seg.val});
      bool found = false;
      for (Epoch& rd : seg.reads) {
        if (rd.thread == e.thread) {
          rd = e;
          found = true;
        }
      }
      if (!found) seg.reads.push_back(e);
    }
    return out;
  }

  void write(int k, const Location& l, size_t bytes, std::vector<Piece> pieces, const Epoch& e) {
    checkRemote(e, k, l);
    Memory& m = memoryOf(k, l);
    auto first = m.split(l.offset);
    auto last = m.split(l.offset + bytes);
    for (auto it = first; it != last; ++it) {
      Seg& seg = it->second;
      checkOrdered(seg.write, e, "write and write", it->first, seg.end, l);
      for (const Epoch& rd : seg.reads) checkOrdered(rd, e, "read and write", it->first, seg.end, l);
      if (!m.isScratch && seg.written) {
        fail(opStr(e.op) + ": writes bytes [" + std::to_string(it->first) + ", " + std::to_string(seg.end) + ") of " +
             locStr(Location{l.rank, l.buffer, 0}) + " a second time (by " + opStr(seg.write.op) + " first)");
      }
    }
    m.segs.erase(first, last);
    for (Piece& p : pieces) {
      Seg seg;
      seg.end = l.offset + p.rel + p.len;
      seg.val = std::move(p.val);
      seg.writeCall = k;
      seg.written = true;
      seg.write = e;
      m.segs.emplace(l.offset + p.rel, std::move(seg));
    }
  }

  // ---- ops ----------------------------------------------------------------------------------------------
  // Runs op `index` of rank r (current call) if it can run now; returns whether it ran.
  bool tryRun(int r, int index) {
    RankState& st = ranks_[static_cast<size_t>(r)];
    const int k = st.call;
    const Op& op = scheds_[static_cast<size_t>(k)]->programs[static_cast<size_t>(r)].ops[static_cast<size_t>(index)];
    const int s = streamOf(op);
    const int t = thread(r, s);
    VC& v = vcs_[static_cast<size_t>(t)];
    FlagState* consumed = nullptr;
    if (s == kMainStream) {
      if (const auto* w = std::get_if<Wait>(&op)) {
        consumed = &flags_[static_cast<size_t>(r)][static_cast<size_t>(w->slot)];
        if (!consumed->pending) return false;
        join(v, consumed->signalClock);
      }
    } else {
      // A lane op follows every M op before it in program order.
      const auto& mStream = st.stream[0];
      const size_t mPos = st.pos[0];
      const int nextM = mPos < mStream.size() ? mStream[mPos] : INT32_MAX;
      if (nextM < index) return false;
      const int pm = st.predM[static_cast<size_t>(index)];
      if (pm >= 0) join(v, st.snaps.at(pm));
    }
    v[static_cast<size_t>(t)]++;
    const Epoch e{t, v[static_cast<size_t>(t)], OpId{k, r, index}};

    if (consumed != nullptr) {
      consumed->pending = false;
      consumed->lastConsume = e;
    } else if (const auto* sig = std::get_if<Signal>(&op)) {
      FlagState& f = flags_[static_cast<size_t>(sig->peer)][static_cast<size_t>(sig->slot)];
      if (f.pending) {
        fail(opStr(e.op) + ": sets flag " + std::to_string(sig->slot) + " of rank " + std::to_string(sig->peer) +
             " while the signal of " + opStr(f.signaller) + " is still unconsumed");
      }
      if (f.lastConsume.thread >= 0 && v[static_cast<size_t>(f.lastConsume.thread)] < f.lastConsume.clock) {
        fail(opStr(e.op) + ": sets flag " + std::to_string(sig->slot) + " of rank " + std::to_string(sig->peer) +
             " without being ordered after " + opStr(f.lastConsume.op) + ", which consumed its previous signal");
      }
      f.pending = true;
      f.signalClock = v;
      f.signaller = e.op;
    } else if (const auto* c = std::get_if<Copy>(&op)) {
      std::vector<Piece> pieces = read(k, c->src, c->bytes, e);
      write(k, c->dst, c->bytes, std::move(pieces), e);
    } else if (const auto* red = std::get_if<Reduce>(&op)) {
      runReduce(k, *red, e);
    } else if (const auto* mark = std::get_if<Ready>(&op)) {
      checkMark(k, *mark, e);
    }
    if (s == kMainStream && st.snapNeeded[static_cast<size_t>(index)]) st.snaps[index] = v;
    return true;
  }

  void runReduce(int k, const Reduce& red, const Epoch& e) {
    const size_t bytes = red.count * typeSize(red.dtype);
    std::vector<std::vector<Piece>> ins;
    std::vector<size_t> cuts;
    for (const Location& in : red.inputs) {
      ins.push_back(read(k, in, bytes, e));
      for (const Piece& p : ins.back()) cuts.push_back(p.rel);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    cuts.push_back(bytes);
    std::vector<size_t> cursor(ins.size(), 0);
    std::vector<Piece> out;
    for (size_t ci = 0; ci + 1 < cuts.size(); ++ci) {
      const size_t x = cuts[ci], y = cuts[ci + 1];
      std::vector<Src> srcs;
      for (size_t i = 0; i < ins.size(); ++i) {
        while (ins[i][cursor[i]].rel + ins[i][cursor[i]].len <= x) ++cursor[i];
        const Piece& p = ins[i][cursor[i]];
        const Value& v = p.val;
        const uint64_t d = v.shift + (x - p.rel);
        if (v.kind == Value::kReduced && (v.op != red.op || red.op == concclAvg)) {
          fail(opStr(e.op) + ": combines a partial " + detail::opName(v.op) + " result with op " +
               detail::opName(red.op) + " (not an exact single reduction)");
        }
        for (const Src& src : *v.srcs) srcs.push_back(Src{src.call, src.rank, src.buffer, src.off + d});
      }
      out.push_back(Piece{x, y - x, makeReduced(red.op, std::move(srcs))});
    }
    write(k, red.output, bytes, std::move(out), e);
  }

  // A Ready op: every write to its bytes is ordered before it, and they already hold what the call leaves there.
  void checkMark(int k, const Ready& mark, const Epoch& e) {
    Memory& m = memoryOf(k, mark.at);
    const size_t end = mark.at.offset + mark.bytes;
    auto it = m.split(mark.at.offset);
    m.split(end);
    const Location base{mark.at.rank, mark.at.buffer, 0};
    const Regions& regions = expectedRegions(k, base);
    for (; it != m.segs.end() && it->first < end; ++it) {
      checkOrdered(it->second.write, e, "write then mark", it->first, it->second.end, mark.at);
      compareWithExpected(k, base, it->first, it->second, regions, opStr(e.op) + ": marks ready ");
    }
  }

  // ---- simulation -----------------------------------------------------------------------------------
  void simulate() {
    for (int r = 0; r < n_; ++r) startCall(r, 0);
    const int ncalls = static_cast<int>(calls_.size());
    bool progress = true;
    while (progress) {
      progress = false;
      for (int r = 0; r < n_; ++r) {
        RankState& st = ranks_[static_cast<size_t>(r)];
        bool ran = true;
        while (ran && st.call < ncalls) {
          ran = false;
          for (int s = -1; s < lanes_; ++s) {
            auto& list = st.stream[static_cast<size_t>(s + 1)];
            size_t& p = st.pos[static_cast<size_t>(s + 1)];
            while (p < list.size() && tryRun(r, list[p])) {
              ++p;
              ran = true;
            }
          }
          bool done = true;
          for (size_t s = 0; s < st.stream.size(); ++s) done = done && st.pos[s] == st.stream[s].size();
          if (done) {
            endCall(r);
            ran = true;
          }
          progress = progress || ran;
        }
      }
    }
    std::string stuck;
    for (int r = 0; r < n_; ++r) {
      const RankState& st = ranks_[static_cast<size_t>(r)];
      if (st.call >= ncalls) continue;
      const auto& m = st.stream[0];
      if (st.pos[0] < m.size()) {
        stuck += "\n  " + opStr(OpId{st.call, r, m[st.pos[0]]}) + " never returns (its flag is never set)";
      } else {
        stuck += "\n  rank " + std::to_string(r) + ": lanes blocked";
      }
    }
    if (!stuck.empty()) fail("deadlock: the simulation cannot make progress:" + stuck);
  }

  // ---- end of run ----------------------------------------------------------------------------------
  void finalChecks() {
    for (int r = 0; r < n_; ++r) {
      for (size_t slot = 0; slot < flags_[static_cast<size_t>(r)].size(); ++slot) {
        const FlagState& f = flags_[static_cast<size_t>(r)][slot];
        if (f.pending) {
          fail("flag " + std::to_string(slot) + " of rank " + std::to_string(r) +
               " is still set at the end (signalled by " + opStr(f.signaller) + ", never waited for)");
        }
      }
    }
    for (int q = 0; q < n_; ++q) {
      for (size_t k = 0; k < calls_.size(); ++k) {
        const VC& end = endClock_[static_cast<size_t>(q)][k];
        for (const Epoch& e : remote_[static_cast<size_t>(q)][k]) {
          if (e.thread >= 0 && end[static_cast<size_t>(e.thread)] < e.clock) {
            fail(opStr(e.op) + ": accesses rank " + std::to_string(q) +
                 "'s memory without being ordered before the end of its program (missing done handshake)");
          }
        }
      }
    }
    for (size_t k = 0; k < calls_.size(); ++k) checkOutputs(static_cast<int>(k));
  }

  struct Expect {
    Location dst;
    size_t bytes;
    Value val;
  };

  std::vector<Expect> expectations(int k) const {
    const CollectiveCall& call = *calls_[static_cast<size_t>(k)];
    const int n = call.nranks;
    const size_t es = typeSize(call.dtype);
    const size_t c = call.count * es;
    std::vector<Expect> ex;
    auto copyOf = [&](const Location& dst, const Location& src, size_t bytes) {
      if (bytes > 0 && !(dst == src)) ex.push_back({dst, bytes, initialValue(k, src)});
    };
    auto reduced = [&](const Location& dst, size_t bytes, std::vector<Location> srcs) {
      if (bytes == 0) return;
      std::vector<Src> s;
      for (const Location& l : srcs) s.push_back(Src{k, l.rank, l.buffer, l.offset});
      Value v = makeReduced(call.op, std::move(s));
      if (v.kind == Value::kInitial && sameValue(v, initialValue(k, dst))) return;  // unchanged (n == 1 in place)
      ex.push_back({dst, bytes, std::move(v)});
    };
    using detail::recvLoc;
    using detail::sendLoc;
    switch (call.kind) {
      case CollKind::kAllGather:
        for (int r = 0; r < n; ++r) {
          for (int p = 0; p < n; ++p) copyOf(recvLoc(call, r, static_cast<size_t>(p) * c), sendLoc(call, p, 0), c);
        }
        break;
      case CollKind::kReduceScatter:
        for (int r = 0; r < n; ++r) {
          std::vector<Location> srcs;
          for (int q = 0; q < n; ++q) srcs.push_back(sendLoc(call, q, static_cast<size_t>(r) * c));
          reduced(recvLoc(call, r, 0), c, srcs);
        }
        break;
      case CollKind::kAllReduce:
        for (int r = 0; r < n; ++r) {
          std::vector<Location> srcs;
          for (int q = 0; q < n; ++q) srcs.push_back(sendLoc(call, q, 0));
          reduced(recvLoc(call, r, 0), c, srcs);
        }
        break;
      case CollKind::kReduce: {
        std::vector<Location> srcs;
        for (int q = 0; q < n; ++q) srcs.push_back(sendLoc(call, q, 0));
        reduced(recvLoc(call, call.root, 0), c, srcs);
        break;
      }
      case CollKind::kBroadcast:
        for (int r = 0; r < n; ++r) copyOf(recvLoc(call, r, 0), sendLoc(call, call.root, 0), c);
        break;
      case CollKind::kAllToAll:
        for (int r = 0; r < n; ++r) {
          for (int p = 0; p < n; ++p) {
            copyOf(Location{r, 1, static_cast<size_t>(p) * c}, Location{p, 0, static_cast<size_t>(r) * c}, c);
          }
        }
        break;
      case CollKind::kAllToAllv:
        for (int r = 0; r < n; ++r) {
          for (int p = 0; p < n; ++p) {
            const auto ur = static_cast<size_t>(r), up = static_cast<size_t>(p);
            copyOf(Location{r, 1, call.recvDispls[ur][up] * es}, Location{p, 0, call.sendDispls[up][ur] * es},
                   call.recvCounts[ur][up] * es);
          }
        }
        break;
      case CollKind::kGather:
        for (int p = 0; p < n; ++p)
          copyOf(recvLoc(call, call.root, static_cast<size_t>(p) * c), sendLoc(call, p, 0), c);
        break;
      case CollKind::kScatter:
        for (int r = 0; r < n; ++r)
          copyOf(recvLoc(call, r, 0), sendLoc(call, call.root, static_cast<size_t>(r) * c), c);
        break;
      case CollKind::kSendRecv: {
        const auto match = detail::matchP2P(call);
        for (int q = 0; q < n; ++q) {
          const auto& ops = call.p2p[static_cast<size_t>(q)];
          for (size_t j = 0; j < ops.size(); ++j) {
            if (ops[j].isSend) continue;
            const detail::P2PMatch m = match[static_cast<size_t>(q)][j];
            const P2POp& send = call.p2p[static_cast<size_t>(m.rank)][static_cast<size_t>(m.index)];
            copyOf(Location{q, ops[j].buffer, 0}, Location{m.rank, send.buffer, 0}, ops[j].count * es);
          }
        }
        break;
      }
    }
    return ex;
  }

  // Expected contents of one memory of a call: start -> (end, value); bytes not listed must be unchanged.
  using Regions = std::map<size_t, std::pair<size_t, Value>>;

  const Regions& expectedRegions(int k, const Location& base) {
    auto& perCall = want_[static_cast<size_t>(k)];
    if (!perCall) {
      perCall.emplace();
      for (Expect& e : expectations(k)) {
        (*perCall)[{e.dst.rank, e.dst.buffer}].emplace(e.dst.offset,
                                                        std::make_pair(e.dst.offset + e.bytes, std::move(e.val)));
      }
    }
    static const Regions kNone;
    auto it = perCall->find({base.rank, base.buffer});
    return it == perCall->end() ? kNone : it->second;
  }

  // Compares segment [start, seg.end) of memory `base` with what call k must leave there. `context` prefixes a
  // mismatch; the final check (context empty) also refuses writes to bytes the collective must leave unchanged.
  void compareWithExpected(int k, const Location& base, size_t start, const Seg& seg, const Regions& regions,
                           const std::string& context) {
    size_t x = start;
    while (x < seg.end) {
      auto it = regions.upper_bound(x);
      const std::pair<size_t, Value>* region = nullptr;
      size_t regionStart = 0;
      if (it != regions.begin()) {
        auto prev = std::prev(it);
        if (x < prev->second.first) {
          region = &prev->second;
          regionStart = prev->first;
        }
      }
      const size_t y = region != nullptr ? std::min(seg.end, region->first)
                                         : std::min(seg.end, it == regions.end() ? seg.end : it->first);
      const Value actual = seg.val.shifted(x - start);
      const Value expected = region != nullptr ? region->second.shifted(x - regionStart)
                                               : initialValue(k, Location{base.rank, base.buffer, x});
      const std::string where = "bytes [" + std::to_string(x) + ", " + std::to_string(y) + ") of " + locStr(base);
      if (context.empty() && region == nullptr && seg.written) {
        fail(opStr(seg.write.op) + ": writes " + where + ", which the collective must leave unchanged");
      }
      if (!sameValue(actual, expected)) {
        fail((context.empty() ? std::string("wrong result: ") : context) + where +
             (calls_.size() > 1 ? std::string(" (call ") + kCallNames[k] + ")" : "") + " hold " +
             valueStr(actual, kCallNames) + ", expected " + valueStr(expected, kCallNames));
      }
      x = y;
    }
  }

  void checkOutputs(int k) {
    for (int r = 0; r < n_; ++r) {
      auto& mems = buffers_[static_cast<size_t>(k)][static_cast<size_t>(r)];
      for (size_t b = 0; b < mems.size(); ++b) {
        const Location base{r, static_cast<int>(b), 0};
        const Regions& regions = expectedRegions(k, base);
        for (const auto& [start, seg] : mems[b].segs) compareWithExpected(k, base, start, seg, regions, "");
      }
    }
  }

  static constexpr const char* kCallNames = "AB";

  std::vector<const CollectiveCall*> calls_;
  std::vector<const Schedule*> scheds_;
  std::vector<std::vector<std::vector<size_t>>> bufferSizes_;  // [call][rank][buffer]
  int n_ = 0;
  int lanes_ = 1;
  int threads_ = 0;
  std::vector<VC> vcs_;
  std::vector<std::vector<FlagState>> flags_;              // [rank][slot]
  std::vector<std::vector<std::vector<Memory>>> buffers_;  // [call][rank][buffer]
  std::vector<Memory> scratch_;                            // [rank], persists across calls
  std::vector<std::vector<std::vector<Epoch>>> remote_;    // [rank][call][thread]: latest remote access
  std::vector<std::vector<VC>> endClock_;                  // [rank][call]
  // [call] -> expected contents per (rank, buffer), built on first use (expectedRegions).
  std::vector<std::optional<std::map<std::pair<int, int>, Regions>>> want_;
  std::vector<RankState> ranks_;
};

CheckResult runChecker(std::vector<const CollectiveCall*> calls, std::vector<const Schedule*> scheds) {
  try {
    Checker checker(std::move(calls), std::move(scheds));
    checker.run();
  } catch (const CheckFailure& f) {
    return CheckResult{false, f.message};
  } catch (const std::exception& e) {
    return CheckResult{false, std::string("checker: ") + e.what()};
  }
  return CheckResult{};
}

}  // namespace

std::string describeOp(const Op& op) {
  std::ostringstream os;
  if (const auto* c = std::get_if<Copy>(&op)) {
    os << "Copy{" << locStr(c->src) << " -> " << locStr(c->dst) << ", " << c->bytes << " B, " << laneStr(c->lane)
       << "}";
  } else if (const auto* s = std::get_if<Signal>(&op)) {
    os << "Signal{rank " << s->peer << ", slot " << s->slot << ", " << laneStr(s->lane) << "}";
  } else if (const auto* w = std::get_if<Wait>(&op)) {
    os << "Wait{slot " << w->slot << "}";
  } else if (const auto* r = std::get_if<Reduce>(&op)) {
    os << "Reduce{" << detail::opName(r->op) << " " << detail::dtypeName(r->dtype) << " x" << r->count << ": ";
    for (size_t i = 0; i < r->inputs.size(); ++i) os << (i ? ", " : "") << locStr(r->inputs[i]);
    os << " -> " << locStr(r->output) << "}";
  } else if (const auto* mark = std::get_if<Ready>(&op)) {
    os << "Ready{" << locStr(mark->at) << ", " << mark->bytes << " B, tag " << mark->tag << "}";
  }
  return os.str();
}

CheckResult checkSchedule(const CollectiveCall& call, const Schedule& schedule) {
  return runChecker({&call}, {&schedule});
}

CheckResult checkSchedulePair(const CollectiveCall& callA, const Schedule& a, const CollectiveCall& callB,
                              const Schedule& b) {
  return runChecker({&callA, &callB}, {&a, &b});
}

}  // namespace conccl::sched
