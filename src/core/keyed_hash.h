// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the bootstrap's challenge-response (bootstrap.cc): the
// ranks of a job prove to each other that they hold the unique id's secret without sending it. No crypto library
// is a dependency of conccl, and this is all it needs: one hash, one MAC, a constant-time comparison. Checked
// against the published test vectors (FIPS 180-2 appendix B, RFC 4231) in tests/unit/test_keyed_hash.cc.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace conccl {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental SHA-256: any number of update() calls, then one finish().
class Sha256 {
 public:
  static constexpr size_t kBlockBytes = 64;
  Sha256();
  void update(const void* data, size_t n);
  Sha256Digest finish();

 private:
  void compress(const uint8_t* block);
  uint32_t state_[8];
  uint8_t buffer_[kBlockBytes];
  size_t buffered_ = 0;
  uint64_t totalBytes_ = 0;
};

Sha256Digest sha256(const void* data, size_t n);

// Incremental HMAC-SHA256 with a key of any length (keys longer than a block are hashed first, per RFC 2104).
class HmacSha256 {
 public:
  HmacSha256(const void* key, size_t keyLen);
  ~HmacSha256();
  HmacSha256(const HmacSha256&) = delete;
  HmacSha256& operator=(const HmacSha256&) = delete;
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Sha256Digest finish();

 private:
  Sha256 inner_;
  uint8_t outerPad_[Sha256::kBlockBytes];  // key ^ 0x5c, kept for finish()
};

Sha256Digest hmacSha256(const void* key, size_t keyLen, const void* data, size_t n);

// a[0..n) == b[0..n) in time that depends on n only, not on where the bytes differ (for comparing MACs).
bool equalConstantTime(const void* a, const void* b, size_t n);

}  // namespace conccl
