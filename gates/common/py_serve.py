#!/usr/bin/env python3
"""Gate: `minfer serve` with the official `openai` client, on SmolLM2-135M-Instruct (a real
tokenizer and chat template), CPU.
  (a) chat and completion answers, streaming and not, greedy and seeded-sampled, equal to
      `minfer run` for the same prompt, seed and settings (text, finish reason, usage);
      a stop string cuts `minfer run`'s text where it starts;
  (b) 16 concurrent clients (8 sequences at once, the rest queued and joining as others end),
      each answer equal to its own `minfer run` answer;
  (c) each bad request answered with its status and a JSON error, and a good request served
      after it: malformed JSON, wrong field types, unknown model, prompt past the context,
      max_tokens past it, a body over the limit (Content-Length and chunked), invalid UTF-8,
      unknown route, wrong method, an oversized header block, and clients that go away
      mid-stream or mid-answer (their sequences and KV blocks freed: /metrics);
  (d) with an API key (--api-key, and MINFER_API_KEY): missing or wrong key 401, /health 200;
  (e) --parallel 1 --queue 1: a third request is answered 503, later ones are served;
  (f) /metrics parses as Prometheus text and holds the serving figures;
  and SIGTERM with a stream open ends the server with status 0.
On a mismatch the first differing position and both texts are printed.
Usage: py_serve.py BUILD_DIR   (last line "N passed, N failed")"""
import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
MINFER = os.path.abspath(os.path.join(BUILD, "minfer"))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
P = F = 0


def check(name, ok, detail=""):
    global P, F
    if ok:
        P += 1
    else:
        F += 1
    print("%-72s %s%s" % (name, "pass" if ok else "FAIL", "" if ok else "  " + str(detail)[:1500]), flush=True)
    return ok


def diff(got, want):
    k = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
    return "first difference at char %d\n      served: %r\n      run:    %r" % (k, got, want)


class Server:
    """build/minfer serve on a free loopback port (--port 0; the port is read from its log)."""

    def __init__(self, *args, env=None):
        cmd = [MINFER, "serve", "-m", MODEL, "--port", "0", "--backend", "cpu", "-t", "2"] + list(args)
        self.log = []
        self.p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, errors="replace",
                                  env=dict(os.environ, MINFER_LOG="0", **(env or {})))
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.p.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.p.kill()
            raise RuntimeError("serve did not start: %s" % "".join(self.log)[-2000:])
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.p.stderr:
            self.log.append(line)

    def client(self, key="unused"):
        from openai import OpenAI
        return OpenAI(base_url="http://127.0.0.1:%d/v1" % self.port, api_key=key, max_retries=0, timeout=300)

    def raw(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), data

    def metrics(self, auth=None):
        st, _, body = self.raw("GET", "/metrics", headers={"Authorization": "Bearer " + auth} if auth else None)
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, val = line.rsplit(" ", 1)
                out[name] = float(val)
        return out

    def wait_metric(self, pred, secs=15):
        deadline = time.time() + secs
        m = {}
        while time.time() < deadline:
            m = self.metrics()
            if pred(m):
                return True, m
            time.sleep(0.05)
        return False, m

    def stop(self, sig=signal.SIGTERM, secs=30):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            return self.p.wait(secs)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return None


def run_ref(prompt, chat, n, temp=0.0, seed=None, top_k=None, top_p=None):
    """`minfer run`'s answer: (text, prompt tokens, generated tokens)"""
    args = [MINFER, "run", "-m", MODEL, "-p", prompt, "-n", str(n), "--backend", "cpu", "-t", "2"]
    if chat:
        args.append("--chat")
    if temp > 0:
        args += ["--temp", str(temp)]
    if seed is not None:
        args += ["--seed", str(seed)]
    if top_k is not None:
        args += ["--top-k", str(top_k)]
    if top_p is not None:
        args += ["--top-p", str(top_p)]
    r = subprocess.run(args, capture_output=True, env=dict(os.environ, MINFER_LOG="0"), timeout=300)
    out = r.stdout.decode("utf-8", "replace")
    k = out.rfind("\nprompt: ")
    m = re.search(r"prompt: (\d+) tok.*gen: (\d+) tok", out[k:])
    if r.returncode or k < 0 or not m:
        raise RuntimeError("minfer run failed (%d): %s" % (r.returncode, r.stderr.decode()[-500:]))
    return out[:k], int(m.group(1)), int(m.group(2))


def served(cli, spec):
    """(text, finish_reason, usage) of one request through the openai client"""
    kw = dict(model=MODEL_ID, max_tokens=spec["n"], stream=spec["stream"])
    extra = {}
    if spec.get("temp", 0) > 0:
        kw["temperature"] = spec["temp"]
    if spec.get("seed") is not None:
        kw["seed"] = spec["seed"]
    if spec.get("top_p") is not None:
        kw["top_p"] = spec["top_p"]
    if spec.get("top_k") is not None:
        extra["top_k"] = spec["top_k"]
    if spec.get("stop"):
        kw["stop"] = spec["stop"]
    if extra:
        kw["extra_body"] = extra
    if spec["stream"]:
        kw["stream_options"] = {"include_usage": True}
    if spec["chat"]:
        r = cli.chat.completions.create(messages=[{"role": "user", "content": spec["prompt"]}], **kw)
    else:
        r = cli.completions.create(prompt=spec["prompt"], **kw)
    if not spec["stream"]:
        c = r.choices[0]
        return (c.message.content if spec["chat"] else c.text), c.finish_reason, r.usage
    text, finish, usage = "", None, None
    for ch in r:
        if ch.usage is not None:
            usage = ch.usage
        if not ch.choices:
            continue
        c = ch.choices[0]
        piece = (c.delta.content if spec["chat"] else c.text) or ""
        text += piece
        if c.finish_reason:
            finish = c.finish_reason
    return text, finish, usage


def same_as_run(name, cli, spec, ref=None):
    want, n_prompt, n_gen = ref or run_ref(spec["prompt"], spec["chat"], spec["n"], spec.get("temp", 0.0),
                                           spec.get("seed"), spec.get("top_k"), spec.get("top_p"))
    try:
        got, finish, usage = served(cli, spec)
    except Exception as e:  # noqa: BLE001
        return check(name, False, "request failed: %r" % e)
    want_finish = "length" if n_gen == spec["n"] else "stop"
    ok = got == want and finish == want_finish and usage is not None and \
        (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (n_prompt, n_gen, n_prompt + n_gen)
    detail = diff(got, want) if got != want else "finish %r (run: %r), usage %r (run: prompt %d, gen %d)" % (
        finish, want_finish, usage, n_prompt, n_gen)
    return check(name, ok, detail)


CAPITAL = "What is the capital of France? Answer in one sentence."
PROMPTS = ["What is the capital of France? Answer in one sentence.", "Write two sentences about the ocean.",
           "Give me three tips for staying healthy.", "Name a colour of the sky.", "The capital of France is",
           "Once upon a time, in a small village,", "def fibonacci(n):", "The three primary colours are"]


def part_a(s):
    cli = s.client()
    for stream in (False, True):
        tag = "stream" if stream else "whole"
        same_as_run("(a) chat greedy, %s, = minfer run --chat" % tag, cli,
                    dict(prompt=CAPITAL, chat=True, n=48, stream=stream))
        same_as_run("(a) completion greedy, %s, = minfer run" % tag, cli,
                    dict(prompt="The capital of France is", chat=False, n=24, stream=stream))
        same_as_run("(a) chat sampled (temp 0.8, seed 42, top-k 40, top-p 0.9), %s" % tag, cli,
                    dict(prompt="Write two sentences about the ocean.", chat=True, n=40, stream=stream, temp=0.8,
                         seed=42, top_k=40, top_p=0.9))
        same_as_run("(a) completion sampled (temp 1.0, seed 7), %s" % tag, cli,
                    dict(prompt="Once upon a time, in a small village,", chat=False, n=32, stream=stream, temp=1.0, seed=7))
    # a stop string: the text is run's, cut where the stop string starts
    want, _, _ = run_ref(CAPITAL, True, 48)
    for stream in (False, True):
        got, finish, _ = served(cli, dict(prompt=CAPITAL, chat=True, n=48, stream=stream, stop=["Paris", "zzz"]))
        cut = want[:want.index("Paris")] if "Paris" in want else want
        check("(a) stop ['Paris', 'zzz'] cuts run's text there (%s)" % ("stream" if stream else "whole"),
              got == cut and finish == "stop", diff(got, cut) + " finish %r" % finish)


def part_b(s):
    specs = []
    for i in range(16):
        sampled = i % 4 == 3
        specs.append(dict(prompt=PROMPTS[i % len(PROMPTS)] if i < 8 else PROMPTS[(i * 3) % len(PROMPTS)],
                          chat=i % 2 == 0, stream=(i // 2) % 2 == 0, n=24 + (i % 3) * 4,
                          temp=0.9 if sampled else 0.0, seed=100 + i if sampled else None))
    refs = [run_ref(sp["prompt"], sp["chat"], sp["n"], sp["temp"], sp["seed"]) for sp in specs]
    peak = {"running": 0, "queue": 0}
    done = threading.Event()

    def poll():
        while not done.is_set():
            try:
                m = s.metrics()
                peak["running"] = max(peak["running"], m.get("minfer_running_sequences", 0))
                peak["queue"] = max(peak["queue"], m.get("minfer_queue_length", 0))
            except Exception:  # noqa: BLE001
                pass
            time.sleep(0.02)

    threading.Thread(target=poll, daemon=True).start()
    cli = s.client()
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        futs = [ex.submit(served, cli, sp) for sp in specs]
        results = []
        for f in futs:
            try:
                results.append(f.result())
            except Exception as e:  # noqa: BLE001
                results.append(("<error %r>" % e, None, None))
    done.set()
    dt = time.time() - t0
    bad = []
    for i, (sp, (want, n_prompt, n_gen), (got, finish, usage)) in enumerate(zip(specs, refs, results)):
        want_finish = "length" if n_gen == sp["n"] else "stop"
        if got != want or finish != want_finish or usage is None or usage.completion_tokens != n_gen:
            bad.append("client %d (%s, %s, %s): %s; finish %r/%r" % (
                i, "chat" if sp["chat"] else "completion", "stream" if sp["stream"] else "whole",
                "sampled" if sp["temp"] else "greedy", diff(got, want), finish, want_finish))
    check("(b) 16 concurrent clients, each answer = its own minfer run (%.1f s)" % dt, not bad, "\n    ".join(bad[:3]))
    check("(b) they ran together: peak %d sequences in the batch, %d queued" % (peak["running"], peak["queue"]),
          peak["running"] >= 2, "the batch never held more than one sequence")


def error_of(body):
    try:
        e = json.loads(body)["error"]
        return e if isinstance(e.get("message"), str) and e.get("type") and e.get("code") else None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def good_after(s, what):
    """a good request right after a bad one: served, and the answer is the greedy one"""
    st, _, body = s.raw("POST", "/v1/completions", {"model": MODEL_ID, "prompt": "The capital of France is", "max_tokens": 3})
    try:
        ok = st == 200 and json.loads(body)["choices"][0]["text"] == GOOD_TEXT
    except (ValueError, KeyError, IndexError):
        ok = False
    check("    and a good request after it is served (%s)" % what, ok, "status %d: %r" % (st, body[:300]))


def raw_socket(port, data, read=True, timeout=30):
    so = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    so.sendall(data)
    out = b""
    if read:
        try:
            while True:
                b = so.recv(65536)
                if not b:
                    break
                out += b
                if b"\r\n\r\n" in out and b"Content-Length" in out:
                    head, _, rest = out.partition(b"\r\n\r\n")
                    n = int(re.search(rb"Content-Length: (\d+)", head, re.I).group(1))
                    if len(rest) >= n:
                        break
        except socket.timeout:
            pass
    so.close()
    return out


def status_of(resp):
    m = re.match(rb"HTTP/1\.[01] (\d+)", resp)
    return int(m.group(1)) if m else None


def part_c(s):
    global GOOD_TEXT
    GOOD_TEXT = run_ref("The capital of France is", False, 3)[0]
    long_prompt = "word " * 1100
    cases = [
        ("malformed JSON", "/v1/completions", b'{"prompt": "hi", "max_tokens": 4', 400, "invalid_json"),
        ("not an object", "/v1/completions", b'["prompt"]', 400, "invalid_type"),
        ("max_tokens a string", "/v1/completions", {"prompt": "hi", "max_tokens": "ten"}, 400, "invalid_type"),
        ("max_tokens 1.5", "/v1/completions", {"prompt": "hi", "max_tokens": 1.5}, 400, "invalid_type"),
        ("temperature a string", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}, 400, "invalid_type"),
        ("messages a string", "/v1/chat/completions", {"messages": "hi"}, 400, "invalid_type"),
        ("a message without role", "/v1/chat/completions", {"messages": [{"content": "hi"}]}, 400, "invalid_type"),
        ("stream a string", "/v1/completions", {"prompt": "hi", "stream": "yes"}, 400, "invalid_type"),
        ("prompt a number", "/v1/completions", {"prompt": 7}, 400, "invalid_type"),
        ("top_p 0", "/v1/completions", {"prompt": "hi", "top_p": 0}, 400, "invalid_value"),
        ("no prompt", "/v1/completions", {"max_tokens": 3}, 400, "missing_field"),
        ("unknown model", "/v1/completions", {"model": "gpt-4", "prompt": "hi"}, 404, "model_not_found"),
        ("prompt longer than the context", "/v1/completions", {"prompt": long_prompt, "max_tokens": 4}, 400,
         "context_length_exceeded"),
        ("chat prompt longer than the context", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": long_prompt}]}, 400, "context_length_exceeded"),
        ("max_tokens past the context", "/v1/completions", {"prompt": "hi", "max_tokens": 100000}, 400,
         "context_length_exceeded"),
        ("invalid UTF-8 in the body", "/v1/completions", b'{"prompt": "caf\xc3\x28 \xff", "max_tokens": 4}', 400,
         "invalid_utf8"),
        ("invalid UTF-8 (a surrogate's bytes)", "/v1/completions", b'{"prompt": "\xed\xa0\x80", "max_tokens": 4}', 400,
         "invalid_utf8"),
        ("a lone surrogate escape", "/v1/completions", b'{"prompt": "\\ud800", "max_tokens": 4}', 400, "invalid_json"),
    ]
    for what, path, body, want, code in cases:
        st, _, data = s.raw("POST", path, body)
        e = error_of(data)
        check("(c) %s: %d %s" % (what, want, code), st == want and e is not None and e["code"] == code,
              "status %d, body %r" % (st, data[:300]))
        good_after(s, what)
    # the same through the openai client: its typed errors
    import openai
    cli = s.client()
    for what, call, exc in [
            ("openai client: unknown model", lambda: cli.completions.create(model="nope", prompt="hi", max_tokens=2),
             openai.NotFoundError),
            ("openai client: wrong type (extra_body)", lambda: cli.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": "hi"}], extra_body={"top_k": "many"}),
             openai.BadRequestError)]:
        try:
            call()
            check("(c) %s raises %s" % (what, exc.__name__), False, "no error")
        except exc:
            check("(c) %s raises %s" % (what, exc.__name__), True)
        except Exception as e:  # noqa: BLE001
            check("(c) %s raises %s" % (what, exc.__name__), False, repr(e))
    # route and method
    st, _, data = s.raw("GET", "/v1/nothing")
    check("(c) unknown route: 404", st == 404 and error_of(data), "status %d %r" % (st, data[:200]))
    good_after(s, "unknown route")
    st, hd, data = s.raw("GET", "/v1/completions")
    check("(c) wrong method: 405 with Allow: POST", st == 405 and error_of(data) and hd.get("Allow") == "POST",
          "status %d %r %r" % (st, hd, data[:200]))
    good_after(s, "wrong method")
    # a body over --max-body: refused from its Content-Length before it is read ...
    r = raw_socket(s.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           b"Content-Length: 2000000\r\n\r\n{\"prompt\": \"")
    check("(c) body over the limit (Content-Length): 413", status_of(r) == 413 and b"body_too_large" in r, r[:300])
    good_after(s, "413 by Content-Length")
    # ... and a chunked one when it passes the limit
    chunk = b"x" * 30000
    data = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(5)) + b"0\r\n\r\n"
    r = raw_socket(s.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           b"Transfer-Encoding: chunked\r\n\r\n" + data)
    check("(c) chunked body over the limit: 413", status_of(r) == 413 and b"body_too_large" in r, r[:300])
    good_after(s, "413 chunked")
    # a header block past libmicrohttpd's per-connection memory
    r = raw_socket(s.port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n")
    check("(c) header block over 32 KiB: 431 (or 413)", status_of(r) in (431, 413), r[:200])
    good_after(s, "oversized header")
    disconnects(s)


def disconnects(s):
    """clients that go away: the sequence and its KV blocks are freed at once"""
    import openai  # noqa: F401
    base = s.metrics()
    cancelled0 = base.get('minfer_requests_total{finish="cancelled"}', 0)
    body = json.dumps({"model": MODEL_ID, "prompt": "Once upon a time, in a small village,", "max_tokens": 400,
                       "stream": True}).encode()
    so = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    so.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
               % len(body) + body)
    got = b""
    while got.count(b"data: ") < 3:
        b = so.recv(4096)
        if not b:
            break
        got += b
    running = s.metrics().get("minfer_running_sequences", 0)
    so.close()
    ok, m = s.wait_metric(lambda m: m.get("minfer_running_sequences") == 0 and m.get("minfer_kv_blocks_used") == 0 and
                          m.get('minfer_requests_total{finish="cancelled"}', 0) >= cancelled0 + 1)
    check("(c) a client gone mid-stream: cancelled, sequence and KV blocks freed", got.count(b"data: ") >= 3 and
          running == 1 and ok, "events %d, running before %s; metrics after %r" % (got.count(b"data: "), running, m))
    good_after(s, "client gone mid-stream")
    # the openai client leaving a stream early (close() drops the connection)
    cli = s.client()
    st = cli.completions.create(model=MODEL_ID, prompt="Once upon a time, in a small village,", max_tokens=400, stream=True)
    n = 0
    for _ in st:
        n += 1
        if n == 3:
            break
    st.close()
    ok, m = s.wait_metric(lambda m: m.get("minfer_running_sequences") == 0 and m.get("minfer_kv_blocks_used") == 0 and
                          m.get('minfer_requests_total{finish="cancelled"}', 0) >= cancelled0 + 2)
    check("(c) openai client closes a stream early: cancelled and freed", ok, "metrics %r" % m)
    # a whole-answer client that hangs up while waiting
    body = json.dumps({"model": MODEL_ID, "prompt": "Once upon a time, in a small village,", "max_tokens": 400}).encode()
    so = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    so.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
               % len(body) + body)
    s.wait_metric(lambda m: m.get("minfer_running_sequences") == 1, 10)
    so.close()
    ok, m = s.wait_metric(lambda m: m.get("minfer_running_sequences") == 0 and m.get("minfer_kv_blocks_used") == 0 and
                          m.get('minfer_requests_total{finish="cancelled"}', 0) >= cancelled0 + 3)
    check("(c) a client gone before its whole answer: cancelled and freed", ok, "metrics %r" % m)
    good_after(s, "client gone mid-answer")
    # capacity is whole again: all 8 sequences at once, each right
    cli = s.client()
    want = run_ref("Name a colour of the sky.", True, 12)[0]
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        outs = list(ex.map(lambda _: served(cli, dict(prompt="Name a colour of the sky.", chat=True, n=12, stream=True))[0],
                           range(8)))
    check("(c) afterwards the full batch (8 at once) serves right answers", all(o == want for o in outs),
          diff(next((o for o in outs if o != want), ""), want))


def part_d():
    for how, args, env in [("--api-key", ["--api-key", "s3cret-key"], None),
                           ("MINFER_API_KEY", [], {"MINFER_API_KEY": "s3cret-key"})]:
        s = Server("--metrics", *args, env=env)
        try:
            st, hd, data = s.raw("GET", "/v1/models")
            check("(d) %s: no key -> 401 with a JSON error" % how, st == 401 and error_of(data), "status %d %r" % (st, data[:200]))
            for key in ["wrong-key!", "s3cret-kez", "s3cret-key-longer", "s3cret", ""]:
                st, _, data = s.raw("GET", "/v1/models", headers={"Authorization": "Bearer " + key})
                check("(d) %s: key %r -> 401" % (how, key), st == 401 and error_of(data), "status %d" % st)
            st, _, _ = s.raw("GET", "/v1/models", headers={"Authorization": "Basic czNjcmV0LWtleQ=="})
            check("(d) %s: a Basic credential -> 401" % how, st == 401, "status %d" % st)
            st, _, _ = s.raw("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
            check("(d) %s: POST without key -> 401" % how, st == 401, "status %d" % st)
            st, _, _ = s.raw("GET", "/metrics")
            check("(d) %s: /metrics without key -> 401" % how, st == 401, "status %d" % st)
            st, _, data = s.raw("GET", "/health")
            check("(d) %s: /health without key -> 200" % how, st == 200, "status %d" % st)
            import openai
            try:
                s.client("wrong").models.list()
                check("(d) %s: openai client with a wrong key raises AuthenticationError" % how, False, "no error")
            except openai.AuthenticationError:
                check("(d) %s: openai client with a wrong key raises AuthenticationError" % how, True)
            try:
                r = s.client("s3cret-key").chat.completions.create(
                    model=MODEL_ID, messages=[{"role": "user", "content": "Name a colour of the sky."}], max_tokens=4)
                check("(d) %s: the right key is served" % how, r.choices[0].message.content is not None)
            except Exception as e:  # noqa: BLE001
                check("(d) %s: the right key is served" % how, False, repr(e))
        finally:
            s.stop()


def part_e():
    s = Server("--parallel", "1", "--queue", "1", "--metrics")
    import openai
    socks = []
    try:
        body = json.dumps({"model": MODEL_ID, "prompt": "Once upon a time, in a small village,", "max_tokens": 300,
                           "stream": True}).encode()
        req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
               % len(body) + body)
        for _ in range(2):
            so = socket.create_connection(("127.0.0.1", s.port), timeout=60)
            so.sendall(req)
            socks.append(so)
        ok, m = s.wait_metric(lambda m: m.get("minfer_running_sequences") == 1 and m.get("minfer_queue_length") == 1)
        check("(e) --parallel 1 --queue 1: one running, one queued", ok, "metrics %r" % m)
        try:
            s.client().completions.create(model=MODEL_ID, prompt="hi", max_tokens=2)
            check("(e) a third request -> 503", False, "served")
        except openai.APIStatusError as e:
            check("(e) a third request -> 503 (queue full), JSON error", e.status_code == 503 and
                  error_of(e.response.content) is not None, "status %d" % e.status_code)
        m = s.metrics()
        check("(e) /metrics counts the rejection", m.get("minfer_requests_rejected_total") == 1, "metrics %r" % m)
        for so in socks:
            so.close()
        ok, m = s.wait_metric(lambda m: m.get("minfer_running_sequences") == 0 and m.get("minfer_queue_length") == 0 and
                              m.get("minfer_kv_blocks_used") == 0)
        check("(e) both clients gone: batch and queue empty", ok, "metrics %r" % m)
        try:
            r = s.client().completions.create(model=MODEL_ID, prompt="The capital of France is", max_tokens=3)
            check("(e) then a request is served", r.choices[0].text == GOOD_TEXT, repr(r.choices[0].text))
        except Exception as e:  # noqa: BLE001
            check("(e) then a request is served", False, repr(e))
        # SIGTERM while a stream is open: the stream ends, the server exits 0
        so = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        so.sendall(req)
        got = b""
        while b"data: " not in got:
            b = so.recv(4096)
            if not b:
                break
            got += b
        t0 = time.time()
        rc = s.stop(signal.SIGTERM, 30)
        rest = b""
        try:
            while True:
                b = so.recv(65536)
                if not b:
                    break
                rest += b
        except OSError:
            pass
        so.close()
        check("(e) SIGTERM with a stream open: exit 0 in %.1f s, the stream told" % (time.time() - t0),
              rc == 0 and (b"shutting down" in rest or b"[DONE]" in rest), "rc %r, tail %r" % (rc, rest[-300:]))
    finally:
        for so in socks:
            so.close()
        s.stop()


def part_f(s):
    st, hd, body = s.raw("GET", "/metrics")
    text = body.decode()
    types, problems, names = {}, [], set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*\})? (\S+)$', line)
        if not m:
            problems.append("bad line %r" % line)
            continue
        try:
            float(m.group(4))
        except ValueError:
            problems.append("bad value %r" % line)
        names.add(m.group(1))
        if m.group(1) not in types:
            problems.append("no TYPE for %s" % m.group(1))
        elif types[m.group(1)] == "counter" and not m.group(1).endswith("_total"):
            problems.append("counter %s without _total" % m.group(1))
    check("(f) /metrics: 200, text/plain 0.0.4", st == 200 and hd.get("Content-Type", "").startswith("text/plain; version=0.0.4"),
          "status %d, %r" % (st, hd.get("Content-Type")))
    check("(f) /metrics parses as Prometheus text", not problems and names, "; ".join(problems[:5]))
    need = ["minfer_tokens_per_second", "minfer_queue_length", "minfer_running_sequences", "minfer_kv_blocks_used",
            "minfer_kv_blocks_total", "minfer_generated_tokens_total", "minfer_requests_total"]
    check("(f) /metrics has tokens/s, queue, running, KV blocks", all(n in names for n in need),
          "missing %s" % [n for n in need if n not in names])
    m = s.metrics()
    check("(f) the counters moved (tokens generated, steps, tokens/s > 0 after a burst)",
          m.get("minfer_generated_tokens_total", 0) > 100 and m.get("minfer_steps_total", 0) > 10, repr(m))


def guarded(part, *args):
    """a part that raises (the server died, a socket was refused) is one failure; the rest still run"""
    try:
        part(*args)
    except Exception as e:  # noqa: BLE001
        check("%s ran to its end" % part.__name__, False, repr(e))


def main():
    if not os.access(MINFER, os.X_OK):
        check("build/minfer exists", False, "%s missing: build first" % MINFER)
        print("%d passed, %d failed" % (P, F))
        return 1
    h = subprocess.run([MINFER, "serve", "--help"], capture_output=True)
    if not check("minfer serve is built into the binary (libmicrohttpd, jansson)", h.returncode == 0,
                 (h.stderr or h.stdout).decode()[:300]):
        print("%d passed, %d failed" % (P, F))
        return 1
    if not check("model %s present (make models)" % os.path.basename(MODEL), os.path.exists(MODEL), MODEL):
        print("%d passed, %d failed" % (P, F))
        return 1
    try:
        import openai  # noqa: F401
        check("the openai client imports (tools/requirements.txt)", True)
    except ImportError as e:
        check("the openai client imports (tools/requirements.txt)", False, repr(e))
        print("%d passed, %d failed" % (P, F))
        return 1
    t0 = time.time()
    s = Server("--parallel", "8", "--queue", "16", "-c", "1024", "--metrics", "--max-body", "100000")
    try:
        for part in (part_a, part_b, part_c, part_f):
            guarded(part, s)
    finally:
        rc = s.stop()
        check("the server exits 0 on SIGTERM", rc == 0, "rc %r; log tail: %s" % (rc, "".join(s.log)[-800:]))
    guarded(part_d)
    guarded(part_e)
    print("gate time %.0f s" % (time.time() - t0))
    print("%d passed, %d failed" % (P, F))
    return 1 if F else 0


GOOD_TEXT = None
if __name__ == "__main__":
    sys.exit(main())
