#!/usr/bin/env bash
# CPU benchmark record: SmolLM2-135M Q4_1 (real file) and synth qwen2.5-0.5b Q4_0 / Q4_K_M,
# pp512 + tg128 on 2 threads and tg128 on 1, 3 reps, DRAM read bandwidth measured in the same run.
# Appends the JSON lines to results/bench-cpu.jsonl and rewrites results/BENCH-CPU.md
# from this run's lines.   usage: bash results/bench-cpu.sh [BUILD_DIR]
set -e
BUILD=${1:-build}
cd "$(dirname "$0")/.."
M=$BUILD/minfer
[ -x "$M" ] || { echo "no $M: build first"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SMOL=models/SmolLM2-135M-Instruct.Q4_1.gguf
models=()
[ -f "$SMOL" ] && models+=("$SMOL") || echo "note: $SMOL absent (make models): skipped"
for t in q4_0 q4_k_m; do
    "$M" synth --shape qwen2.5-0.5b --type $t -o "$tmp/qwen2.5-0.5b-$t.gguf" >/dev/null
    models+=("$tmp/qwen2.5-0.5b-$t.gguf")
done
: > "$tmp/run.jsonl"
: > "$tmp/cmds.txt"
uptime | sed 's/.*load/load/' > "$tmp/load.txt"
for m in "${models[@]}"; do
    # the record (-t 2, as the llama.cpp figures), then decode on one thread: the gap is
    # the per-node thread synchronisation cost on this shared 2-vCPU guest
    for args in "-p 512 -n 128 -r 3 -t 2" "-p 0 -n 128 -r 3 -t 1"; do
        cmd="$M bench -m $m $args --backend cpu --json $tmp/run.jsonl"
        echo "\$ $cmd" | sed "s#$tmp/#/tmp/#g" | tee -a "$tmp/cmds.txt"
        $cmd | grep -v '^{' | tee -a "$tmp/tables.txt"
    done
done
uptime | sed 's/.*load/load/' >> "$tmp/load.txt"
cat "$tmp/run.jsonl" >> results/bench-cpu.jsonl
# the repo venv (make venv; the Makefile passes MINFER_PYTHON)
"${MINFER_PYTHON:-.venv/bin/python}" - "$tmp/run.jsonl" "$tmp/cmds.txt" "$tmp/tables.txt" "$tmp/load.txt" > results/BENCH-CPU.md <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cmds = open(sys.argv[2]).read().strip()
tables = open(sys.argv[3]).read().strip()
load = open(sys.argv[4]).read().strip().replace("\n", "; after: ")
# llama.cpp on this machine (docs: shared/TARGETS.md), llama-bench -t 2 -p 512 -n 128
ref = {("qwen2.5-0.5b", "Q4_0"): (660, 90), ("qwen2.5-0.5b", "Q4_K_M"): (300, 66), ("smollm2-135m", "Q4_1"): (485, 196)}
def key(r):
    s = (r["shape"] + " " + r["model"]).lower()
    return ("qwen2.5-0.5b" if "0.5b" in s else "smollm2-135m" if "smollm2" in s else r["model"], r["type"])
r0 = rows[0] if rows else {}
print("# CPU benchmark (minfer bench)\n")
print("Date %s, commit %s, phase %s, CPU %s, F16 KV cache. Regenerate with "
      "`bash results/bench-cpu.sh BUILD` (appends to results/bench-cpu.jsonl, rewrites this file).\n"
      % (r0.get("date"), r0.get("commit"), r0.get("phase"), r0.get("cpu")))
print("Machine load before the run: %s (other work shares these 2 vCPUs; sd shows it).\n" % load)
print("Commands:\n\n```\n%s\n```\n" % cmds)
print("| model | type | threads | test | tok/s (mean ± sd, 3 reps) | llama.cpp tok/s | decode GB/s | DRAM read GB/s (same run) | decode % of DRAM | peak RSS MiB | file + KV MiB (+10%) |")
print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    k = key(r)
    lc = ref.get(k)
    lcv = "" if not lc else str(lc[0] if r["test"].startswith("pp") else lc[1])
    tg = r["test"].startswith("tg")
    pct = "%.0f%%" % (100 * r["gb_s"] / r["mem_bw_gb_s"]) if tg and r["mem_bw_gb_s"] > 0 else ""
    lim = 1.1 * (r["model_file_mb"] + r["kv_mb"])
    if r["threads"] != 2:
        lcv = ""
    print("| %s | %s | %d | %s | %.1f ± %.1f | %s | %s | %.1f | %s | %.1f | %.1f (%.1f)%s |" % (
        k[0], r["type"], r["threads"], r["test"], r["tok_s"], r["tok_s_sd"], lcv, "%.1f" % r["gb_s"] if tg else "",
        r["mem_bw_gb_s"], pct, r["peak_rss_mb"], r["model_file_mb"] + r["kv_mb"], lim,
        "" if r["peak_rss_mb"] <= lim else " OVER"))
print("\nDecode GB/s counts every weight byte a token reads (all matmul weights and norms, the output"
      " matrix once even when tied, one embedding row) plus the K/V bytes read, divided by the time"
      " per token. The DRAM figure is the best of 5 passes of the bench's thread count summing a 512 MiB buffer, taken"
      " in a child process right before and after the tg test (the mean is shown); the target is decode"
      " >= 60% of it.\n")
print("Raw output:\n\n```\n%s\n```" % tables)
EOF
echo "wrote results/BENCH-CPU.md and appended $(wc -l < "$tmp/run.jsonl") lines to results/bench-cpu.jsonl"
