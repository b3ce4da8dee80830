#!/usr/bin/env bash
# Prints the README's quality table: PPL, KL divergence and same-top-1 against an f32 cache
# (measured in the same run, `kvpack perplexity --kld`) for every codec at 2, 4 and 8 bits.
#   scripts/quality-table.sh MODEL TEXT CTX CHUNKS [THREADS] [SPEC ...]
# Example (the README's rows):
#   scripts/quality-table.sh models/stories260K.gguf data/tinystories/tinystories_val_head.txt 512 20
# A spec the model cannot take (q8_0/q4_0 need head_dim % 32 == 0) gets a row saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 text=$2 ctx=$3 chunks=$4 threads=${5:-1}
shift $(( $# < 5 ? $# : 5 ))
kvpack=${KVPACK:-build/release/kvpack}
specs=("$@")
if [ ${#specs[@]} -eq 0 ]; then
  specs=(f16 bf16 q8_0 q4_0
         flexgen:bits=8 flexgen:bits=4 flexgen:bits=2
         kivi:bits=8 kivi:bits=4 kivi:bits=2
         kcvt:bits=8 kcvt:bits=4 kcvt:bits=2
         hf:nbits=8 hf:nbits=4 hf:nbits=2
         hf:nbits=4,mode=hf hf:nbits=2,mode=hf
         hf:nbits=4,backend=hqq hf:nbits=2,backend=hqq
         gear:bits=4 gear:bits=2 gear-l:bits=4 gear-l:bits=2)
fi
echo "| kv | bits/value (K+V) | PPL | mean KLD | p99 KLD | same top-1 |"
echo "|---|---|---|---|---|---|"
for spec in "${specs[@]}"; do
  if ! out=$("$kvpack" perplexity -m "$model" -f "$text" -c "$ctx" --chunks "$chunks" \
               -t "$threads" --kld -q --kv "$spec" 2>&1); then
    echo "| \`$spec\` | n/a | $(echo "$out" | grep -m1 '^error' | sed 's/^error: //') | | | |"
    continue
  fi
  ppl=$(echo "$out" | sed -n 's/^PPL = \([0-9.]*\) +\/- \([0-9.]*\).*/\1 ± \2/p')
  bits=$(echo "$out" | sed -n 's/^KV bits\/value = \([0-9.]*\).*/\1/p')
  mean=$(echo "$out" | sed -n 's/^KLD vs f32: mean = \([0-9.e+-]*\) .*/\1/p')
  p99=$(echo "$out" | sed -n 's/.*p99 = \([0-9.e+-]*\),.*/\1/p')
  top1=$(echo "$out" | sed -n 's/^same top-1 = \([0-9.]*\).*/\1/p')
  ref=$(echo "$out" | sed -n 's/.*f32 reference PPL = \([0-9.]*\).*/\1/p')
  echo "| \`$spec\` | $bits | $ppl | $mean | $p99 | $top1 |"
done
echo
echo "f32 reference PPL (same windows): ${ref:-n/a}"
