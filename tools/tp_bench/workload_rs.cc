// GEMM->RS: C_shard[m/tp, n] = reduce_scatter(A[m, k] @ B_shard[k, n]) on every rank (the row-parallel down
// projection: k is this rank's slice of the FFN dimension, the partial product [m, n] is summed over the ranks and
// each rank keeps its m/tp rows).
#include <conccl/ops/matmul_reduce_scatter.hpp>

#include "tp_workload.h"

namespace conccl::tp {
namespace {

class GemmReduceScatter final : public Workload {
 public:
  GemmReduceScatter(TpWorld& world, const TpShape& shape, bool check) : Workload(world, shape, check) {
    const size_t m = size_t(shape.m), n = size_t(shape.n), k = size_t(shape.k);
    for (int r = 0; r < world.size(); ++r) {
      exec::DeviceGuard guard(world.rank(r).device);
      Rank rank;
      rank.a = exec::DeviceBuffer::allocate(m * k * 2);
      rank.b = exec::DeviceBuffer::allocate(k * n * 2);
      rank.partial = exec::DeviceBuffer::allocate(m * n * 2);
      rank.c = exec::DeviceBuffer::allocate(shape.outputElems() * 2);
      fillRandom(r, rank.a.get(), m * k, 3);
      fillRandom(r, rank.b.get(), k * n, 4);
      fillRandom(r, rank.partial.get(), m * n, 5);  // the collective alone reduces it without a GEMM before it
      setOutput(r, rank.c.get());
      ranks_.push_back(std::move(rank));
    }
    world.synchronize();
  }

  void poison() override {
    for (int r = 0; r < world_.size(); ++r) {
      RankResources& rr = world_.rank(r);
      exec::DeviceGuard guard(rr.device);
      // 0xFFFF is a bf16 NaN: a block the strategy never wrote, or never reduced, shows.
      CUDA_CHECK(cudaMemsetAsync(ranks_[size_t(r)].partial.get(), 0xFF, size_t(shape_.m) * size_t(shape_.n) * 2,
                                 rr.main.get()));
      CUDA_CHECK(cudaMemsetAsync(ranks_[size_t(r)].c.get(), 0xFF, shape_.outputElems() * 2, rr.main.get()));
    }
  }

 private:
  struct Rank {
    exec::DeviceBuffer a, b, partial, c;
    std::unique_ptr<ops::MatmulReduceScatter> op;
  };

  size_t blockElems() const { return size_t(shape_.mShard()) * size_t(shape_.n); }
  char* block(int r, int q) { return ranks_[size_t(r)].partial.as<char>() + size_t(q) * blockElems() * 2; }

  void gemm() override {
    for (int r = 0; r < world_.size(); ++r) {
      RankResources& rr = world_.rank(r);
      exec::DeviceGuard guard(rr.device);
      enqueueGemm(rr, ranks_[size_t(r)].a.get(), ranks_[size_t(r)].b.get(), ranks_[size_t(r)].partial.get(), shape_.m,
                  shape_.n, shape_.k, rr.main.get());
    }
  }

  bool collectiveFirst() const override { return false; }

  void collective() override {
    ncclGroup([&] {
      for (int r = 0; r < world_.size(); ++r) {
        RankResources& rr = world_.rank(r);
        exec::DeviceGuard guard(rr.device);
        C3_NCCL_CHECK(ncclReduceScatter(ranks_[size_t(r)].partial.get(), ranks_[size_t(r)].c.get(), blockElems(),
                                        ncclBfloat16, ncclSum, rr.nccl, rr.main.get()));
      }
    });
  }

  // NCCL with the GEMM split by hand: the partial product in tp row blocks, block q = the rows rank q keeps. The
  // compute stream multiplies block q (A's rows of block q @ B_shard) and records block q's event; the comm stream
  // waits for it and runs ncclReduce(sum, root q) of the block into rank q's C_shard, while the compute stream
  // goes on to block q+1. Every Reduce involves every rank, and NCCL needs all ranks to issue their collectives in
  // one order, so the blocks go in the same order (0..tp-1) on every rank; a per-rank order (own block last, as in
  // a ring reduce-scatter) would make the first Reduce wait for the last GEMM block of its root. The last block's
  // Reduce is what the GEMM cannot hide.
  void split() override {
    const int tp = world_.size();
    for (int r = 0; r < tp; ++r) {
      RankResources& rr = world_.rank(r);
      exec::DeviceGuard guard(rr.device);
      CUDA_CHECK(cudaEventRecord(rr.fork.get(), rr.main.get()));
      CUDA_CHECK(cudaStreamWaitEvent(rr.comm.get(), rr.fork.get(), 0));
      CUDA_CHECK(cudaStreamWaitEvent(rr.compute.get(), rr.fork.get(), 0));
    }
    for (int q = 0; q < tp; ++q) {
      for (int r = 0; r < tp; ++r) {
        RankResources& rr = world_.rank(r);
        exec::DeviceGuard guard(rr.device);
        const char* a = ranks_[size_t(r)].a.as<char>() + size_t(q) * size_t(shape_.mShard()) * size_t(shape_.k) * 2;
        enqueueGemm(rr, a, ranks_[size_t(r)].b.get(), block(r, q), shape_.mShard(), shape_.n, shape_.k,
                    rr.compute.get());
        CUDA_CHECK(cudaEventRecord(rr.pieces[size_t(q)].get(), rr.compute.get()));
        CUDA_CHECK(cudaStreamWaitEvent(rr.comm.get(), rr.pieces[size_t(q)].get(), 0));
      }
      ncclGroup([&] {
        for (int r = 0; r < tp; ++r) {
          RankResources& rr = world_.rank(r);
          exec::DeviceGuard guard(rr.device);
          C3_NCCL_CHECK(ncclReduce(block(r, q), ranks_[size_t(r)].c.get(), blockElems(), ncclBfloat16, ncclSum, q,
                                   rr.nccl, rr.comm.get()));
        }
      });
    }
    for (int r = 0; r < tp; ++r) {
      RankResources& rr = world_.rank(r);
      exec::DeviceGuard guard(rr.device);
      CUDA_CHECK(cudaEventRecord(rr.join.get(), rr.comm.get()));  // the comm stream waited for every GEMM block
      CUDA_CHECK(cudaStreamWaitEvent(rr.main.get(), rr.join.get(), 0));
    }
  }

  void prepareFused() override {
    for (int r = 0; r < world_.size(); ++r) {
      if (ranks_[size_t(r)].op) continue;
      exec::DeviceGuard guard(world_.rank(r).device);
      ranks_[size_t(r)].op = std::make_unique<ops::MatmulReduceScatter>(world_.rank(r).conccl);
    }
  }

  ops::MatmulReduceScatterArgs args(int r) {
    ops::MatmulReduceScatterArgs a;
    a.a = ranks_[size_t(r)].a.get();
    a.b = ranks_[size_t(r)].b.get();
    a.partial = ranks_[size_t(r)].partial.get();
    a.c = ranks_[size_t(r)].c.get();
    a.mShard = shape_.mShard();
    a.n = shape_.n;
    a.kShard = shape_.k;
    a.type = concclBfloat16;
    return a;
  }

  // One thread driving every rank: multiply() for every rank (the GEMM pieces, one event each), then
  // reduceScatter() for every rank in one group (matmul_reduce_scatter.hpp).
  void fused() override {
    std::string why;
    for (int r = 0; r < world_.size(); ++r) {
      exec::DeviceGuard guard(world_.rank(r).device);
      const concclResult_t res = ranks_[size_t(r)].op->multiply(args(r), world_.rank(r).main.get(), &why);
      if (res != concclSuccess) throwOpError(res, "MatmulReduceScatter::multiply", why);
    }
    concclGroup([&] {
      for (int r = 0; r < world_.size(); ++r) {
        exec::DeviceGuard guard(world_.rank(r).device);
        const concclResult_t res = ranks_[size_t(r)].op->reduceScatter(args(r), world_.rank(r).main.get(), &why);
        if (res != concclSuccess) throwOpError(res, "MatmulReduceScatter::reduceScatter", why);
      }
    });
  }

  std::vector<Rank> ranks_;
};

}  // namespace

std::unique_ptr<Workload> makeGemmReduceScatter(TpWorld& world, const TpShape& shape, bool check) {
  return std::make_unique<GemmReduceScatter>(world, shape, check);
}

}  // namespace conccl::tp
