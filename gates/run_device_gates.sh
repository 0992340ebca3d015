#!/usr/bin/env bash
# Runs the device gate programs of every built phase, in phase order (BUILD/gates/7a/gate_*,
# then 7b .. 7e, 8a, 8b where built), up to PHASE if given. Each gate writes its JSON summary to
#   $RES/gate-<phase>-<YYYYMMDD>.json            (gate_<phase>: the phase's own gate)
#   $RES/gate-<phase>-<name>-<YYYYMMDD>.json     (any other gate_<name> of that phase)
# RES = $MINFER_GATE_RESULTS, else $OUT, else BUILD/gate-results; logs go to
# $MINFER_GATE_LOGS (default RES/logs). Prints one line per gate and the closing line
# "N passed, N failed, N skipped"; exits non-zero on a failure. Without a GPU every device
# test reports skipped (exit 0); a CPU-only build has no device gates: one skip says so.
#   usage: gates/run_device_gates.sh BUILD [PHASE]
BUILD=${1:-build}
PHASE=${2:-}
cd "$(dirname "$0")/.."
RES=${MINFER_GATE_RESULTS:-${OUT:-$BUILD/gate-results}}
LOGS=${MINFER_GATE_LOGS:-$RES/logs}
mkdir -p "$RES" "$LOGS"
day=$(date -u +%Y%m%d)
P=0; F=0; S=0; n_gates=0; failed=()

# MINFER_GATE_PHASES="7c 7d": run only those phases' gates (a device call is limited in time,
# so one warm machine can run the suite over two calls)
for ph in 7a 7b 7c 7d 7e 8a 8b; do
    dir=$BUILD/gates/$ph
    if [ -n "${MINFER_GATE_PHASES:-}" ] && [[ " $MINFER_GATE_PHASES " != *" $ph "* ]]; then
        [ -n "$PHASE" ] && [ "$ph" = "$PHASE" ] && break
        continue
    fi
    if [ -d "$dir" ]; then
        for g in "$dir"/gate_*; do
            [ -f "$g" ] && [ -x "$g" ] || continue
            name=$(basename "$g")
            case $name in *.d|*.o) continue;; esac
            if [ "$name" = "gate_$ph" ]; then json=$RES/gate-$ph-$day.json
            else json=$RES/gate-$ph-${name#gate_}-$day.json; fi
            log=$LOGS/$name.log
            t0=$(date +%s)
            # a hung gate must not hang the run: MINFER_GATE_TIMEOUT seconds (default 900)
            MINFER_GATE_JSON=$json timeout "${MINFER_GATE_TIMEOUT:-900}" "$g" >"$log" 2>&1
            rc=$?
            [ "$rc" -eq 124 ] && echo "  ($name timed out after ${MINFER_GATE_TIMEOUT:-900} s)" >>"$log"
            dt=$(( $(date +%s) - t0 ))
            line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
            p=0; f=0; s=0
            if [ -n "$line" ]; then
                p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
                f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
                s=$(echo "$line" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+' || echo 0)
            fi
            if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
                f=1; echo "  ($name exited with status $rc)" >>"$log"
            fi
            if [ -z "$line" ] && [ "$f" -eq 0 ]; then f=1; echo "  ($name printed no result line)" >>"$log"; fi
            P=$((P + p)); F=$((F + f)); S=$((S + ${s:-0})); n_gates=$((n_gates + 1))
            printf '%-24s %4d passed %3d failed %3d skipped  %4ds  %s\n' "$ph/$name" "$p" "$f" "${s:-0}" "$dt" "$log"
            if [ "$f" -ne 0 ]; then
                failed+=("$ph/$name")
                echo "---- $log (failures and tail)"
                grep -E '^FAIL' "$log" | head -20
                tail -5 "$log"
                echo "----"
            fi
            grep -q '^skipped: ' "$log" && grep '^skipped: ' "$log" | head -1 | sed "s|^|  $ph/$name |"
        done
    fi
    [ -n "$PHASE" ] && [ "$ph" = "$PHASE" ] && break
done

if [ "$n_gates" -eq 0 ]; then
    echo "skipped: no device gates in $BUILD (CPU-only build or no CUDA phase built)"
    S=1
fi
[ ${#failed[@]} -eq 0 ] || echo "failed: ${failed[*]}"
echo "$P passed, $F failed, $S skipped"
[ "$F" -eq 0 ]
