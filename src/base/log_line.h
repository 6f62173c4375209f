// One log line, written whole: shared by conccl's logging (base/logging.cc) and the NCCL drop-in's NCCL-style lines.
#pragma once

#include <cstdio>
#include <string>

namespace conccl {

// Writes `line` (which ends in '\n') to `file` with one write(2) where it can: processes that share a stderr
// (torchrun's ranks, a log file the launcher opened once) then never interleave inside a line. A formatted print goes
// through the stream's buffer, which the process may have made shorter than a line (in torchrun jobs on one H200,
// 2026-12-03, lines came out cut after ~130 bytes). A line that cannot be written is dropped: logging never fails a call.
void writeWholeLine(FILE* file, const std::string& line);

}  // namespace conccl
