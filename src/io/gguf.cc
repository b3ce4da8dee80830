// GGUF reader. Layout per https://github.com/ggml-org/ggml/blob/master/docs/gguf.md:
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv | kv[n_kv] | tensor_info[n_tensors]
//   | padding to `general.alignment` (default 32) | tensor data.
// Versions 2 and 3 share this layout (v3 only added big-endian files, which we refuse);
// version 1 used 32-bit counts and string lengths and is refused.
//
// Every read goes through Cursor, which checks the remaining bytes first; every count is
// checked against the bytes that could possibly hold it before anything is allocated.
#include "io/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_set>

namespace kvpack {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

namespace {

constexpr uint32_t kMaxArrayDepth = 8;
constexpr uint32_t kMaxDims = 4;
constexpr uint32_t kDefaultAlignment = 32;

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

bool IsValidValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

// Smallest number of bytes one value of this type can occupy in the file; used to bound
// counts before allocating.
size_t MinEncodedBytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
    case GgufValueType::kString: return 8;     // length prefix
    case GgufValueType::kArray: return 4 + 8;  // element type + count
  }
  return 1;
}

// Bounds-checked little-endian reader over [base, base + size).
class Cursor {
 public:
  Cursor(const uint8_t* base, size_t size) : base_(base), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  // `what` qualifies `field` in the message ("string length"); messages are built only on
  // failure so that reading a 150k-entry vocabulary allocates no diagnostics.
  Status Need(size_t n, const std::string& field, const char* what = nullptr) const {
    if (n > remaining()) {
      return DataLoss("truncated file: " + Describe(field, what) + " at offset " +
                      std::to_string(pos_) + " needs " + std::to_string(n) +
                      " bytes but only " + std::to_string(remaining()) + " remain");
    }
    return Status::Ok();
  }

  template <typename T>
  Status Read(T* out, const std::string& field, const char* what = nullptr) {
    KVPACK_RETURN_IF_ERROR(Need(sizeof(T), field, what));
    std::memcpy(out, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status ReadString(std::string* out, const std::string& field, const char* what = nullptr) {
    uint64_t len = 0;
    KVPACK_RETURN_IF_ERROR(Read(&len, field, what ? what : "string length"));
    if (len > remaining()) {
      return DataLoss("string length " + std::to_string(len) + " of " + Describe(field, what) +
                      " at offset " + std::to_string(pos_ - 8) +
                      " goes beyond the end of the file (" + std::to_string(remaining()) +
                      " bytes remain)");
    }
    out->assign(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return Status::Ok();
  }

 private:
  static std::string Describe(const std::string& field, const char* what) {
    return what ? field + " (" + what + ")" : field;
  }

  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
};

Status ReadValue(Cursor& c, GgufValueType type, uint32_t depth, std::string& field,
                 GgufValue* out);

Status ReadArray(Cursor& c, uint32_t depth, std::string& field, GgufValue* out) {
  if (depth >= kMaxArrayDepth) {
    return DataLoss(field + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth) +
                    " levels");
  }
  uint32_t elem_type = 0;
  KVPACK_RETURN_IF_ERROR(c.Read(&elem_type, field, "array element type"));
  if (!IsValidValueType(elem_type)) {
    return DataLoss(field + ": unknown array element value type " + std::to_string(elem_type));
  }
  uint64_t count = 0;
  KVPACK_RETURN_IF_ERROR(c.Read(&count, field, "array count"));
  const GgufValueType et = static_cast<GgufValueType>(elem_type);
  const size_t min_bytes = MinEncodedBytes(et);
  if (count > c.remaining() / min_bytes) {
    return DataLoss(field + ": array count " + std::to_string(count) + " of " +
                    GgufValueTypeName(et) + " cannot fit in the " +
                    std::to_string(c.remaining()) + " remaining bytes");
  }
  auto arr = std::make_shared<GgufArray>();
  arr->element_type = et;
  arr->values.resize(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    // The field grows to "metadata key 'k'[3][0]" while reading nested elements; appending
    // to its capacity avoids an allocation per element.
    const size_t field_len = field.size();
    field += '[';
    field += std::to_string(i);
    field += ']';
    KVPACK_RETURN_IF_ERROR(
        ReadValue(c, et, depth + 1, field, &arr->values[static_cast<size_t>(i)]));
    field.resize(field_len);
  }
  out->type = GgufValueType::kArray;
  out->data = std::move(arr);
  return Status::Ok();
}

Status ReadValue(Cursor& c, GgufValueType type, uint32_t depth, std::string& field,
                 GgufValue* out) {
  out->type = type;
  switch (type) {
    case GgufValueType::kUint8: {
      uint8_t v;
      KVPACK_RETURN_IF_ERROR(c.Read(&v, field));
      out->data = uint64_t{v};
      return Status::Ok();
    }
    case GgufValueType::kInt8: {
      int8_t v;
      KVPACK_RETURN_IF_ERROR(c.Read(&v, field));
      out->data = int64_t{v};
      return Status::Ok();
    }
    case GgufValueType::kUint16: {
      uint16_t v;
      KVPACK_RETURN_IF_ERROR(c.Read(&v, field));
      out->data = uint64_t{v};
      return Status::Ok();
    }
    case GgufValueType::kInt16: {
      int16_t v;
      KVPACK_RETURN_IF_ERROR(c.Read(&v, field));
      out->data = int64_t{v};
      return Status::Ok();
    }
    case GgufValueType::kUint32: {
      uint32_t v;
      KVPACK_RETURN_IF_ERROR(c.Read(&v, field));
      out->data = uint64_t{v};
      return Status::Ok();
    }
    case GgufValueType::kInt32: {
      int32_t v;
      KVPACK_RETURN_IF_ERROR(c.Read(&v, field));
      out->data = int64_t{v};
      return Status::Ok();
    }
    case GgufValueType::kUint64: {
      uint64_t v;
      KVPACK_RETURN_IF_ERROR(c.Read(&v, field));
      out->data = v;
      return Status::Ok();
    }
    case GgufValueType::kInt64: {
      int64_t v;
      KVPACK_RETURN_IF_ERROR(c.Read(&v, field));
      out->data = v;
      return Status::Ok();
    }
    case GgufValueType::kFloat32: {
      float v;
      KVPACK_RETURN_IF_ERROR(c.Read(&v, field));
      out->data = double{v};
      return Status::Ok();
    }
    case GgufValueType::kFloat64: {
      double v;
      KVPACK_RETURN_IF_ERROR(c.Read(&v, field));
      out->data = v;
      return Status::Ok();
    }
    case GgufValueType::kBool: {
      uint8_t v;
      KVPACK_RETURN_IF_ERROR(c.Read(&v, field));
      if (v > 1) {
        return DataLoss(field + ": invalid bool byte " + std::to_string(v) +
                        " at offset " + std::to_string(c.pos() - 1) + " (must be 0 or 1)");
      }
      out->data = v != 0;
      return Status::Ok();
    }
    case GgufValueType::kString: {
      std::string s;
      KVPACK_RETURN_IF_ERROR(c.ReadString(&s, field));
      out->data = std::move(s);
      return Status::Ok();
    }
    case GgufValueType::kArray:
      return ReadArray(c, depth, field, out);
  }
  return DataLoss(field + ": unknown value type " + std::to_string(static_cast<uint32_t>(type)));
}

bool IsIntegerType(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64: return true;
    default: return false;
  }
}

// Converts an integer-typed value to int64; false when it does not fit or is not an integer.
bool ValueToInt(const GgufValue& v, int64_t* out) {
  if (!IsIntegerType(v.type)) return false;
  if (const auto* u = std::get_if<uint64_t>(&v.data)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(*u);
    return true;
  }
  if (const auto* i = std::get_if<int64_t>(&v.data)) {
    *out = *i;
    return true;
  }
  return false;
}

bool ValueToDouble(const GgufValue& v, double* out) {
  if (v.type == GgufValueType::kFloat32 || v.type == GgufValueType::kFloat64) {
    if (const auto* d = std::get_if<double>(&v.data)) {
      *out = *d;
      return true;
    }
    return false;
  }
  if (!IsIntegerType(v.type)) return false;
  if (const auto* u = std::get_if<uint64_t>(&v.data)) {
    *out = static_cast<double>(*u);
    return true;
  }
  if (const auto* i = std::get_if<int64_t>(&v.data)) {
    *out = static_cast<double>(*i);
    return true;
  }
  return false;
}

const GgufArray* AsArray(const GgufValue& v) {
  if (v.type != GgufValueType::kArray) return nullptr;
  const auto* p = std::get_if<std::shared_ptr<GgufArray>>(&v.data);
  return (p != nullptr) ? p->get() : nullptr;
}

std::string TypeMismatch(std::string_view key, const GgufValue& v, const char* wanted) {
  std::string got = GgufValueTypeName(v.type);
  if (const GgufArray* a = AsArray(v)) {
    got += " of ";
    got += GgufValueTypeName(a->element_type);
  }
  return "metadata key '" + std::string(key) + "' holds " + got + ", not " + wanted;
}

}  // namespace

const char* GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUint16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUint32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return "unknown";
}

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) {
    if (__builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return IoError("cannot open '" + path + "': " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    return IoError("cannot stat '" + path + "': " + err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return IoError("'" + path + "' is not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  if (size > 0) {
    void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const std::string err = std::strerror(errno);
      ::close(fd);
      return IoError("cannot mmap '" + path + "': " + err);
    }
    // Weights are streamed once per decode step: ask for PMD-sized (2 MiB) page-cache folios
    // and mappings, so that a file read in cold through this mapping is mapped with huge
    // pages (core/huge_pages.h has the measurement). Advice only: a file already cached in
    // small folios stays in them, and an error (no THP in the kernel) changes nothing.
    ::madvise(m, size, MADV_HUGEPAGE);
    file->mapping_ = m;
    file->base_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  file->size_ = size;
  Status s = file->Parse();
  if (!s.ok()) return s.WithContext(path);
  return file;
}

Result<std::unique_ptr<GgufFile>> GgufFile::FromBuffer(const uint8_t* data, size_t size,
                                                       std::string name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = std::move(name);
  file->base_ = data;
  file->size_ = (data != nullptr) ? size : 0;
  Status s = file->Parse();
  if (!s.ok()) return s.WithContext(file->path_);
  return file;
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

Status GgufFile::Parse() {
  Cursor c(base_, size_);

  // Header.
  KVPACK_RETURN_IF_ERROR(c.Need(4, "magic"));
  if (std::memcmp(base_, "GGUF", 4) != 0) {
    uint32_t got;
    std::memcpy(&got, base_, 4);
    return DataLoss("bad magic " + Hex(got) + " (expected \"GGUF\"): not a GGUF file");
  }
  uint32_t magic;
  KVPACK_RETURN_IF_ERROR(c.Read(&magic, "magic"));
  KVPACK_RETURN_IF_ERROR(c.Read(&version_, "version"));
  if (version_ == 1) {
    return Unimplemented("unsupported GGUF version 1 (it uses 32-bit counts); re-convert the "
                         "model with a current converter to get version 3");
  }
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xffffu) == 0 && (version_ >> 16) != 0) {
      return Unimplemented("unsupported GGUF version " + Hex(version_) +
                           " (looks like a big-endian file; only little-endian is supported)");
    }
    return Unimplemented("unsupported GGUF version " + std::to_string(version_) +
                         " (supported: 2, 3)");
  }
  uint64_t n_tensors = 0, n_kv = 0;
  KVPACK_RETURN_IF_ERROR(c.Read(&n_tensors, "tensor count"));
  KVPACK_RETURN_IF_ERROR(c.Read(&n_kv, "metadata kv count"));

  // A kv needs at least a key length (8), a value type (4) and one value byte; a tensor info
  // at least a name length (8), n_dims (4), one dimension (8), a type (4) and an offset (8).
  constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
  constexpr uint64_t kMinTensorBytes = 8 + 4 + 8 + 4 + 8;
  if (n_kv > c.remaining() / kMinKvBytes) {
    return DataLoss("metadata kv count " + std::to_string(n_kv) + " cannot fit in the " +
                    std::to_string(c.remaining()) + " remaining bytes");
  }
  if (n_tensors > c.remaining() / kMinTensorBytes) {
    return DataLoss("tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                    std::to_string(c.remaining()) + " remaining bytes");
  }
  if (n_kv * kMinKvBytes + n_tensors * kMinTensorBytes > c.remaining()) {
    return DataLoss("metadata kv count " + std::to_string(n_kv) + " and tensor count " +
                    std::to_string(n_tensors) + " cannot fit in the " +
                    std::to_string(c.remaining()) + " remaining bytes");
  }

  // Metadata.
  metadata_.resize(static_cast<size_t>(n_kv));
  std::unordered_set<std::string_view> seen;
  for (uint64_t i = 0; i < n_kv; ++i) {
    GgufKeyValue& kv = metadata_[static_cast<size_t>(i)];
    const std::string where = "metadata kv #" + std::to_string(i);
    KVPACK_RETURN_IF_ERROR(c.ReadString(&kv.key, where, "key"));
    std::string field = "metadata key '" + kv.key + "'";
    uint32_t type = 0;
    KVPACK_RETURN_IF_ERROR(c.Read(&type, field, "value type"));
    if (!IsValidValueType(type)) {
      return DataLoss(field + ": unknown value type " + std::to_string(type));
    }
    KVPACK_RETURN_IF_ERROR(ReadValue(c, static_cast<GgufValueType>(type), 0, field, &kv.value));
  }
  for (const GgufKeyValue& kv : metadata_) {  // metadata_ no longer moves: views are stable
    if (!seen.insert(kv.key).second) {
      return DataLoss("duplicate metadata key '" + kv.key + "'");
    }
  }

  alignment_ = kDefaultAlignment;
  if (const GgufValue* a = Find("general.alignment")) {
    int64_t v = 0;
    if (!ValueToInt(*a, &v)) {
      return DataLoss("general.alignment must be an integer, got " +
                      std::string(GgufValueTypeName(a->type)));
    }
    if (v <= 0 || v > std::numeric_limits<uint32_t>::max() ||
        !std::has_single_bit(static_cast<uint64_t>(v))) {
      return DataLoss("general.alignment " + std::to_string(v) +
                      " is not a non-zero power of two");
    }
    alignment_ = static_cast<uint32_t>(v);
  }

  // Tensor infos.
  tensors_.resize(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo& t = tensors_[static_cast<size_t>(i)];
    const std::string where = "tensor info #" + std::to_string(i);
    KVPACK_RETURN_IF_ERROR(c.ReadString(&t.name, where, "name"));
    const std::string field = "tensor '" + t.name + "'";
    uint32_t n_dims = 0;
    KVPACK_RETURN_IF_ERROR(c.Read(&n_dims, field, "n_dims"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return DataLoss(field + ": n_dims " + std::to_string(n_dims) + " is not in [1, " +
                      std::to_string(kMaxDims) + "]");
    }
    t.ne.resize(n_dims);
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      KVPACK_RETURN_IF_ERROR(c.Read(&t.ne[d], field + " ne[" + std::to_string(d) + "]"));
      if (t.ne[d] <= 0) {
        return DataLoss(field + ": dimension ne[" + std::to_string(d) + "] = " +
                        std::to_string(t.ne[d]) + " is not positive");
      }
      if (__builtin_mul_overflow(n_elements, t.ne[d], &n_elements)) {
        return DataLoss(field + ": element count overflows (dimension product too large)");
      }
    }
    uint32_t type_id = 0;
    KVPACK_RETURN_IF_ERROR(c.Read(&type_id, field, "type"));
    const GgmlTypeTraits traits = GetGgmlTypeTraits(type_id);
    if (traits.name == nullptr) {
      return DataLoss(field + ": unknown ggml type id " + std::to_string(type_id));
    }
    t.type = static_cast<GgmlType>(type_id);
    if (t.ne[0] % traits.block_size != 0) {
      return DataLoss(field + ": ne[0] = " + std::to_string(t.ne[0]) +
                      " is not a multiple of the " + traits.name + " block size " +
                      std::to_string(traits.block_size));
    }
    // n_bytes = (ne[0] / block_size) * block_bytes * ne[1] * ...; checked at every step.
    uint64_t n_bytes = static_cast<uint64_t>(t.ne[0] / traits.block_size);
    bool overflow = __builtin_mul_overflow(n_bytes, static_cast<uint64_t>(traits.block_bytes),
                                           &n_bytes);
    for (uint32_t d = 1; d < n_dims && !overflow; ++d) {
      overflow = __builtin_mul_overflow(n_bytes, static_cast<uint64_t>(t.ne[d]), &n_bytes);
    }
    if (overflow || n_bytes > std::numeric_limits<size_t>::max()) {
      return DataLoss(field + ": byte size overflows");
    }
    t.n_bytes = static_cast<size_t>(n_bytes);
    KVPACK_RETURN_IF_ERROR(c.Read(&t.offset, field, "offset"));
    if (t.offset % alignment_ != 0) {
      return DataLoss(field + ": data offset " + std::to_string(t.offset) +
                      " is not a multiple of the alignment " + std::to_string(alignment_));
    }
  }

  // Data section.
  const size_t infos_end = c.pos();
  const size_t pad = (alignment_ - infos_end % alignment_) % alignment_;
  if (infos_end > std::numeric_limits<size_t>::max() - pad) {
    return DataLoss("data section offset overflows");
  }
  data_offset_ = infos_end + pad;
  if (!tensors_.empty() && data_offset_ > size_) {
    return DataLoss("data section would start at offset " + std::to_string(data_offset_) +
                    " beyond the end of the file (" + std::to_string(size_) + " bytes)");
  }
  const size_t data_size = (data_offset_ <= size_) ? size_ - data_offset_ : 0;
  for (GgufTensorInfo& t : tensors_) {
    uint64_t end = 0;
    if (__builtin_add_overflow(t.offset, static_cast<uint64_t>(t.n_bytes), &end) ||
        end > data_size) {
      return DataLoss("tensor '" + t.name + "': data [" + std::to_string(t.offset) + ", +" +
                      std::to_string(t.n_bytes) + ") lies outside the " +
                      std::to_string(data_size) + "-byte data section");
    }
    t.data = base_ + data_offset_ + t.offset;
  }

  seen.clear();
  for (const GgufTensorInfo& t : tensors_) {
    if (!seen.insert(t.name).second) return DataLoss("duplicate tensor name '" + t.name + "'");
  }

  // Overlapping tensor data: sort by offset and compare neighbours.
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const GgufTensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo* prev = by_offset[i - 1];
    if (prev->offset + prev->n_bytes > by_offset[i]->offset) {
      return DataLoss("tensor '" + prev->name + "' data overlaps tensor '" +
                      by_offset[i]->name + "'");
    }
  }
  return Status::Ok();
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  for (const GgufKeyValue& kv : metadata_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  for (const GgufTensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound("metadata key '" + std::string(key) + "' not found");
  int64_t out = 0;
  if (!IsIntegerType(v->type)) return InvalidArgument(TypeMismatch(key, *v, "an integer"));
  if (!ValueToInt(*v, &out)) {
    return InvalidArgument("metadata key '" + std::string(key) +
                           "' holds an integer that does not fit in int64");
  }
  return out;
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound("metadata key '" + std::string(key) + "' not found");
  double out = 0;
  if (!ValueToDouble(*v, &out)) return InvalidArgument(TypeMismatch(key, *v, "a number"));
  return out;
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound("metadata key '" + std::string(key) + "' not found");
  const auto* b = std::get_if<bool>(&v->data);
  if (v->type != GgufValueType::kBool || b == nullptr) {
    return InvalidArgument(TypeMismatch(key, *v, "a bool"));
  }
  return *b;
}

Result<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound("metadata key '" + std::string(key) + "' not found");
  const auto* s = std::get_if<std::string>(&v->data);
  if (v->type != GgufValueType::kString || s == nullptr) {
    return InvalidArgument(TypeMismatch(key, *v, "a string"));
  }
  return *s;
}

Result<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound("metadata key '" + std::string(key) + "' not found");
  const GgufArray* a = AsArray(*v);
  if (a == nullptr || a->element_type != GgufValueType::kString) {
    return InvalidArgument(TypeMismatch(key, *v, "an array of string"));
  }
  std::vector<std::string> out;
  out.reserve(a->values.size());
  for (const GgufValue& e : a->values) {
    const auto* s = std::get_if<std::string>(&e.data);
    if (s == nullptr) return InvalidArgument(TypeMismatch(key, *v, "an array of string"));
    out.push_back(*s);
  }
  return out;
}

Result<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound("metadata key '" + std::string(key) + "' not found");
  const GgufArray* a = AsArray(*v);
  if (a == nullptr) return InvalidArgument(TypeMismatch(key, *v, "an array of numbers"));
  std::vector<float> out;
  out.reserve(a->values.size());
  for (const GgufValue& e : a->values) {
    double d = 0;
    if (!ValueToDouble(e, &d)) {
      return InvalidArgument(TypeMismatch(key, *v, "an array of numbers"));
    }
    out.push_back(static_cast<float>(d));
  }
  return out;
}

Result<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFound("metadata key '" + std::string(key) + "' not found");
  const GgufArray* a = AsArray(*v);
  if (a == nullptr || !IsIntegerType(a->element_type)) {
    return InvalidArgument(TypeMismatch(key, *v, "an array of integers"));
  }
  std::vector<int64_t> out;
  out.reserve(a->values.size());
  for (size_t i = 0; i < a->values.size(); ++i) {
    int64_t x = 0;
    if (!ValueToInt(a->values[i], &x)) {
      return InvalidArgument("metadata key '" + std::string(key) + "' element " +
                             std::to_string(i) + " does not fit in int64");
    }
    out.push_back(x);
  }
  return out;
}

}  // namespace kvpack
