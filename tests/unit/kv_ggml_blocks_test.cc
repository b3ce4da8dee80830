// q4_0 and q8_0 in plane form (kv/codecs/q4_0_codec.h, q8_0_codec.h): the planes hold
// exactly ggml's blocks (both conversions are exact inverses, and the plane codes are the
// block's codes in channel order), Decode gives ggml's dequantization of ggml's quantization
// bit for bit, and the payload is ggml's 18 or 34 bytes per block.
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kv/codec_registry.h"
#include "kv/codecs/q4_0_codec.h"
#include "kv/codecs/q8_0_codec.h"
#include "ops/code_unpack.h"
#include "ops/ggml_quants.h"

namespace kvpack {
namespace {

constexpr int kHeads = 2;

TEST(Q4_0Test, PlanesAndBlocksConvertExactly) {
  std::mt19937 rng(3);
  for (int n_blocks : {1, 2, 4}) {
    std::vector<BlockQ4_0> blocks(n_blocks), back(n_blocks);
    for (auto& b : blocks) {
      b.d = static_cast<uint16_t>(rng());
      for (auto& q : b.qs) q = static_cast<uint8_t>(rng());
    }
    std::vector<uint8_t> codes(16 * n_blocks);
    std::vector<uint16_t> scales(n_blocks);
    Q4_0BlocksToPlanes(blocks.data(), n_blocks, codes.data(), scales.data());
    Q4_0PlanesToBlocks(codes.data(), scales.data(), n_blocks, back.data());
    ASSERT_EQ(0, std::memcmp(blocks.data(), back.data(), n_blocks * sizeof(BlockQ4_0)));
    for (int b = 0; b < n_blocks; ++b) {
      ASSERT_EQ(scales[b], blocks[b].d);
      for (int j = 0; j < 32; ++j) {  // ggml: element j < 16 low nibble of byte j, else high of j - 16
        const int ggml = j < 16 ? blocks[b].qs[j] & 15 : blocks[b].qs[j - 16] >> 4;
        const int c = 32 * b + j;
        ASSERT_EQ((codes[c / 2] >> (4 * (c % 2))) & 15, ggml) << "block " << b << " element " << j;
      }
    }
  }
}

TEST(Q8_0Test, PlanesAndBlocksConvertExactly) {
  std::mt19937 rng(5);
  for (int n_blocks : {1, 2, 4}) {
    std::vector<BlockQ8_0> blocks(n_blocks), back(n_blocks);
    for (auto& b : blocks) {
      b.d = static_cast<uint16_t>(rng());
      for (auto& q : b.qs) q = static_cast<int8_t>(rng());
    }
    std::vector<int8_t> codes(32 * n_blocks);
    std::vector<uint16_t> scales(n_blocks);
    Q8_0BlocksToPlanes(blocks.data(), n_blocks, codes.data(), scales.data());
    Q8_0PlanesToBlocks(codes.data(), scales.data(), n_blocks, back.data());
    ASSERT_EQ(0, std::memcmp(blocks.data(), back.data(), n_blocks * sizeof(BlockQ8_0)));
    for (int b = 0; b < n_blocks; ++b) {
      ASSERT_EQ(scales[b], blocks[b].d);
      for (int j = 0; j < 32; ++j) ASSERT_EQ(codes[32 * b + j], blocks[b].qs[j]);
    }
  }
}

// One format's store against ggml's quantizer and dequantizer of one row (n_blocks blocks of
// Block), for head sizes 32, 64 (the integer kernels' size) and 128.
template <class Block>
void ExpectGgmlRoundTrip(const char* spec, void (*quantize)(const float*, void*, int64_t),
                         void (*dequantize)(const uint8_t*, size_t, float*), double bits) {
  for (int d : {32, 64, 128}) {
    auto s = CreateStore(*ParseMethodSpec(spec), {0, kHeads, d, KvComponent::kKey});
    ASSERT_TRUE(s.ok());
    std::mt19937 rng(4);
    std::normal_distribution<float> g(0.0f, 2.0f);
    const int n = 37;
    std::vector<float> rows(n * kHeads * d);
    for (auto& x : rows) x = g(rng);
    ASSERT_TRUE((*s)->Append(rows.data(), 20).ok());
    ASSERT_TRUE((*s)->Append(&rows[20 * kHeads * d], n - 20).ok());
    std::vector<Block> blocks(d / 32);
    std::vector<float> want(d), got(n * d);
    for (int h = 0; h < kHeads; ++h) {
      ASSERT_EQ((*s)->n_tokens(h), n);
      (*s)->Decode(h, 0, n, got.data());
      for (int t = 0; t < n; ++t) {
        quantize(&rows[(t * kHeads + h) * d], blocks.data(), d);
        dequantize(reinterpret_cast<const uint8_t*>(blocks.data()), d / 32, want.data());
        ASSERT_EQ(0, std::memcmp(want.data(), &got[t * d], d * sizeof(float)))
            << spec << " d " << d << " head " << h << " token " << t;
      }
    }
    const MemoryUsage m = (*s)->Memory();
    EXPECT_EQ(m.payload_bytes(), static_cast<size_t>(n * kHeads * (d / 32)) * sizeof(Block));
    EXPECT_EQ(m.bits_per_value(), bits);
  }
}

TEST(Q4_0Test, DecodeIsGgmlsRoundTripAndPayloadIsGgmlsBlocks) {
  ExpectGgmlRoundTrip<BlockQ4_0>("q4_0", QuantizeRowQ4_0, DequantizeQ4_0Blocks, 4.5);
}

TEST(Q8_0Test, DecodeIsGgmlsRoundTripAndPayloadIsGgmlsBlocks) {
  ExpectGgmlRoundTrip<BlockQ8_0>("q8_0", QuantizeRowQ8_0, DequantizeQ8_0Blocks, 8.5);
}

}  // namespace
}  // namespace kvpack
