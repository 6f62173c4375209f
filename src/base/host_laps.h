// Where one call's host time goes: the calling thread's laps since its API entry. Under CONCCL_DEBUG=TRACE they are
// printed as one line when the call launches ("host laps of concclAllReduce #3: api and group 1 us, own checks 2 us,
// ..."). With CONCCL_HOST_LAPS=1 they are also tallied per call kind and size, without a log line per call (the
// per-call lines themselves cost host time: a hostname lookup and a write each), and tallyLines() gives each kind's
// medians, logged when a communicator is destroyed. With neither nothing is recorded: start() reads the level once
// per call and every lap() is a thread-local test. A lap is the time since the previous mark, named by a string
// literal (stored as a pointer).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace conccl {

class HostLaps {
 public:
  // Marks one record keeps; later marks are folded into the last one. A call's path has about 15 (API, group, clique,
  // launch); 32 leaves room for the finer marks one adds while looking for where a lap's time goes.
  static constexpr size_t kMaxLaps = 32;
  static constexpr int kIdleGapMs = 10;
  static constexpr const char* kAfterIdleSuffix = " after an idle wait";
  // At an API entry (apiCall): starts the calling thread's record when TRACE is on; a nested start keeps the outer
  // record.
  // Returns whether this call opened the record (then it must drop() it on its way out).
  static bool start();
  // Marks the time since the previous mark as `name` (a string literal); nothing when no record is open.
  static void lap(const char* name);
  // The open record as text ("name N us, ..., total N us"); "" when none was open. Closes it, unless it is to be
  // tallied (then drop() closes it).
  static std::string take();
  // With CONCCL_HOST_LAPS=1: the open record is to be tallied under `key` (e.g. "concclAllReduce 64 MiB") when the
  // call returns; the time since the last mark (making the key) is left out. A group whose end launches several
  // calls is one record: tallied once, under its last launch's key. A call that starts kIdleGap or more after the
  // thread's previous API call returned is tallied apart, under `key` + kAfterIdleSuffix: every step of a call on a
  // cold CPU is several times slower, and mixed with calls made back to back it would make every median meaningless.
  // Nothing otherwise.
  static void tally(const std::string& key);
  // At the API's exit: a record to be tallied gets a last lap, "return" (the way back from the launch to the
  // caller), and goes into the tally; any record is closed (calls that end without a launch are not tallied).
  static void drop();
  // A group's calls before its end (concclGroupStart, each call it queues; the NCCL drop-in's ncclGroupStart, ncclSend,
  // ncclRecv) return without a launch, so each is a record of its own that nobody sees, while the drop-in's own time
  // for the group spans them all. joinGroup(): the open record only joins a group (`opens`: it starts one, dropping
  // what an earlier group that never launched left carried); when it closes, its whole time is carried. endGroup():
  // the open record ends a group; at its launch the time carried since the group began becomes its first lap,
  // kGroupCallsLap, and counts in its total. Nothing when no record is open.
  static constexpr const char* kGroupCallsLap = "the group's earlier calls";
  static void joinGroup(bool opens);
  static void endGroup();
  // Whether CONCCL_HOST_LAPS=1 (read once per process).
  static bool tallying();
  // One line per tallied key, in the order first seen: "concclAllReduce 64 MiB, 9 calls, median: api and group 1 us,
  // ..., total 14 us" (each lap's median over the calls that had it, in the order first seen), and empties the tally.
  static std::vector<std::string> tallyLines();
};

}  // namespace conccl
