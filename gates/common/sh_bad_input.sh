#!/usr/bin/env bash
# Gate: the bad-input campaign. Builds the ASan+UBSan CPU variant (BUILD-san), generates
# ~560 corrupt GGUF files from three tiny valid models (gates/common/badinput/gen.py:
# header, strings, arrays, alignment, tensor infos, shapes, hyper-parameters, tokenizer,
# data, truncation; seeded, so every run sees the same files) and runs each through
# `minfer info`, `run` and `quantize` (gates/common/badinput/campaign.py): no crash, no
# sanitizer report, no hang, every rejection a message on stderr with a non-zero exit.
# Argument: BUILD. MINFER_BADINPUT_PER_CATEGORY (default 55) sets the size.
cd "$(dirname "$0")/../.."
B=${1:-build}
SB=$B-san
PY=${MINFER_PYTHON:-.venv/bin/python}   # the venv make test sets up; no fallback (a missing dependency fails)
mkdir -p "$SB"
if ! make --no-print-directory SAN=1 PHASE=cpu BUILD="$SB" -j2 all >"$SB/bad-input-build.log" 2>&1; then
    tail -30 "$SB/bad-input-build.log"
    echo "bad-input: building the sanitizer variant failed"
    echo "0 passed, 1 failed"
    exit 1
fi
W=$SB/badinput
rm -rf "$W"
if ! "$PY" gates/common/badinput/gen.py "$SB/minfer" "$W" --per-category "${MINFER_BADINPUT_PER_CATEGORY:-55}"; then
    echo "bad-input: generating the corrupt files failed"
    echo "0 passed, 1 failed"
    exit 1
fi
"$PY" gates/common/badinput/campaign.py "$SB/minfer" "$W/manifest.jsonl" --timeout 20 --jobs 2
rc=$?
# ~100 MB of files: kept only when something failed (they are the reproducers)
[ "$rc" -eq 0 ] && rm -rf "$W/files"
exit $rc
