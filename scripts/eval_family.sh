#!/usr/bin/env bash
# The whole method family on a real model at matched memory (README "The whole family"):
#   eviction at 1/8, 1/4 and 1/2 of the model's context; transform methods at 2, 3 and 4 bits per
#   value (bit_budget = b * head_dim; methods with fixed rates appear once, or at their own b).
# Usage: scripts/eval_family.sh MODEL TOKENIZER OUT_PREFIX [MAX_TOKENS] [BUILD_DIR]
#   e.g. scripts/eval_family.sh stories260K.bin tok512.bin results/family_stories260K 20440
# Writes OUT_PREFIX_eviction.json and OUT_PREFIX_transform.json (veloxquant eval --json).
# Writes OUT_PREFIX_composed.json too: policy+codec compositions (snapkv, streaming_llm at 1/4
# and 1/2 of the context with q8_0, q4_0, kivi, kvtc at 2 bits/value) beside each part alone.
# Environment: VQ_PARTS="eviction transform composed" (the default: all three), VQ_BIN (default BUILD_DIR/bin/veloxquant).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
MODEL="$1"; TOK="$2"; OUT="$3"; MAX="${4:-20440}"; BUILD="${5:-build}"
VQ="${VQ_BIN:-$BUILD/bin/veloxquant}"
PARTS="${VQ_PARTS:-eviction transform composed}"
MODELS="${VQ_MODELS_DIR:-$ROOT/../shared/models}"
MPATH="$MODEL"; [[ -f "$MPATH" ]] || MPATH="$MODELS/$MODEL"
TPATH="$TOK"; [[ -f "$TPATH" ]] || TPATH="$MODELS/$TOK"
# context and head_dim from the checkpoint header (7 little-endian int32, docs/eval.md)
read -r CTX D < <(python3 -c 'import struct,sys
d,h,l,nh,nkv,v,s=struct.unpack("<7i",open(sys.argv[1],"rb").read(28)); print(s, d//nh)' "$MPATH")
# llama.cpp's q8_0/q4_0 blocks hold 32 values of one head: smaller heads use the named variant
QB=""; if (( D % 32 != 0 )); then if (( D % 16 == 0 )); then QB=":block=16"; else QB=":block=8"; fi; fi
ev=""
for div in 8 4 2; do
  b=$((CTX / div)); r=$((b / 2))
  for m in "h2o:budget=$b" "h2o:budget=$b,recent=$r" "curdkv:budget=$b" "curdkv:budget=$b,score=mean" \
           "streaming_llm:budget=$b" "tova:budget=$b" "snapkv:budget=$b" "knorm:budget=$b" \
           "qfilters:budget=$b" "keyformer:budget=$b" "keyformer:budget=$b,recent=$r" "morphkv:budget=$b" "kvzip:budget=$b" \
           "expected_attention:budget=$b" \
           "nestedkv:budget=$b"; do
    ev+="$m;"
  done
done
tr=""
for bits in 2 3 4; do
  bb=$((bits * D))
  for m in "kvtc:bit_budget=$bb" "kvtc:bit_budget=$bb,alloc=waterfill" "uniform:bit_budget=$bb" \
           "svdq_split:bit_budget=$bb" "kivi:bits=$bits" "gear:bits=$bits" \
           "spectralquant:signal_bits=$((bits + 1)),noise_bits=$((bits - 1))"; do
    tr+="$m;"
  done
done
tr+="palu;svdq;q4_0$QB;q8_0$QB"
# Composed: a policy keeps 1/2 or 1/4 of the context, a codec stores what it keeps. The run also
# holds each part alone (the policies at 1/2, 1/4 and 1/8 at fp16, each codec keeping everything),
# measured by the same build on the same tokens, so rows compare at matched resident bytes:
# policy 1/2 + an 8.5-bit codec ~ policy 1/4 at fp16, etc. (scripts/composed_table.py).
co=""
for codec in "q8_0$QB" "q4_0$QB" "kivi" "kvtc:bit_budget=$((2 * D))"; do co+="$codec;"; done
for div in 8 4 2; do
  b=$((CTX / div))
  for pol in "snapkv:budget=$b" "streaming_llm:budget=$b"; do
    co+="$pol;"
    if (( div == 8 )); then continue; fi
    for codec in "q8_0$QB" "q4_0$QB" "kivi" "kvtc:bit_budget=$((2 * D))"; do
      co+="$pol+$codec;"
    done
  done
done
for part in $PARTS; do
  case "$part" in
    eviction) methods="full;${ev%;}" ;;
    transform) methods="full;$tr" ;;
    composed) methods="full;${co%;}" ;;
    *) echo "eval_family.sh: unknown part '$part' (eviction|transform|composed)" >&2; exit 2 ;;
  esac
  "$VQ" eval --model "$MPATH" --tokenizer "$TPATH" --max-tokens "$MAX" --methods "$methods" \
    --json "${OUT}_${part}.json"
done
