// The CPU features the hand-written AVX2 kernels (ops/*_avx2.cc) need, asked once: CPUID runs
// on the first call only (under a hypervisor each CPUID is a VM exit).
#ifndef KVPACK_OPS_CPU_FEATURES_H_
#define KVPACK_OPS_CPU_FEATURES_H_

namespace kvpack {

// Whether the CPU has AVX2, FMA and F16C (every AVX2 CPU from Intel Haswell and AMD Zen on).
inline bool CpuHasAvx2FmaF16c() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
#else
  return false;
#endif
}

}  // namespace kvpack

#endif  // KVPACK_OPS_CPU_FEATURES_H_
