// The limits of conccl's two kernels that decide how a call runs (exec/call_path.h) and what the kernels' tables
// hold (exec/cuda/small_program_kernel.h). Plain constants, no includes: the CUDA sources include them too.
#pragma once

#include <cstddef>

namespace conccl::exec {

// Reduction CTAs when config.reduceCtas is 0 (auto): one CTA per kAutoReduceBytesPerCta of input read, at most
// kAutoReduceMaxCtas. Eight SMs at ~110 GB/s of input each keep pace with a peer's NVLink traffic at fan-in 2 (two
// bytes read per byte received, FACTS.md); fewer CTAs for less work, because a CTA with little to do costs its
// launch more than its reading. kAutoReduceMaxCtas is also config.smBudget's default (core/config.h's
// kDefaultSmBudget: core does not include exec, so the default is defined there and exec/call_path.cc asserts equality).
inline constexpr int kAutoReduceMaxCtas = 8;
inline constexpr size_t kAutoReduceBytesPerCta = size_t{256} << 10;

// The small-message kernel: one CTA, and tables of at most kSmallMaxOps ops and kSmallMaxPointers reduction inputs
// (the kernel's parameter must stay below 4 KiB, small_program_kernel.h).
inline constexpr int kSmallKernelCtas = 1;
inline constexpr int kSmallMaxOps = 64;
inline constexpr int kSmallMaxPointers = 64;
// Movement-only calls run as the small-message kernel up to this multiple of smallMessageBytes: across 2 H200s
// (2026-11-30, docs/results/2026-11-30-h200-x2-sweep-peer-reduce-c3/) its single CTA moved 128-256 KiB faster than the
// copy-engine path's calls (all-gather 256 KiB: 24 vs 37 us), while a single CTA reducing lost from 128 KiB on.
inline constexpr size_t kSmallMovementFactor = 4;

}  // namespace conccl::exec
