#!/usr/bin/env bash
# The peer, side by side: llama.cpp's llama-bench, built from the source that the PyPI package
# llama-cpp-python vendors, run on the same GGUF files right after minfer's bench, its records
# written in minfer's JSON shape ("engine": "llama.cpp") so one file holds both engines.
# Nothing of llama.cpp is committed: `fetch` puts a trimmed copy (ggml with its CPU and CUDA
# backends, src, include, common, vendor, llama-bench; about 22 MB) in the git-ignored .carry/peer/,
# which travels to the device machine as a carried path.
#   tools/bench_peer.sh fetch                 (here: needs PyPI) -> .carry/peer/llama.cpp, VERSION
#   tools/bench_peer.sh build [BUILD_DIR]     cmake + llama-bench (CUDA when nvcc is found), -j$JOBS
#   tools/bench_peer.sh run BUILD_DIR OUT.jsonl MODEL [llama-bench args: -p 512,2048 -n 128 -d 0 ...]
#                                             flash attention on (-fa 1), CUDA graphs on (llama.cpp's default)
set -u
cd "$(dirname "$0")/.."
say() { echo "[bench-peer $(date -u +%H:%M:%S)] $*" >&2; }
PEER=.carry/peer
SRC=$PEER/llama.cpp
PKG=${PEER_PACKAGE:-llama-cpp-python}

fetch() {
    local py=${MINFER_PYTHON:-.venv/bin/python} tmp
    [ -x "$py" ] || { say "no Python at $py: run \`make venv\`"; return 1; }
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    say "downloading the $PKG source package from PyPI"
    "$py" -m pip download -q --no-deps --no-binary :all: -d "$tmp" "$PKG" || { say "pip download failed"; return 1; }
    local tgz
    tgz=$(ls "$tmp"/*.tar.gz 2>/dev/null | head -1)
    [ -n "$tgz" ] || { say "no source archive downloaded"; return 1; }
    tar -xzf "$tgz" -C "$tmp" || return 1
    local root
    root=$(ls -d "$tmp"/*/vendor/llama.cpp 2>/dev/null | head -1)
    [ -d "$root" ] || { say "the package holds no vendor/llama.cpp"; return 1; }
    rm -rf "$SRC.tmp" && mkdir -p "$SRC.tmp/tools" "$SRC.tmp/ggml/src" || return 1
    # what llama-bench needs; every other tool, backend, model file and doc stays behind
    cp -r "$root"/{CMakeLists.txt,cmake,include,src,common,vendor,LICENSE} "$SRC.tmp/" || return 1
    cp -r "$root/tools/llama-bench" "$SRC.tmp/tools/" || return 1
    printf 'find_package(Threads REQUIRED)\nllama_add_compile_flags()\nadd_subdirectory(llama-bench)\n' \
        >"$SRC.tmp/tools/CMakeLists.txt"
    cp -r "$root"/ggml/{CMakeLists.txt,cmake,include} "$SRC.tmp/ggml/" || return 1
    for f in "$root"/ggml/src/*; do
        case "$(basename "$f")" in
            ggml-*) [ -d "$f" ] || cp "$f" "$SRC.tmp/ggml/src/" ;;
            *) cp -r "$f" "$SRC.tmp/ggml/src/" ;;
        esac
    done
    cp -r "$root"/ggml/src/{ggml-cpu,ggml-cuda} "$SRC.tmp/ggml/src/" || return 1
    # the vendored copy has no .git: the package version and the archive's hash name it
    echo "$(basename "$tgz" .tar.gz) sha256 $(sha256sum "$tgz" | cut -c1-16)" >"$SRC.tmp/VERSION"
    rm -rf "$SRC" && mv "$SRC.tmp" "$SRC" || return 1
    say "llama.cpp from $(cat "$SRC/VERSION") in $SRC: $(du -sh "$SRC" | cut -f1)"
}

build() {
    local bd=${1:-/tmp/peer-build} cuda=OFF
    [ -f "$SRC/CMakeLists.txt" ] || { say "$SRC missing: run \`tools/bench_peer.sh fetch\` first (and carry .carry/peer)"; return 1; }
    { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; } && cuda=ON
    cuda=${PEER_CUDA:-$cuda}   # PEER_CUDA=OFF: a CPU-only build (a quick check of the script)
    [ "$cuda" = ON ] && export PATH=$PATH:/usr/local/cuda/bin
    # the copy sits inside minfer's git tree: name the build by the package, not by our HEAD (ggml asks
    # git for a commit itself: GIT_EXE=/bin/true makes it "unknown")
    local ver
    ver=$(cut -d' ' -f1 "$SRC/VERSION" 2>/dev/null || echo unknown)
    say "building llama-bench (CUDA $cuda) in $bd"
    cmake -S "$SRC" -B "$bd" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=$cuda -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS:-90} \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON \
        -DLLAMA_BUILD_COMMIT="$ver" -DLLAMA_BUILD_NUMBER=0 -DGIT_EXE=/bin/true >"$bd.cmake.log" 2>&1 ||
        { tail -20 "$bd.cmake.log" >&2; return 1; }
    cmake --build "$bd" --target llama-bench -j"${JOBS:-16}" >"$bd.build.log" 2>&1 || { grep -E 'error' "$bd.build.log" | head -20 >&2; return 1; }
    say "built $bd/bin/llama-bench"
}

# llama-bench's JSON lines -> minfer's record shape (test "pp512" / "tg128", depth, tok_s, ...)
run() {
    local bd=${1:?build dir} out=${2:?output .jsonl} model=${3:?model}
    shift 3
    local py=${MINFER_PYTHON:-.venv/bin/python}
    local bin=$bd/bin/llama-bench
    [ -x "$bin" ] || { say "$bin missing: run \`tools/bench_peer.sh build $bd\`"; return 1; }
    local raw
    raw=$(mktemp)
    "$bin" -m "$model" -fa 1 -o jsonl "$@" >"$raw" 2>"$raw.err" || { tail -5 "$raw.err" >&2; rm -f "$raw" "$raw.err"; return 1; }
    "$py" - "$raw" "$out" "$model" "$(head -1 "$SRC/VERSION" 2>/dev/null)" <<'PY'
import json, os, sys, time
raw, out, model, version = sys.argv[1:5]
recs = []
for line in open(raw):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    n_p, n_g, d = int(r.get("n_prompt", 0)), int(r.get("n_gen", 0)), int(r.get("n_depth", 0))
    test = "pp%d" % n_p if n_p and not n_g else "tg%d" % n_g if n_g and not n_p else "pp%d+tg%d" % (n_p, n_g)
    recs.append({"engine": "llama.cpp", "model": os.path.basename(model), "type": r.get("model_type", ""),
                 "backend": r.get("backends", ""), "test": test, "depth": d, "tok_s": float(r["avg_ts"]),
                 "tok_s_sd": float(r.get("stddev_ts", 0.0)), "reps": len(r.get("samples_ts", [])) or None,
                 "gpu": r.get("gpu_info", ""), "cpu": r.get("cpu_info", ""), "commit": r.get("build_commit", ""),
                 "peer_version": version, "flash_attn": r.get("flash_attn"),
                 "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
with open(out, "a") as f:
    for x in recs:
        f.write(json.dumps(x) + "\n")
for x in recs:
    print("| llama.cpp | %s | %s%s | %.2f ± %.2f |" % (x["model"], x["test"], " @ d%d" % x["depth"] if x["depth"] else "",
                                                   x["tok_s"], x["tok_s_sd"]))
if not recs:
    sys.exit("llama-bench wrote no JSON records")
PY
    local rc=$?
    rm -f "$raw" "$raw.err"
    return $rc
}

case "${1:-}" in
fetch) fetch ;;
build) shift; build "$@" ;;
run) shift; run "$@" ;;
*) echo "usage: tools/bench_peer.sh fetch | build [BUILD_DIR] | run BUILD_DIR OUT.jsonl MODEL [llama-bench args]" >&2; exit 2 ;;
esac
