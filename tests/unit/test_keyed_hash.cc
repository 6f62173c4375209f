// SHA-256 and HMAC-SHA256 (src/core/keyed_hash.h) against published known answers: FIPS 180-2 appendix B and
// the NIST example messages for SHA-256, RFC 4231 section 4 for HMAC-SHA256; the padding boundaries against an
// independent implementation (OpenSSL through Python's hashlib: hashlib.sha256(b"a" * n).hexdigest()).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/keyed_hash.h"

namespace conccl {
namespace {

std::string hex(const Sha256Digest& d, size_t bytes = 32) {
  std::string s;
  char buf[3];
  for (size_t i = 0; i < bytes; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", d[i]);
    s += buf;
  }
  return s;
}

std::string sha256Hex(const std::string& m) { return hex(sha256(m.data(), m.size())); }

std::string hmacHex(const std::string& key, const std::string& m, size_t bytes = 32) {
  return hex(hmacSha256(key.data(), key.size(), m.data(), m.size()), bytes);
}

std::string range(int first, int last) {  // bytes first..last inclusive
  std::string s;
  for (int b = first; b <= last; ++b) s += static_cast<char>(b);
  return s;
}

TEST(Sha256, Fips180KnownAnswers) {
  EXPECT_EQ(sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                      "mnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256Hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the 56-byte padding limit and the 64-byte block.
TEST(Sha256, PaddingBoundaries) {
  const std::vector<std::pair<size_t, const char*>> cases = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {57, "f13b2d724659eb3bf47f2dd6af1accc87b81f09f59f2b75e5c0bed6589dfe8c6"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
      {128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"},
  };
  for (const auto& [n, want] : cases) EXPECT_EQ(sha256Hex(std::string(n, 'a')), want) << "length " << n;
}

// Feeding the message in two pieces, split anywhere, gives the one-shot digest.
TEST(Sha256, IncrementalMatchesOneShot) {
  std::string m;
  for (int i = 0; i < 300; ++i) m += static_cast<char>((i * 131 + 7) & 0xff);
  const Sha256Digest whole = sha256(m.data(), m.size());
  for (size_t cut = 0; cut <= m.size(); ++cut) {
    Sha256 h;
    h.update(m.data(), cut);
    h.update(m.data() + cut, m.size() - cut);
    ASSERT_EQ(hex(h.finish()), hex(whole)) << "split at " << cut;
  }
}

TEST(HmacSha256, Rfc4231KnownAnswers) {
  // Test case 1.
  EXPECT_EQ(hmacHex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a key shorter than the output.
  EXPECT_EQ(hmacHex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3.
  EXPECT_EQ(hmacHex(std::string(20, '\xaa'), std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 4.
  EXPECT_EQ(hmacHex(range(0x01, 0x19), std::string(50, '\xcd')),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test case 5: the output truncated to 128 bits.
  EXPECT_EQ(hmacHex(std::string(20, '\x0c'), "Test With Truncation", 16), "a3b6167473100ee06e0c796c2955552b");
  // Test case 6: a key longer than a block (hashed first).
  EXPECT_EQ(hmacHex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // Test case 7: key and data longer than a block.
  EXPECT_EQ(hmacHex(std::string(131, '\xaa'),
                    "This is a test using a larger than block-size key and a larger than block-size data. The key "
                    "needs to be hashed before being used by the HMAC algorithm."),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256, IncrementalMatchesOneShot) {
  const std::string key(32, '\x42');
  const std::string m = "challenge-0|challenge-1|rank|nranks|pid";
  const std::string whole = hmacHex(key, m);
  for (size_t cut = 0; cut <= m.size(); ++cut) {
    HmacSha256 mac(key.data(), key.size());
    mac.update(std::string_view(m).substr(0, cut));
    mac.update(std::string_view(m).substr(cut));
    ASSERT_EQ(hex(mac.finish()), whole) << "split at " << cut;
  }
  // One changed key bit changes the MAC.
  std::string other = key;
  other[31] ^= 1;
  EXPECT_NE(hmacHex(other, m), whole);
}

TEST(EqualConstantTime, ComparesEveryByte) {
  const std::string a(32, 'x');
  EXPECT_TRUE(equalConstantTime(a.data(), a.data(), a.size()));
  EXPECT_TRUE(equalConstantTime(a.data(), "", 0));
  for (size_t i = 0; i < a.size(); ++i) {
    std::string b = a;
    b[i] ^= static_cast<char>(0x80);
    EXPECT_FALSE(equalConstantTime(a.data(), b.data(), a.size())) << "differs at byte " << i;
  }
}

}  // namespace
}  // namespace conccl
