// How a call can tell that each VMM piece it exported is still the one mapped at its address (PyTorch's expandable
// segments unmap and replace pieces after empty_cache and out-of-memory retries). exec/cuda/vmm_units.cc
// (vmmUnitStillMapped) retains the handle mapped at the piece's address and compares it: two driver calls a piece, and
// a 1 GiB tensor in 20 MiB pieces has 52 (docs/dev/next-steps.md, item 0b). CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID
// ("a process-wide unique id corresponding to the physical allocation the pointer belongs to", cuda.h) would be one
// call a piece, if it names the piece mapped there and changes when the piece is replaced: these tests settle that
// on the driver at hand, and print what each check costs on the host.
#include <cuda.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/cuda/driver_api.h"
#include "gpu/gpu_test_util.h"

namespace conccl::gputest {
namespace {

using exec::driverApi;

void cuOk(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw std::runtime_error(std::string(what) + " failed: CUresult " + std::to_string(r));
}

// Pieces of one granule each, shareable (POSIX descriptors, as PyTorch makes them), mapped back to back.
struct PiecedRange {
  CUdeviceptr va = 0;
  size_t granule = 0;
  std::vector<CUmemGenericAllocationHandle> pieces;
  CUmemAllocationProp prop{};

  explicit PiecedRange(size_t n) {
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    cuOk(driverApi().memGetAllocationGranularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity");
    cuOk(driverApi().memAddressReserve(&va, n * granule, 0, 0, 0), "reserve");
    pieces.assign(n, 0);
    for (size_t i = 0; i < n; ++i) mapPiece(i);
  }
  ~PiecedRange() {
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i] == 0) continue;
      driverApi().memUnmap(va + i * granule, granule);
      driverApi().memRelease(pieces[i]);
    }
    if (va != 0) driverApi().memAddressFree(va, pieces.size() * granule);
  }
  void mapPiece(size_t i) {
    cuOk(driverApi().memCreate(&pieces[i], granule, &prop, 0), "create");
    cuOk(driverApi().memMap(va + i * granule, granule, 0, pieces[i], 0), "map");
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    cuOk(driverApi().memSetAccess(va + i * granule, granule, &access, 1), "access");
  }
  void replacePiece(size_t i) {
    cuOk(driverApi().memUnmap(va + i * granule, granule), "unmap");
    cuOk(driverApi().memRelease(pieces[i]), "release");
    pieces[i] = 0;
    mapPiece(i);
  }
  CUdeviceptr at(size_t i) const { return va + i * granule; }
};

unsigned long long blockId(CUdeviceptr p) {
  CUpointer_attribute attribute = CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID;
  unsigned long long id = 0;
  void* data[] = {&id};
  EXPECT_EQ(driverApi().pointerGetAttributes(1, &attribute, data, p), CUDA_SUCCESS);
  return id;
}

CUmemGenericAllocationHandle mappedHandle(CUdeviceptr p) {
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(driverApi().memRetainAllocationHandle(&h, reinterpret_cast<void*>(p)), CUDA_SUCCESS);
  driverApi().memRelease(h);
  return h;
}

TEST(VmmPieceCheck, TheBlockIdNamesThePieceMappedThereAndChangesWhenItIsReplaced) {
  SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // the context
  PiecedRange range(4);
  std::vector<unsigned long long> ids;
  for (size_t i = 0; i < 4; ++i) {
    ids.push_back(blockId(range.at(i)));
    EXPECT_NE(ids.back(), 0u) << "piece " << i << ": no block id";
    EXPECT_EQ(blockId(range.at(i) + range.granule / 2), ids.back()) << "piece " << i << ": one id for the whole piece";
    for (size_t j = 0; j < i; ++j) EXPECT_NE(ids[j], ids[i]) << "pieces " << j << " and " << i << " share an id";
    EXPECT_EQ(mappedHandle(range.at(i)), range.pieces[i]);
  }
  range.replacePiece(2);
  EXPECT_NE(blockId(range.at(2)), ids[2]) << "the id did not change when the piece was replaced";
  EXPECT_EQ(mappedHandle(range.at(2)), range.pieces[2]);
  for (size_t i : {0, 1, 3}) EXPECT_EQ(blockId(range.at(i)), ids[i]) << "piece " << i << " was not replaced";
  std::fprintf(stderr, "block ids of 4 pieces: %llu %llu %llu %llu; piece 2 replaced: %llu\n", ids[0], ids[1], ids[2],
               ids[3], blockId(range.at(2)));
}

TEST(VmmPieceCheck, WhatEachCheckCostsOnTheHostPerPiece) {
  SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  constexpr size_t kPieces = 52;  // a 1 GiB tensor in PyTorch's 20 MiB pieces
  PiecedRange range(kPieces);
  std::vector<unsigned long long> ids(kPieces);
  for (size_t i = 0; i < kPieces; ++i) ids[i] = blockId(range.at(i));
  constexpr int kRounds = 200;
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  size_t sameHandle = 0;
  for (int r = 0; r < kRounds; ++r) {
    for (size_t i = 0; i < kPieces; ++i) sameHandle += mappedHandle(range.at(i)) == range.pieces[i] ? 1 : 0;
  }
  const double retainNs = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / (kRounds * kPieces);
  t0 = Clock::now();
  size_t sameId = 0;
  for (int r = 0; r < kRounds; ++r) {
    for (size_t i = 0; i < kPieces; ++i) sameId += blockId(range.at(i)) == ids[i] ? 1 : 0;
  }
  const double idNs = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / (kRounds * kPieces);
  EXPECT_EQ(sameHandle, kRounds * kPieces);
  EXPECT_EQ(sameId, kRounds * kPieces);
  std::fprintf(stderr,
               "host time per piece checked: retain + release %.0f ns, block id %.0f ns (a 1 GiB tensor in 20 MiB "
               "pieces: %.1f us against %.1f us a call)\n",
               retainNs, idNs, retainNs * kPieces / 1000, idNs * kPieces / 1000);
}

}  // namespace
}  // namespace conccl::gputest
