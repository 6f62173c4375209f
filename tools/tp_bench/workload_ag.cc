// AG->GEMM: C[m, n] = allgather(A_shard[m/tp, k]) @ B[k, n] on every rank (the column-parallel up projection).
#include <conccl/ops/all_gather_matmul.hpp>

#include "tp_workload.h"

namespace conccl::tp {
namespace {

class AllGatherGemm final : public Workload {
 public:
  AllGatherGemm(TpWorld& world, const TpShape& shape, bool check) : Workload(world, shape, check) {
    const size_t m = size_t(shape.m), n = size_t(shape.n), k = size_t(shape.k);
    for (int r = 0; r < world.size(); ++r) {
      exec::DeviceGuard guard(world.rank(r).device);
      Rank rank;
      rank.a = exec::DeviceBuffer::allocate(m * k * 2);  // gathered in place: rank r's shard is its block r
      rank.b = exec::DeviceBuffer::allocate(k * n * 2);
      rank.c = exec::DeviceBuffer::allocate(m * n * 2);
      fillRandom(r, rank.a.get(), m * k, 1);
      fillRandom(r, rank.b.get(), k * n, 2);
      setOutput(r, rank.c.get());
      ranks_.push_back(std::move(rank));
    }
    world.synchronize();
  }

  void poison() override {
    const size_t shardBytes = shardElems() * 2, total = shardBytes * size_t(world_.size());
    for (int r = 0; r < world_.size(); ++r) {
      RankResources& rr = world_.rank(r);
      exec::DeviceGuard guard(rr.device);
      char* a = ranks_[size_t(r)].a.as<char>();
      const size_t own = size_t(r) * shardBytes;
      CUDA_CHECK(cudaMemsetAsync(a, 0xFF, own, rr.main.get()));  // 0xFFFF is a bf16 NaN
      CUDA_CHECK(cudaMemsetAsync(a + own + shardBytes, 0xFF, total - own - shardBytes, rr.main.get()));
      CUDA_CHECK(cudaMemsetAsync(ranks_[size_t(r)].c.get(), 0xFF, shape_.outputElems() * 2, rr.main.get()));
    }
  }

 private:
  struct Rank {
    exec::DeviceBuffer a, b, c;
    std::unique_ptr<ops::AllGatherMatmul> op;
  };

  size_t shardElems() const { return size_t(shape_.mShard()) * size_t(shape_.k); }
  char* shard(int r, int q) { return ranks_[size_t(r)].a.as<char>() + size_t(q) * shardElems() * 2; }

  void gemm() override {
    for (int r = 0; r < world_.size(); ++r) {
      RankResources& rr = world_.rank(r);
      exec::DeviceGuard guard(rr.device);
      enqueueGemm(rr, ranks_[size_t(r)].a.get(), ranks_[size_t(r)].b.get(), ranks_[size_t(r)].c.get(), shape_.m,
                  shape_.n, shape_.k, rr.main.get());
    }
  }

  bool collectiveFirst() const override { return true; }

  void collective() override {
    ncclGroup([&] {
      for (int r = 0; r < world_.size(); ++r) {
        RankResources& rr = world_.rank(r);
        exec::DeviceGuard guard(rr.device);
        C3_NCCL_CHECK(
            ncclAllGather(shard(r, r), ranks_[size_t(r)].a.get(), shardElems(), ncclBfloat16, rr.nccl, rr.main.get()));
      }
    });
  }

  // NCCL with the GEMM split by hand. The shards travel as tp in-place ncclBroadcasts (root q sends shard q) on
  // the comm stream, one group per shard because every rank must issue NCCL collectives in the same order;
  // shard q's event is recorded after its broadcast. The compute stream multiplies the rank's own shard at once
  // (it is in place) and every other shard after its event, in arrival order. NCCL's kernels and the GEMMs
  // share the SMs, as they would in a framework.
  void split() override {
    const int tp = world_.size();
    for (int r = 0; r < tp; ++r) {
      RankResources& rr = world_.rank(r);
      exec::DeviceGuard guard(rr.device);
      CUDA_CHECK(cudaEventRecord(rr.fork.get(), rr.main.get()));
      CUDA_CHECK(cudaStreamWaitEvent(rr.comm.get(), rr.fork.get(), 0));
      CUDA_CHECK(cudaStreamWaitEvent(rr.compute.get(), rr.fork.get(), 0));
      shardGemm(r, r);
    }
    for (int q = 0; q < tp; ++q) {
      ncclGroup([&] {
        for (int r = 0; r < tp; ++r) {
          RankResources& rr = world_.rank(r);
          exec::DeviceGuard guard(rr.device);
          C3_NCCL_CHECK(ncclBroadcast(shard(r, q), shard(r, q), shardElems(), ncclBfloat16, q, rr.nccl, rr.comm.get()));
        }
      });
      for (int r = 0; r < tp; ++r) {
        RankResources& rr = world_.rank(r);
        exec::DeviceGuard guard(rr.device);
        CUDA_CHECK(cudaEventRecord(rr.pieces[size_t(q)].get(), rr.comm.get()));
        if (q == r) continue;
        CUDA_CHECK(cudaStreamWaitEvent(rr.compute.get(), rr.pieces[size_t(q)].get(), 0));
        shardGemm(r, q);
      }
    }
    for (int r = 0; r < tp; ++r) {
      RankResources& rr = world_.rank(r);
      exec::DeviceGuard guard(rr.device);
      CUDA_CHECK(cudaEventRecord(rr.join.get(), rr.compute.get()));
      CUDA_CHECK(cudaStreamWaitEvent(rr.main.get(), rr.join.get(), 0));
      CUDA_CHECK(cudaEventRecord(rr.fork.get(), rr.comm.get()));  // the last broadcast (the rank's own was not awaited)
      CUDA_CHECK(cudaStreamWaitEvent(rr.main.get(), rr.fork.get(), 0));
    }
  }

  // C rows of shard q = shard q of A @ B, on rank r's compute stream.
  void shardGemm(int r, int q) {
    RankResources& rr = world_.rank(r);
    char* c = ranks_[size_t(r)].c.as<char>() + size_t(q) * size_t(shape_.mShard()) * size_t(shape_.n) * 2;
    enqueueGemm(rr, shard(r, q), ranks_[size_t(r)].b.get(), c, shape_.mShard(), shape_.n, shape_.k, rr.compute.get());
  }

  void prepareFused() override {
    for (int r = 0; r < world_.size(); ++r) {
      if (ranks_[size_t(r)].op) continue;
      exec::DeviceGuard guard(world_.rank(r).device);
      ranks_[size_t(r)].op = std::make_unique<ops::AllGatherMatmul>(world_.rank(r).conccl);
    }
  }

  ops::AllGatherMatmulArgs args(int r) {
    ops::AllGatherMatmulArgs a;
    a.aShard = shard(r, r);
    a.aFull = ranks_[size_t(r)].a.get();
    a.b = ranks_[size_t(r)].b.get();
    a.c = ranks_[size_t(r)].c.get();
    a.mShard = shape_.mShard();
    a.n = shape_.n;
    a.k = shape_.k;
    a.type = concclBfloat16;
    return a;
  }

  // One thread driving every rank: gather() for all ranks in one group (the shard events are recorded at its
  // end), then multiply() for each (all_gather_matmul.hpp).
  void fused() override {
    std::string why;
    concclGroup([&] {
      for (int r = 0; r < world_.size(); ++r) {
        exec::DeviceGuard guard(world_.rank(r).device);
        const concclResult_t res = ranks_[size_t(r)].op->gather(args(r), world_.rank(r).main.get(), &why);
        if (res != concclSuccess) throwOpError(res, "AllGatherMatmul::gather", why);
      }
    });
    for (int r = 0; r < world_.size(); ++r) {
      exec::DeviceGuard guard(world_.rank(r).device);
      const concclResult_t res = ranks_[size_t(r)].op->multiply(args(r), world_.rank(r).main.get(), &why);
      if (res != concclSuccess) throwOpError(res, "AllGatherMatmul::multiply", why);
    }
  }

  std::vector<Rank> ranks_;
};

}  // namespace

std::unique_ptr<Workload> makeAllGatherGemm(TpWorld& world, const TpShape& shape, bool check) {
  return std::make_unique<AllGatherGemm>(world, shape, check);
}

}  // namespace conccl::tp
