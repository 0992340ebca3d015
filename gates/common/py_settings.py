#!/usr/bin/env python3
"""Gate: the settings table (common/core/mi_settings.c) stays the one list of MINFER_*
variables. Fails when
  1. a MINFER_* name read in library, tool or server source (common/, tools/, server/, phase*/: getenv(),
     mi_setting*() or a private env_*() helper called with the literal name) is not in the
     table;
  2. a table entry has no row in docs/SETTINGS.md with the same kind and meaning (or the
     page lists a library variable the table does not hold);
  3. a table entry is read nowhere;
  4. common/, tools/, server/ or phase*/ call getenv() anywhere but in mi_settings.c (reads go through the
     table);
and checks that `minfer info --settings --json` lists the table as built, with the values
of its environment. Usage: py_settings.py BUILD   (last line "N passed, N failed")"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
MINFER = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "minfer")
TABLE_SRC = os.path.join("common", "core", "mi_settings.c")
SRC_DIRS = ["common", "tools", "server"] + sorted(d for d in os.listdir(ROOT) if d.startswith("phase"))
SRC_EXT = (".c", ".h", ".cu", ".cuh", ".cpp")

READ_RE = re.compile(r'\b(?:secure_getenv|getenv|mi_setting\w*|env_\w+)\s*\(\s*"(MINFER_[A-Z0-9_]+)"')
GETENV_RE = re.compile(r'\b(?:secure_)?getenv\s*\(')
TABLE_RE = re.compile(r'\{\s*"(MINFER_[A-Z0-9_]+)"\s*,\s*MI_SETTING_([A-Z]+)\s*,')
DOC_ROW_RE = re.compile(r'^\|\s*`(MINFER_[A-Z0-9_]+)`\s*\|\s*([^|]*?)\s*\|\s*(.*?)\s*\|\s*$')
# comments out, string literals kept (a name inside a comment is not a read)
TOKEN_RE = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|/\*.*?\*/|//[^\n]*', re.S)

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")


def strip_comments(text):
    return TOKEN_RE.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else " ", text)


def sources():
    for d in SRC_DIRS:
        for base, _, files in os.walk(os.path.join(ROOT, d)):
            for f in sorted(files):
                if f.endswith(SRC_EXT):
                    p = os.path.join(base, f)
                    yield os.path.relpath(p, ROOT), p


def main():
    # the table as written, and as built into the binary
    with open(os.path.join(ROOT, TABLE_SRC)) as f:
        src_table = TABLE_RE.findall(strip_comments(f.read()))
    check("the table in mi_settings.c parses", len(src_table) > 0, f"no entries found in {TABLE_SRC}")
    if not os.access(MINFER, os.X_OK):
        check("minfer is built", False, f"{MINFER} missing: build first (make)")
        print(f"{passed} passed, {failed} failed")
        return 1
    # the values must come from this environment: every table name unset, one set
    names_src = [n for n, _ in src_table]
    env = {k: v for k, v in os.environ.items() if k not in names_src}
    env["MINFER_PROFILE"] = "2"
    env["MINFER_DEBUG_LAYERS"] = "a \"quoted\" path"
    p = subprocess.run([MINFER, "info", "--settings", "--json"], capture_output=True, env=env)
    try:
        table = json.loads(p.stdout.decode())["settings"]
    except (ValueError, KeyError) as e:
        check("minfer info --settings --json", False, f"rc {p.returncode}, not JSON ({e}): {p.stderr.decode()[:300]}")
        print(f"{passed} passed, {failed} failed")
        return 1
    check("minfer info --settings --json exits 0", p.returncode == 0, f"rc {p.returncode}")
    built = [(e["name"], e["kind"].upper()) for e in table]
    check("the binary's table is the source's (same names, kinds, order)", built == src_table,
          f"built {len(built)} entries, source {len(src_table)}: rebuild?")
    names = [e["name"] for e in table]
    dups = sorted({n for n in names if names.count(n) > 1})
    check("no name twice in the table", not dups, ", ".join(dups))
    wrong = [f"{e['name']}={e['value']!r}" for e in table
             if e["value"] != {"MINFER_PROFILE": "2", "MINFER_DEBUG_LAYERS": "a \"quoted\" path"}.get(e["name"])]
    check("info --settings shows this environment's values (2 set, the rest unset)", not wrong, ", ".join(wrong))
    bad_meaning = [e["name"] for e in table if not e["meaning"].strip() or "|" in e["meaning"] or "\n" in e["meaning"]]
    check("every meaning is one non-empty line without '|'", not bad_meaning, ", ".join(bad_meaning))
    t = subprocess.run([MINFER, "info", "--settings"], capture_output=True, env=env)
    txt = t.stdout.decode()
    missing_txt = [n for n in names if n not in txt]
    check("info --settings (text) lists every entry", t.returncode == 0 and not missing_txt,
          f"rc {t.returncode}; missing {missing_txt}")

    # 1 and 3: the names read in the source vs the table
    reads = {}
    getenv_outside = []
    for rel, path in sources():
        with open(path, errors="replace") as f:
            code = strip_comments(f.read())
        for m in READ_RE.finditer(code):
            line = code.count("\n", 0, m.start()) + 1
            reads.setdefault(m.group(1), []).append(f"{rel}:{line}")
        if rel != TABLE_SRC and rel.split(os.sep)[0] in SRC_DIRS:
            for m in GETENV_RE.finditer(code):
                getenv_outside.append(f"{rel}:{code.count(chr(10), 0, m.start()) + 1}")
    not_in_table = sorted(set(reads) - set(names))
    check(f"every MINFER_* name read in {', '.join(SRC_DIRS)} is in the table ({len(reads)} names read)",
          not not_in_table, "; ".join(f"{n} ({reads[n][0]})" for n in not_in_table))
    unread = [n for n in names if n not in reads]
    check("every table entry is read somewhere", not unread, ", ".join(unread))
    check(f"{', '.join(SRC_DIRS)} call getenv() only in mi_settings.c", not getenv_outside, ", ".join(getenv_outside))

    # 2: docs/SETTINGS.md holds every entry with the same kind and meaning
    doc_path = os.path.join(ROOT, "docs", "SETTINGS.md")
    doc_rows = {}
    if os.path.exists(doc_path):
        with open(doc_path) as f:
            for line in f:
                m = DOC_ROW_RE.match(line.rstrip("\n"))
                if m:
                    doc_rows.setdefault(m.group(1), (m.group(2), m.group(3).replace("\\|", "|")))
    check("docs/SETTINGS.md exists", os.path.exists(doc_path), doc_path)
    missing_doc = [n for n in names if n not in doc_rows]
    check("every table entry has a row in docs/SETTINGS.md", not missing_doc, ", ".join(missing_doc))
    differ = [n for n in names if n in doc_rows and doc_rows[n] != (t_kind(table, n), t_meaning(table, n))]
    check("each row's kind and meaning are the table's", not differ,
          "; ".join(f"{n}: doc {doc_rows[n]!r} vs table {(t_kind(table, n), t_meaning(table, n))!r}" for n in differ))
    # a library row (kind column, not a harness "read by" column) must still be in the table
    stale = [n for n, (kind, _) in doc_rows.items() if kind in ("flag", "int", "string", "list") and n not in names]
    check("docs/SETTINGS.md lists no library variable the table lacks", not stale, ", ".join(stale))
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    check("README.md names docs/SETTINGS.md", "docs/SETTINGS.md" in readme)

    print(f"{len(names)} settings in the table, {len(reads)} MINFER_* names read in the source")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def t_kind(table, n):
    return next(e["kind"] for e in table if e["name"] == n)


def t_meaning(table, n):
    return next(e["meaning"] for e in table if e["name"] == n)


if __name__ == "__main__":
    sys.exit(main())
