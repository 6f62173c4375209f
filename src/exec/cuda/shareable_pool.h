// CONCCL_SHAREABLE_POOL (Config::shareablePool): cudaMallocAsync memory the peer processes can map. The device's
// default pool, which cudaMallocAsync and PyTorch's cudaMallocAsync backend allocate from, is created with no
// shareable handle type, so calls on its memory are staged through the peers' scratch (a program that grows with the
// call's size, every op enqueued before the call returns). A pool created with a POSIX descriptor handle type and made
// the device's current pool gives memory whose physical pieces conccl exports like VMM memory (vmm_export.h: the
// pieces' handles retained by the owner, their descriptors through the handle server, each call's pieces checked by
// block id), so that calls on it move directly on the copy engines.
#pragma once

#include <string>

namespace conccl::exec {

// Makes a pool with a POSIX descriptor handle type the current pool of `device` (of this process), if its current
// pool is still the default one; its release threshold the largest, as PyTorch sets on the pools it uses (freed memory
// stays cached in the pool). Once per device and process; later calls return what the first did. False (with `why`)
// when it was not made current; the device's pool is then unchanged.
bool makeShareablePoolCurrent(int device, std::string* why);

}  // namespace conccl::exec
