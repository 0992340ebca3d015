#!/usr/bin/env bash
# Fetches what `minfer serve` and tools/load_serve.py need on a host without network (the GPU
# machine), into git-ignored folders that travel with the tree when carried:
#   .carry/serve-debs/    the .deb files of libmicrohttpd and jansson (runtime + -dev), from this
#                         machine's apt (apt-get download: no root, nothing installed). Where the
#                         build host lacks <microhttpd.h> / <jansson.h>, the Makefile unpacks them
#                         into BUILD/serve-deps (dpkg-deb -x) and links build/minfer against them
#                         with an rpath. libmicrohttpd12 needs libgnutls30, which Debian and
#                         Ubuntu base systems hold (apt itself uses it).
#   .carry/serve-wheels/  the `openai` client and its dependencies as wheels for CPython
#                         $PYVER on manylinux x86_64 (pip download). On the device:
#                         python3 -m venv /tmp/lv && /tmp/lv/bin/pip install --no-index
#                         --find-links .carry/serve-wheels openai
# Usage: tools/fetch_serve_deps.sh   (PYVER=3.12 by default: the device's Python)
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER=${PYVER:-3.12}
PY=${MINFER_PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
DEBS=.carry/serve-debs
WHEELS=.carry/serve-wheels
mkdir -p "$DEBS" "$WHEELS"
rm -f "$DEBS"/*.deb
(cd "$DEBS" && apt-get download libmicrohttpd12 libmicrohttpd-dev libjansson4 libjansson-dev) \
    || { echo "fetch_serve_deps: apt-get download failed (run apt-get update?)" >&2; exit 1; }
"$PY" -m pip download -q --disable-pip-version-check --only-binary=:all: --implementation cp \
    --python-version "$PYVER" --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any -d "$WHEELS" openai \
    || { echo "fetch_serve_deps: pip download of openai's wheels failed" >&2; exit 1; }
echo "fetch_serve_deps: $(ls "$DEBS" | wc -l) .deb files in $DEBS, $(ls "$WHEELS" | wc -l) wheels in $WHEELS ($(du -sh .carry/serve-debs .carry/serve-wheels | awk '{print $1}' | paste -sd+))"
