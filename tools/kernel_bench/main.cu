// conccl-kernel-bench
//
//  1. The reduction kernel alone (reduce_bench.cu): fp32/bf16/fp16 sums at fan-in 2..8 on 1/4/8 CTAs, GB/s of
//     input read in total and per SM, plus the kernel's shape variants.
//  2. With --read-probe / --write-probe: what one SM reads / writes by how loads / stores are issued
//     (read_probe.cu, write_probe.cu); with --peer-probe: reductions
//     reading a peer GPU over NVLink, and a reduction beside a peer copy (peer_probe.cu); with --tma-reduce-probe: a
//     fan-in-2 reduction whose SM only issues TMA bulk loads and bulk reductions (tma_reduce_probe.cu).
//  3. Per-call latency of the collectives through the public API (latency_bench.cu).
//
// Output: a human-readable table on stdout plus one JSON object per line prefixed "#json " for scripts.
#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "kernel_bench.h"

int main(int argc, char** argv) {
  CLI::App app{"conccl-kernel-bench: reduction kernel GB/s per SM, read probe, per-call latency of the collectives"};
  int ranks = 2, iters = 200, runs = 7, lanes = 0;
  size_t inputMiB = 128, maxBytes = size_t{1} << 20;
  bool skipReduce = false, skipLatency = false, readProbe = false, writeProbe = false, peerProbe = false;
  bool flagProbe = false, tmaReduceProbe = false;
  app.add_option("-g,--ranks", ranks, "ranks for the latency sweep (distinct GPUs if available, else GPU 0 repeated)");
  app.add_option("-n,--iters", iters, "calls per size in the latency sweep");
  app.add_option("--runs", runs, "timed runs per kernel configuration (median reported)");
  app.add_option("--input-mib", inputMiB, "MiB per reduction input");
  app.add_option("--lanes", lanes, "copy lanes per rank (0: the library's default)");
  app.add_option("-e,--max-bytes", maxBytes, "largest message of the latency sweep");
  app.add_flag("--no-reduce", skipReduce, "skip the kernel benchmark");
  app.add_flag("--no-latency", skipLatency, "skip the latency sweep");
  app.add_flag("--read-probe", readProbe, "also run the per-SM read probe");
  app.add_flag("--write-probe", writeProbe, "also run the per-SM write probe (registers vs TMA bulk stores)");
  app.add_flag("--peer-probe", peerProbe, "also run the peer-read and contention probe (2 GPUs)");
  app.add_flag("--flag-probe", flagProbe, "also time one handshake, flags in host vs device memory (GPU 0-1 or 0-0)");
  app.add_flag("--tma-reduce-probe", tmaReduceProbe,
               "also run the fan-in-2 reduction through TMA bulk loads and bulk reductions (one GPU)");
  CLI11_PARSE(app, argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "conccl-kernel-bench: no CUDA device\n");
    return 2;
  }
  try {
    if (!skipReduce) conccl::kbench::runReduceBench(inputMiB, runs);
    if (readProbe) conccl::kbench::runReadProbe(runs);
    if (writeProbe) conccl::kbench::runWriteProbe(runs);
    if (peerProbe) conccl::kbench::runPeerProbe(runs);
    if (flagProbe) conccl::kbench::runFlagProbe(runs);
    if (tmaReduceProbe && !conccl::kbench::runTmaReduceProbe(runs)) {
      std::fprintf(stderr, "conccl-kernel-bench: the TMA load-reduce result differs from the host sum\n");
      return 1;
    }
    if (!skipLatency) conccl::kbench::runLatencyBench(ranks, iters, lanes, maxBytes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conccl-kernel-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
