#!/usr/bin/env bash
# Installs what the build and the tests need, once: Criterion (apt), and the Python
# references gguf, numpy, tokenizers, matplotlib (pip). Quiet when all is present.
set -e
need_apt=()
[ -f /usr/include/criterion/criterion.h ] || need_apt+=(libcriterion-dev)
command -v clang >/dev/null || need_apt+=(clang)
# libFuzzer runtime for the GGUF fuzz gate
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need_apt+=(libclang-rt-14-dev)
command -v python3 >/dev/null || need_apt+=(python3 python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "minfer setup: apt-get install ${need_apt[*]}"
    SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! python3 -c 'import gguf, numpy, tokenizers, matplotlib, jinja2' 2>/dev/null; then
    echo "minfer setup: pip install gguf numpy tokenizers matplotlib jinja2"
    python3 -m pip install -q gguf==0.19.0 numpy tokenizers matplotlib jinja2 2>&1 | grep -v -i "warning: running pip as" || true
fi
