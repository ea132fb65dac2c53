#!/usr/bin/env bash
# One-shot compression, judged as kvpress judges it (README "One-shot compression (kvpress
# protocol)"): `eval --protocol prefill` on one model with every method that has one-shot scoring
# at kvpress's settings, AdaKV over SnapKV, SnapKV composed with q8_0, the paper's CurDKV with its
# other leverage types, and transform methods alone (q8_0, q4_0, kvtc at 2 and 4 bits per value;
# with CAL_TOKENS > 0 also kvtc with a basis calibrated on the first CAL_TOKENS text tokens, the
# evaluation then starting after them), at ratios 0.25, 0.5, 0.75, 0.875.
# Usage: scripts/eval_oneshot.sh MODEL TOKENIZER TEXT OUT_PREFIX [MAX_TOKENS [CAL_TOKENS]]
#   METHODS="a;b" replaces the method list (CAL_TOKENS then only skips the calibration text);
#   FLAGS="--keep-policy" adds eval options.
#   e.g. scripts/eval_oneshot.sh prose1k.bin tokp2048.bin prose-val.txt results/oneshot_prose1k 4092 20000
# Writes OUT_PREFIX.json and OUT_PREFIX.png (and OUT_PREFIX_post.vqcal, not committed).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
MODEL="$1"; TOK="$2"; TEXT="$3"; OUT="$4"; MAX="${5:-4088}"; CAL="${6:-0}"
VQ="${VQ_BIN:-build/bin/veloxquant}"
MODELS="${VQ_MODELS_DIR:-$ROOT/../shared/models}"
MPATH="$MODEL"; [[ -f "$MPATH" ]] || MPATH="$MODELS/$MODEL"
TPATH="$TOK"; [[ -f "$TPATH" ]] || TPATH="$MODELS/$TOK"
XPATH="$TEXT"; [[ -f "$XPATH" ]] || XPATH="$MODELS/$TEXT"
read -r D < <(/usr/bin/python3 -c 'import struct,sys
d,h,l,nh,nkv,v,s=struct.unpack("<7i",open(sys.argv[1],"rb").read(28)); print(d//nh)' "$MPATH")
# q8_0/q4_0 blocks of 32 need head_dim % 32 == 0; smaller heads use the block=D variant
Q8="q8_0"; Q4="q4_0"
if (( D % 32 != 0 )); then Q8="q8_0:block=$D"; Q4="q4_0:block=$D"; fi
SNAP="snapkv:window=64,kernel=5,pool=avg"
ms="streaming_llm;$SNAP;tova;knorm;h2o;qfilters;expected_attention;curdkv_paper;curdkv"
ms+=";keyformer;morphkv;kvzip;nestedkv"
ms+=";curdkv_paper:leverage=value;curdkv_paper:leverage=kv_avg;adakv/$SNAP;$SNAP+$Q8"
ms+=";$Q8;$Q4;kvtc:bit_budget=$((2 * D));kvtc:bit_budget=$((4 * D))"
SKIP=0
if (( CAL > 0 )); then
  if [[ -z "${METHODS:-}" ]]; then
    [[ -f "${OUT}_post.vqcal" ]] || "$VQ" calibrate --model "$MPATH" --tokenizer "$TPATH" \
      --text "$XPATH" --max-tokens "$CAL" --rope post --out "${OUT}_post.vqcal"
    ms+=";kvtc:bit_budget=$((2 * D)),basis=${OUT}_post.vqcal"
  fi
  SKIP="$CAL"
fi
[[ -n "${METHODS:-}" ]] && ms="$METHODS"
# shellcheck disable=SC2086
"$VQ" eval --protocol prefill --model "$MPATH" --tokenizer "$TPATH" --text "$XPATH" \
  --skip-tokens "$SKIP" --max-tokens "$MAX" --ratios 0.25,0.5,0.75,0.875 ${FLAGS:-} \
  --methods "$ms" --json "${OUT}.json" --plot "${OUT}.png"
