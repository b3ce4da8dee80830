#include "kv/codecs/ggml_block_codec.h"

#include <cstring>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/half.h"
#include "kv/codecs/quant_common.h"
#include "ops/ggml_quants.h"
#include "ops/vec.h"

namespace kvpack {
namespace {

class GgmlBlockStore final : public ComponentStore {
 public:
  GgmlBlockStore(GgmlBlockFormat format, const StoreShape& shape)
      : format_(format),
        shape_(shape),
        n_blocks_(shape.head_dim / 32),
        block_bytes_(format == GgmlBlockFormat::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0)),
        row_bytes_(n_blocks_ * block_bytes_),
        heads_(shape.n_kv_heads) {}

  std::string spec() const override { return format_ == GgmlBlockFormat::kQ8_0 ? "q8_0" : "q4_0"; }

  Status Append(const float* rows, int64_t n_tokens) override {
    const int64_t d = shape_.head_dim, row_len = d * shape_.n_kv_heads;
    KVPACK_RETURN_IF_ERROR(CheckQuantInput(rows, n_tokens * row_len, shape_, true));
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      AlignedBuffer<uint8_t>& buf = heads_[h];
      const size_t old = buf.size();
      buf.Resize(old + n_tokens * row_bytes_);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* src = rows + t * row_len + h * d;
        uint8_t* dst = buf.data() + old + t * row_bytes_;
        if (format_ == GgmlBlockFormat::kQ8_0) {
          QuantizeRowQ8_0(src, dst, d);
        } else {
          QuantizeRowQ4_0(src, dst, d);
        }
      }
    }
    return Status::Ok();
  }

  int64_t n_tokens(int head) const override {
    return static_cast<int64_t>(heads_[head].size() / row_bytes_);
  }

  void Scores(int head, const float* q, int n_q, int64_t t0, int64_t t1,
              float* scores) const override {
    const int d = shape_.head_dim;
    const int64_t n = t1 - t0;
    std::vector<float> codes(d), scale(n_blocks_);
    for (int64_t t = t0; t < t1; ++t) {
      const uint8_t* row = heads_[head].data() + t * row_bytes_;
      if (format_ == GgmlBlockFormat::kQ8_0) {
        for (int i = 0; i < n_q; ++i) scores[i * n + (t - t0)] = DotQ8_0F32(row, q + i * d, d);
        continue;
      }
      UnpackRow(row, codes.data(), scale.data());
      for (int i = 0; i < n_q; ++i) {
        float acc = 0.0f;
        for (int b = 0; b < n_blocks_; ++b) {
          acc += scale[b] * DotF32(q + i * d + 32 * b, codes.data() + 32 * b, 32);
        }
        scores[i * n + (t - t0)] = acc;
      }
    }
  }

  void Accumulate(int head, const float* p, int n_q, int64_t t0, int64_t t1,
                  float* out) const override {
    const int d = shape_.head_dim;
    const int64_t n = t1 - t0;
    std::vector<float> codes(d), scale(n_blocks_);
    for (int64_t t = t0; t < t1; ++t) {
      UnpackRow(heads_[head].data() + t * row_bytes_, codes.data(), scale.data());
      for (int i = 0; i < n_q; ++i) {
        const float w = p[i * n + (t - t0)];
        if (w == 0.0f) continue;
        for (int b = 0; b < n_blocks_; ++b) {
          AxpyF32(w * scale[b], codes.data() + 32 * b, out + i * d + 32 * b, 32);
        }
      }
    }
  }

  void Decode(int head, int64_t t0, int64_t t1, float* out) const override {
    const int d = shape_.head_dim;
    for (int64_t t = t0; t < t1; ++t) {
      const GgmlType type = format_ == GgmlBlockFormat::kQ8_0 ? GgmlType::kQ8_0 : GgmlType::kQ4_0;
      (void)DequantizeRow(type, heads_[head].data() + t * row_bytes_, out + (t - t0) * d, d);
    }
  }

  Status Retain(int head, std::span<const int64_t> keep) override {
    AlignedBuffer<uint8_t>& buf = heads_[head];
    KVPACK_RETURN_IF_ERROR(CheckRetainIndices(keep, n_tokens(head)));
    int64_t w = 0;
    for (int64_t idx : keep) {
      if (idx != w) std::memmove(buf.data() + w * row_bytes_, buf.data() + idx * row_bytes_, row_bytes_);
      ++w;
    }
    buf.Resize(w * row_bytes_);
    buf.ShrinkToFit();
    return Status::Ok();
  }

  // Per block: 32 codes (32 bytes for q8_0, 16 for q4_0) and one fp16 scale.
  MemoryUsage Memory() const override {
    MemoryUsage m;
    for (const auto& buf : heads_) {
      const size_t blocks = buf.size() / block_bytes_;
      m.code_bytes += blocks * (block_bytes_ - sizeof(uint16_t));
      m.scale_bytes += blocks * sizeof(uint16_t);
      m.reserved_bytes += buf.capacity() - buf.size();
      m.n_values += static_cast<int64_t>(blocks) * 32;
    }
    return m;
  }

 private:
  // codes: [head_dim] signed integer codes as floats; scale: [n_blocks] block scales d.
  void UnpackRow(const uint8_t* row, float* codes, float* scale) const {
    for (int b = 0; b < n_blocks_; ++b) {
      const uint8_t* blk = row + b * block_bytes_;
      uint16_t dbits;
      std::memcpy(&dbits, blk, sizeof(dbits));
      scale[b] = Fp16ToFp32(dbits);
      float* c = codes + 32 * b;
      if (format_ == GgmlBlockFormat::kQ8_0) {
        const int8_t* qs = reinterpret_cast<const int8_t*>(blk + 2);
        for (int j = 0; j < 32; ++j) c[j] = qs[j];
      } else {
        const uint8_t* qs = blk + 2;
        for (int j = 0; j < 16; ++j) {
          c[j] = static_cast<float>((qs[j] & 15) - 8);
          c[j + 16] = static_cast<float>((qs[j] >> 4) - 8);
        }
      }
    }
  }

  GgmlBlockFormat format_;
  StoreShape shape_;
  int n_blocks_;        // blocks per row (head_dim / 32)
  size_t block_bytes_;  // 34 (q8_0) or 18 (q4_0)
  size_t row_bytes_;
  std::vector<AlignedBuffer<uint8_t>> heads_;  // per head: [n_tokens, n_blocks] ggml blocks
};

}  // namespace

Result<std::unique_ptr<ComponentStore>> MakeGgmlBlockStore(GgmlBlockFormat format,
                                                           const StoreShape& shape) {
  if (shape.head_dim % 32 != 0) {
    return InvalidArgument(std::string(format == GgmlBlockFormat::kQ8_0 ? "q8_0" : "q4_0") +
                           ": head_dim " + std::to_string(shape.head_dim) +
                           " is not a multiple of the 32-channel block size");
  }
  return std::unique_ptr<ComponentStore>(new GgmlBlockStore(format, shape));
}

}  // namespace kvpack
