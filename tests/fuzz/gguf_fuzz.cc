// libFuzzer target for the GGUF reader: parse arbitrary bytes, then touch every accessor and
// every tensor byte so that any out-of-range pointer the parser let through is caught by ASan.
// Seeds: tests/fuzz/seeds/ (regenerate with test_io's DISABLED_WriteFuzzSeeds).
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/gguf.h"

namespace {

// Walks a value recursively so that nested arrays are visited too.
size_t Touch(const kvpack::GgufValue& v) {
  size_t h = static_cast<size_t>(v.type);
  if (const auto* s = std::get_if<std::string>(&v.data)) {
    for (char c : *s) h += static_cast<unsigned char>(c);
  } else if (const auto* a = std::get_if<std::shared_ptr<kvpack::GgufArray>>(&v.data)) {
    if (*a != nullptr) {
      for (const kvpack::GgufValue& e : (*a)->values) h += Touch(e);
    }
  }
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = kvpack::GgufFile::FromBuffer(data, size, "fuzz");
  if (!file.ok()) return 0;
  const kvpack::GgufFile& g = **file;
  volatile size_t sink = g.version() + g.alignment() + g.data_offset() + g.file_size();
  for (const kvpack::GgufKeyValue& kv : g.metadata()) {
    sink = sink + Touch(kv.value);
    if (g.Find(kv.key) == nullptr) __builtin_trap();
    auto i = g.GetInt(kv.key);
    auto f = g.GetFloat(kv.key);
    auto b = g.GetBool(kv.key);
    auto s = g.GetString(kv.key);
    auto sa = g.GetStringArray(kv.key);
    auto fa = g.GetFloatArray(kv.key);
    auto ia = g.GetIntArray(kv.key);
    sink = sink + i.ok() + f.ok() + b.ok() + s.ok() + sa.ok() + fa.ok() + ia.ok();
  }
  for (const kvpack::GgufTensorInfo& t : g.tensors()) {
    if (g.FindTensor(t.name) == nullptr) __builtin_trap();
    if (t.n_elements() <= 0) __builtin_trap();
    const kvpack::GgmlTypeTraits traits = kvpack::GetGgmlTypeTraits(t.type);
    if (traits.name == nullptr) __builtin_trap();
    if (t.data < data || t.data + t.n_bytes > data + size) __builtin_trap();
    size_t h = 0;
    for (size_t i = 0; i < t.n_bytes; ++i) h += t.data[i];
    sink = sink + h;
  }
  (void)g.GetInt("general.alignment");
  (void)g.GetString("general.architecture");
  return 0;
}
