// GGUF reader (versions 2 and 3), memory-mapped.
//
// Design goals: every malformed input (bad magic, truncation, offsets or sizes out of range,
// unknown types, absurd counts, overflowing shapes) is reported as a Status naming the
// problem, never a crash, a hang or an allocation proportional to a lying count; metadata
// is parsed eagerly into owned values, tensor data stays in the mapping (zero copy).
// Non-goals: writing (see gguf_writer.h), validating tensor shapes against a model's
// hyper-parameters (the model loader does that).
//
// Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
#ifndef KVPACK_IO_GGUF_H_
#define KVPACK_IO_GGUF_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/ggml_type.h"
#include "kvpack/status.h"

namespace kvpack {

// GGUF metadata value types (gguf.md, "gguf_metadata_value_type").
enum class GgufValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* GgufValueTypeName(GgufValueType type);

struct GgufArray;

// One metadata value. Integers of every width are kept in their declared type so that a
// writer can round-trip them; accessors below convert with range checks.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> data;
};

// Arrays may nest (an array of arrays). Elements share one type.
struct GgufArray {
  GgufValueType element_type = GgufValueType::kUint8;
  std::vector<GgufValue> values;
};

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ne[0] is the innermost (contiguous) dimension
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;      // relative to the start of the data section
  size_t n_bytes = 0;
  const uint8_t* data = nullptr;  // points into the mapping (or the caller's buffer)

  int64_t n_elements() const;
};

class GgufFile {
 public:
  // Maps `path` read-only and parses it.
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses a caller-owned buffer that must outlive the GgufFile (fuzzing, tests).
  static Result<std::unique_ptr<GgufFile>> FromBuffer(const uint8_t* data, size_t size,
                                                      std::string name = "<buffer>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }
  size_t file_size() const { return size_; }
  const uint8_t* bytes() const { return base_; }  // the whole file, [file_size()]

  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  const GgufValue* Find(std::string_view key) const;          // nullptr when absent
  const GgufTensorInfo* FindTensor(std::string_view name) const;  // nullptr when absent

  // Typed accessors: NotFound when absent, InvalidArgument naming the key when the stored
  // type cannot represent the request (e.g. a negative int read as unsigned, a string read
  // as a number). Integer accessors accept any integer type that fits.
  Result<int64_t> GetInt(std::string_view key) const;
  Result<double> GetFloat(std::string_view key) const;  // accepts float32/64 and integers
  Result<bool> GetBool(std::string_view key) const;
  Result<std::string> GetString(std::string_view key) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  Result<std::vector<float>> GetFloatArray(std::string_view key) const;
  Result<std::vector<int64_t>> GetIntArray(std::string_view key) const;

 private:
  GgufFile() = default;
  Status Parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;  // non-null when we own an mmap of size_ bytes
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
};

}  // namespace kvpack

#endif  // KVPACK_IO_GGUF_H_
