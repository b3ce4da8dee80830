// Keyformer (METHODS.md 2.4; Adnan et al., "Keyformer: KV Cache Reduction through Key
// Tokens Selection for Efficient Generative Inference", MLSys 2024): H2O's structure with
// an accumulated Gumbel-softmax score f_i = softmax((x_i + z_i) / tau), z_i ~ Gumbel(0, 1)
// from a seeded counter-based generator, used only for scoring (attention itself keeps the
// ordinary softmax). tau = tau_init for the prompt and tau_init + t (tau_end - tau_init) / T
// at decode step t of T planned steps (T from `gen=` or the session's SequencePlan; with
// neither, tau stays tau_init; past T it stays tau_end). Scores are per layer and KV head.
// Ablations: noise=none (= H2O when tau_init = tau_end = 1 and the same recent share),
// constant (z = 0.5772: softmax is shift-invariant, so it equals none up to rounding),
// gaussian (mean 0.5772, std 1.2825, the Gumbel's moments).
// Spec `keyformer:budget=N|0.F,recent=0.3,noise=gumbel,tau_init=1,tau_end=2,seed=0,gen=0,
// positions=original|compact` (the paper keeps original positions).
#ifndef KVPACK_KV_POLICIES_KEYFORMER_POLICY_H_
#define KVPACK_KV_POLICIES_KEYFORMER_POLICY_H_

#include <memory>

#include "kv/eviction_policy.h"

namespace kvpack {

Result<std::unique_ptr<EvictionPolicy>> MakeKeyformerPolicy(const MethodSpec& spec);

// tau for a chunk: tau_init inside the prompt, then the linear schedule over n_generate
// decode steps (clamped at tau_end; tau_init throughout when n_generate is 0).
double KeyformerTau(double tau_init, double tau_end, const SequencePlan& plan,
                    const ChunkContext& ctx);

}  // namespace kvpack

#endif  // KVPACK_KV_POLICIES_KEYFORMER_POLICY_H_
