// The VMM handle server's messages (vmm_handle_server.cc) as the importer reads them (vmm_import.cc), over a
// SOCK_SEQPACKET Unix socket (base/peer_socket.h). Both ends run on one node with the same conccl, so structs are sent
// as they are laid out in memory. Private to src/exec/cuda.
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace conccl::exec::vmmwire {

inline constexpr uint32_t kVmmWireMagic = 0x564d4d31u;  // "VMM1"; bump the digit when the messages change
// A connection's whole exchange must fit in this (the server serves one connection at a time).
inline constexpr auto kServeDeadline = std::chrono::seconds(2);

struct VmmRequest {
  uint32_t magic = kVmmWireMagic;
  uint32_t reserved = 0;
  uint64_t unitId = 0;
};
enum VmmStatus : uint32_t { kServed = 0, kUnknownUnit = 1, kNotExported = 2 };
// First message of a reply; kServed is followed by the pieces, kMaxFdsPerMessage per message, then nothing.
struct VmmReplyHeader {
  uint32_t magic = kVmmWireMagic;
  uint32_t status = kServed;
  uint32_t handleType = 0;  // CUmemAllocationHandleType
  uint32_t pieces = 0;
  uint64_t bytes = 0;
};
// One piece in a reply: its extent in the unit and, for fabric handles, the handle (POSIX descriptors travel beside
// the message, in order).
struct VmmWirePiece {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  CUmemFabricHandle fabric{};
};


// The driver's name of a result, for messages.
std::string cuText(CUresult r);

// One piece's allocation handle exported as `type`: a new descriptor in *fd (POSIX; the caller closes it) or the
// fabric handle in *fabric. The owner's trial export when a unit is made and the server's answer both use it.
CUresult exportPiece(CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type, int* fd,
                     CUmemFabricHandle* fabric);

template <typename T>
std::string asBytes(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

}  // namespace conccl::exec::vmmwire
