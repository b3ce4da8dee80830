// GGUF writer (version 3): metadata of every value type and tensors of any ggml type whose
// bytes the caller provides already encoded. Used by `kvpack make-model` and by tests that
// build malformed or synthetic files.
#ifndef KVPACK_IO_GGUF_WRITER_H_
#define KVPACK_IO_GGUF_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "kvpack/status.h"

namespace kvpack {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32) : alignment_(alignment) {}

  // Setting an existing key replaces its value (keys stay in first-set order). Keys are
  // written verbatim, so tests may store a malformed "general.alignment"; otherwise the
  // writer adds general.alignment (uint32) only when `alignment` differs from 32.
  void Set(const std::string& key, GgufValue value);
  void SetString(const std::string& key, const std::string& v);
  void SetUint32(const std::string& key, uint32_t v);
  void SetInt32(const std::string& key, int32_t v);
  void SetFloat32(const std::string& key, float v);
  void SetBool(const std::string& key, bool v);
  void SetStringArray(const std::string& key, const std::vector<std::string>& v);
  void SetFloat32Array(const std::string& key, const std::vector<float>& v);
  void SetInt32Array(const std::string& key, const std::vector<int32_t>& v);

  // `bytes` must hold exactly GgmlRowBytes(type, ne[0]) * prod(ne[1..]) bytes.
  Status AddTensor(const std::string& name, std::vector<int64_t> ne, GgmlType type,
                   std::vector<uint8_t> bytes);

  // Serialises to memory (tests, fuzz seeds) or to a file.
  std::vector<uint8_t> Serialize() const;
  Status WriteFile(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    std::vector<uint8_t> bytes;
  };
  uint32_t alignment_;
  std::vector<GgufKeyValue> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace kvpack

#endif  // KVPACK_IO_GGUF_WRITER_H_
