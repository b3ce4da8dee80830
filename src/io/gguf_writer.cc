// GGUF v3 writer; layout per https://github.com/ggml-org/ggml/blob/master/docs/gguf.md.
#include "io/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include <unistd.h>

namespace kvpack {
namespace {

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>* out) : out_(out) {}

  template <typename T>
  void Put(T v) {
    Append(&v, sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    Append(s.data(), s.size());
  }
  void Append(const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = out_->size();
    out_->resize(at + n);
    std::memcpy(out_->data() + at, p, n);
  }
  void PadTo(uint64_t alignment) {
    while (out_->size() % alignment != 0) out_->push_back(0);
  }

 private:
  std::vector<uint8_t>* out_;
};

uint64_t AsU64(const GgufValue& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v.data)) return static_cast<uint64_t>(*i);
  if (const auto* d = std::get_if<double>(&v.data)) return static_cast<uint64_t>(*d);
  if (const auto* b = std::get_if<bool>(&v.data)) return *b ? 1 : 0;
  return 0;
}

int64_t AsI64(const GgufValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v.data)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return static_cast<int64_t>(*u);
  if (const auto* d = std::get_if<double>(&v.data)) return static_cast<int64_t>(*d);
  if (const auto* b = std::get_if<bool>(&v.data)) return *b ? 1 : 0;
  return 0;
}

double AsF64(const GgufValue& v) {
  if (const auto* d = std::get_if<double>(&v.data)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v.data)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return static_cast<double>(*u);
  return 0;
}

// Writes the payload of `v` as type `type` (the array element type for array elements, so
// that a mistyped element still produces a well-formed file).
void PutValue(ByteSink& s, GgufValueType type, const GgufValue& v) {
  switch (type) {
    case GgufValueType::kUint8: s.Put<uint8_t>(static_cast<uint8_t>(AsU64(v))); return;
    case GgufValueType::kInt8: s.Put<int8_t>(static_cast<int8_t>(AsI64(v))); return;
    case GgufValueType::kUint16: s.Put<uint16_t>(static_cast<uint16_t>(AsU64(v))); return;
    case GgufValueType::kInt16: s.Put<int16_t>(static_cast<int16_t>(AsI64(v))); return;
    case GgufValueType::kUint32: s.Put<uint32_t>(static_cast<uint32_t>(AsU64(v))); return;
    case GgufValueType::kInt32: s.Put<int32_t>(static_cast<int32_t>(AsI64(v))); return;
    case GgufValueType::kUint64: s.Put<uint64_t>(AsU64(v)); return;
    case GgufValueType::kInt64: s.Put<int64_t>(AsI64(v)); return;
    case GgufValueType::kFloat32: s.Put<float>(static_cast<float>(AsF64(v))); return;
    case GgufValueType::kFloat64: s.Put<double>(AsF64(v)); return;
    case GgufValueType::kBool: {
      const auto* b = std::get_if<bool>(&v.data);
      s.Put<uint8_t>((b != nullptr ? *b : AsU64(v) != 0) ? 1 : 0);
      return;
    }
    case GgufValueType::kString: {
      const auto* str = std::get_if<std::string>(&v.data);
      s.PutString(str != nullptr ? *str : std::string());
      return;
    }
    case GgufValueType::kArray: {
      const auto* p = std::get_if<std::shared_ptr<GgufArray>>(&v.data);
      const GgufArray* a = (p != nullptr) ? p->get() : nullptr;
      if (a == nullptr) {
        s.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kUint8));
        s.Put<uint64_t>(0);
        return;
      }
      s.Put<uint32_t>(static_cast<uint32_t>(a->element_type));
      s.Put<uint64_t>(a->values.size());
      for (const GgufValue& e : a->values) PutValue(s, a->element_type, e);
      return;
    }
  }
}

// Appends one array element built in place: pushing a temporary GgufValue made GCC 12 report
// the moved variant's string as maybe-uninitialized in the sanitizer build.
template <typename T>
void AppendValue(std::vector<GgufValue>& values, GgufValueType type, T v) {
  GgufValue& x = values.emplace_back();
  x.type = type;
  x.data.emplace<T>(std::move(v));
}

GgufValue MakeArray(GgufValueType element_type, std::vector<GgufValue> values) {
  auto a = std::make_shared<GgufArray>();
  a->element_type = element_type;
  a->values = std::move(values);
  GgufValue v;
  v.type = GgufValueType::kArray;
  v.data = std::move(a);
  return v;
}

}  // namespace

void GgufWriter::Set(const std::string& key, GgufValue value) {
  for (GgufKeyValue& kv : metadata_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  metadata_.push_back({key, std::move(value)});
}

void GgufWriter::SetString(const std::string& key, const std::string& v) {
  Set(key, GgufValue{GgufValueType::kString, v});
}
void GgufWriter::SetUint32(const std::string& key, uint32_t v) {
  Set(key, GgufValue{GgufValueType::kUint32, uint64_t{v}});
}
void GgufWriter::SetInt32(const std::string& key, int32_t v) {
  Set(key, GgufValue{GgufValueType::kInt32, int64_t{v}});
}
void GgufWriter::SetFloat32(const std::string& key, float v) {
  Set(key, GgufValue{GgufValueType::kFloat32, double{v}});
}
void GgufWriter::SetBool(const std::string& key, bool v) {
  Set(key, GgufValue{GgufValueType::kBool, v});
}
void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& v) {
  std::vector<GgufValue> values;
  values.reserve(v.size());
  for (const std::string& s : v) AppendValue(values, GgufValueType::kString, s);
  Set(key, MakeArray(GgufValueType::kString, std::move(values)));
}
void GgufWriter::SetFloat32Array(const std::string& key, const std::vector<float>& v) {
  std::vector<GgufValue> values;
  values.reserve(v.size());
  for (float f : v) AppendValue(values, GgufValueType::kFloat32, double{f});
  Set(key, MakeArray(GgufValueType::kFloat32, std::move(values)));
}
void GgufWriter::SetInt32Array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<GgufValue> values;
  values.reserve(v.size());
  for (int32_t i : v) AppendValue(values, GgufValueType::kInt32, int64_t{i});
  Set(key, MakeArray(GgufValueType::kInt32, std::move(values)));
}

Status GgufWriter::AddTensor(const std::string& name, std::vector<int64_t> ne, GgmlType type,
                             std::vector<uint8_t> bytes) {
  const std::string field = "tensor '" + name + "'";
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) return InvalidArgument("duplicate " + field);
  }
  const GgmlTypeTraits traits = GetGgmlTypeTraits(type);
  if (traits.name == nullptr) {
    return InvalidArgument(field + ": unknown ggml type " +
                           std::to_string(static_cast<uint32_t>(type)));
  }
  if (ne.empty() || ne.size() > 4) {
    return InvalidArgument(field + ": needs 1 to 4 dimensions, got " + std::to_string(ne.size()));
  }
  uint64_t expected = 0;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] <= 0) return InvalidArgument(field + ": dimensions must be positive");
  }
  if (ne[0] % traits.block_size != 0) {
    return InvalidArgument(field + ": ne[0] = " + std::to_string(ne[0]) +
                           " is not a multiple of the block size " +
                           std::to_string(traits.block_size));
  }
  expected = static_cast<uint64_t>(ne[0] / traits.block_size);
  bool overflow = __builtin_mul_overflow(expected, traits.block_bytes, &expected);
  for (size_t d = 1; d < ne.size() && !overflow; ++d) {
    overflow = __builtin_mul_overflow(expected, static_cast<uint64_t>(ne[d]), &expected);
  }
  if (overflow) return InvalidArgument(field + ": byte size overflows");
  if (bytes.size() != expected) {
    return InvalidArgument(field + ": expected " + std::to_string(expected) + " bytes of " +
                           traits.name + ", got " + std::to_string(bytes.size()));
  }
  tensors_.push_back({name, std::move(ne), type, std::move(bytes)});
  return Status::Ok();
}

std::vector<uint8_t> GgufWriter::Serialize() const {
  // A zero alignment cannot pad; the reader rejects such a file through general.alignment.
  const uint64_t align = alignment_ == 0 ? 1 : alignment_;
  bool has_alignment_key = false;
  for (const GgufKeyValue& kv : metadata_) has_alignment_key |= kv.key == "general.alignment";
  const bool add_alignment_key = !has_alignment_key && alignment_ != 32;

  std::vector<uint8_t> out;
  ByteSink s(&out);
  s.Put<uint32_t>(0x46554747u);  // "GGUF" read as a little-endian u32
  s.Put<uint32_t>(3);
  s.Put<uint64_t>(tensors_.size());
  s.Put<uint64_t>(metadata_.size() + (add_alignment_key ? 1 : 0));
  for (const GgufKeyValue& kv : metadata_) {
    s.PutString(kv.key);
    s.Put<uint32_t>(static_cast<uint32_t>(kv.value.type));
    PutValue(s, kv.value.type, kv.value);
  }
  if (add_alignment_key) {
    s.PutString("general.alignment");
    s.Put<uint32_t>(static_cast<uint32_t>(GgufValueType::kUint32));
    s.Put<uint32_t>(alignment_);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    s.PutString(t.name);
    s.Put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) s.Put<int64_t>(d);
    s.Put<uint32_t>(static_cast<uint32_t>(t.type));
    s.Put<uint64_t>(offset);
    offset += (t.bytes.size() + align - 1) / align * align;
  }
  s.PadTo(align);
  for (const PendingTensor& t : tensors_) {
    s.Append(t.bytes.data(), t.bytes.size());
    s.PadTo(align);
  }
  return out;
}

// Writes to a process-unique temporary name, then renames it over `path`: a reader that has
// the old file memory-mapped keeps a valid mapping (the old inode), never a truncated one
// (which would fault with SIGBUS), and a crash never leaves a half-written model at `path`.
Status GgufWriter::WriteFile(const std::string& path) const {
  const std::vector<uint8_t> bytes = Serialize();
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return IoError("cannot create '" + tmp + "': " + std::strerror(errno));
  }
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const bool write_failed = written != bytes.size();
  const int close_rc = std::fclose(f);
  if (write_failed || close_rc != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(tmp.c_str());
    return IoError("cannot write '" + tmp + "': " + reason);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(tmp.c_str());
    return IoError("cannot rename '" + tmp + "' to '" + path + "': " + reason);
  }
  return Status::Ok();
}

}  // namespace kvpack
