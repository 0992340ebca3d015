#!/usr/bin/env bash
# make bench-era-a (device): the Era-A record. Synthetic qwen2.5-7b Q4_K_M on CUDA at the
# full phase-7 build: 2048-token prefill and 128-token decode tok/s (minfer bench), printed
# beside the seed's Era-A 30.7 tok/s (GB10), llama.cpp on this GPU (TARGETS.md) and this
# GPU's roofline: prefill 2 x params x tokens / peak FLOP/s, decode weight bytes per token /
# HBM bandwidth. Ceilings: the ones measured on this H200 (TARGETS.md, 2026-11-29: bf16 GEMM
# 776 TFLOP/s, HBM read 4,600 GB/s); PEAK_TFLOPS / HBM_GBS override them.
#   usage: tools/bench_era_a.sh [BUILD]      env: BENCH_JSON (default results/bench-era-a.jsonl),
#          M7 (model path), REPS (3), PP (2048), TG (128)
set -u
cd "$(dirname "$0")/.."
. tools/bench_models.sh
BUILD=${1:-${BUILD:-build}}
MINFER=$BUILD/minfer
PY=$(bench_python) || exit 1
JSON=${BENCH_JSON:-results/bench-era-a.jsonl}
REPS=${REPS:-3}
PP=${PP:-2048}
TG=${TG:-128}
say() { echo "[bench-era-a $(date -u +%H:%M:%S)] $*"; }
[ -x "$MINFER" ] || { say "$MINFER missing: build first (make BUILD=$BUILD)"; exit 1; }
mkdir -p "$(dirname "$JSON")"
M7=${M7:-$(bench_model "$MINFER" qwen2.5-7b q4_k_m)} || exit 1
tmp=$(mktemp /tmp/minfer-era-a-XXXXXX.jsonl)
say "minfer bench -p $PP -n $TG -r $REPS --backend cuda ($M7)"
"$MINFER" bench -m "$M7" --backend cuda -p "$PP" -n "$TG" -r "$REPS" --json "$tmp" || { say "bench failed"; rm -f "$tmp"; exit 1; }
"$PY" - "$tmp" "$JSON" "${PEAK_TFLOPS:-776}" "${HBM_GBS:-4600}" "${PARAMS:-7.62e9}" <<'PY'
import json, sys
src, dst, peak_tf, hbm, params = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
SEED_ERA_A = 30.7                                  # seed, end of phase 7, GB10
LLAMA = {"pp2048": 10026.0, "tg128": 271.0}        # llama.cpp 34af94cd on this H200 (TARGETS.md)
recs = [json.loads(l) for l in open(src) if l.strip()]
out = open(dst, "a")
print(f"| test | tok/s | roofline tok/s | % of roofline | seed Era-A (GB10) | llama.cpp (H200) | GB/s |")
print(f"| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in recs:
    t = r["test"]
    if t.startswith("pp"):
        roof = peak_tf * 1e12 / (2.0 * params)      # 2 x params FLOP per token
        basis = f"2 x {params:.3g} params / {peak_tf:g} TFLOP/s"
    else:
        bpt = r["gb_s"] * 1e9 / r["tok_s"] if r.get("tok_s") and r.get("gb_s") else 4.68e9
        roof = hbm * 1e9 / bpt                      # bytes per token / HBM bandwidth
        basis = f"{bpt / 1e9:.2f} GB/token / {hbm:g} GB/s"
    r.update({"bench": "bench-era-a", "roofline_tok_s": round(roof, 1), "pct_roofline": round(100 * r["tok_s"] / roof, 2),
              "roofline_basis": basis, "seed_era_a_tok_s": SEED_ERA_A, "llama_cpp_tok_s": LLAMA.get(t)})
    out.write(json.dumps(r) + "\n")
    ll = LLAMA.get(t)
    print(f"| {t} | {r['tok_s']:,.1f} | {roof:,.0f} | {100 * r['tok_s'] / roof:.1f}% | {SEED_ERA_A} | "
          f"{ll if ll else '-'} | {r.get('gb_s', 0):.0f} |")
print(f"(roofline: prefill {peak_tf:g} TFLOP/s bf16 GEMM and decode {hbm:g} GB/s HBM read, measured on this H200)")
PY
rc=$?
rm -f "$tmp"
say "records appended to $JSON"
exit $rc
