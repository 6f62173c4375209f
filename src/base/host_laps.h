// Where one call's host time goes, for CONCCL_DEBUG=TRACE: the calling thread's laps since its API entry, printed as
// one line when the call launches ("host laps of concclAllReduce #3: api and group 1 us, own checks 2 us, ...").
// Without TRACE nothing is recorded: start() reads the log level once per call and every lap() is a thread-local
// test. A lap is the time since the previous mark, named by a string literal (stored as a pointer).
#pragma once

#include <string>

namespace conccl {

class HostLaps {
 public:
  // At an API entry (apiCall): starts the calling thread's record when TRACE is on; a nested start keeps the outer
  // record.
  // Returns whether this call opened the record (then it must drop() it on its way out).
  static bool start();
  // Marks the time since the previous mark as `name` (a string literal); nothing when no record is open.
  static void lap(const char* name);
  // The open record as text ("name N us, ..., total N us") and closes it; "" when none was open.
  static std::string take();
  // Closes the record without reading it (calls that end without a launch).
  static void drop();
};

}  // namespace conccl
