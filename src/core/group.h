// concclGroupStart/End: per-thread recording of calls, launched together at the outermost GroupEnd.
// A call made outside a group is a group of one.
#pragma once

#include <vector>

#include "core/clique.h"
#include "core/comm.h"

namespace conccl {

void groupStart();
// Ends one nesting level; at the outermost level launches what was recorded. Throws the first error; every
// communicator involved gets its own error message.
void groupEnd();
bool inGroup();
// Ends one nesting level; at the outermost level drops what was recorded instead of launching it. Returns how many
// calls were dropped. Throws concclInvalidUsage outside a group.
size_t groupDiscard();

// Removes the calling thread's recorded (not yet launched) calls on `comm`; returns how many. Used by
// destroy/abort so that concclGroupEnd never touches a freed communicator.
size_t groupForgetComm(concclComm* comm);

// Records (inside a group) or runs at once (outside) one rank's call. Outside a group the caller must hold a use of
// `comm` (CommUse: the API guard's).
void enqueueCall(concclComm* comm, RankArgs args);

}  // namespace conccl
