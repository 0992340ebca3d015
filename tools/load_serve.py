#!/usr/bin/env python3
"""Load test for `minfer serve` with the official `openai` client: N concurrent streaming
clients share R requests (each client takes the next request when its last one ends) and the
run prints requests/s, completion tokens/s, time to first token and inter-token latency
(p50 / p99). --json PATH writes the same as one JSON object (to PATH.tmp, then renamed).

  tools/load_serve.py --url http://127.0.0.1:8080/v1 -c 64 -n 512 --max-tokens 128 [--chat]
                      [--prompt TEXT | --prompt-words N] [--temperature T] [--api-key KEY]
                      [--json PATH]

A token is one streamed chunk with text (the server sends one chunk a token, except where a
token ends inside a UTF-8 character or a stop string is held back); the completion token
count comes from the usage the server puts in each stream's last chunk.
Inter-token latency: the gaps between a request's chunks after its first."""
import argparse
import json
import os
import statistics
import sys
import threading
import time


def pct(xs, q):
    if not xs:
        return None
    s = sorted(xs)
    k = min(len(s) - 1, max(0, int(round(q / 100.0 * (len(s) - 1)))))
    return s[k]


def one(cli, a, model, i):
    t0 = time.perf_counter()
    kw = dict(model=model, max_tokens=a.max_tokens, stream=True, stream_options={"include_usage": True},
              temperature=a.temperature, seed=a.seed + i)
    prompt = a.prompt if a.prompt else " ".join(["word"] * a.prompt_words)
    if a.chat:
        st = cli.chat.completions.create(messages=[{"role": "user", "content": prompt}], **kw)
    else:
        st = cli.completions.create(prompt=prompt, **kw)
    times, usage = [], None
    for ch in st:
        if ch.usage is not None:
            usage = ch.usage
        if not ch.choices:
            continue
        c = ch.choices[0]
        piece = (c.delta.content if a.chat else c.text) or ""
        if piece:
            times.append(time.perf_counter())
    end = time.perf_counter()
    return {"start": t0, "end": end, "ttft": (times[0] - t0) if times else None,
            "itl": [b - a_ for a_, b in zip(times, times[1:])],
            "tokens": usage.completion_tokens if usage else len(times),
            "prompt_tokens": usage.prompt_tokens if usage else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("-c", "--clients", type=int, default=16)
    ap.add_argument("-n", "--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--prompt", default=None)
    ap.add_argument("--prompt-words", type=int, default=32, help="without --prompt: 'word' repeated N times")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--api-key", default=os.environ.get("MINFER_API_KEY") or "none")
    ap.add_argument("--model", default=None, help="default: the first of GET /v1/models")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.clients < 1 or a.requests < 1:
        ap.error("--clients and --requests must be >= 1")
    from openai import OpenAI
    # the client's own connection pool (1000 connections) holds every client's stream
    cli = OpenAI(base_url=a.url, api_key=a.api_key, max_retries=0, timeout=3600)
    model = a.model or cli.models.list().data[0].id
    results, errors = [], []
    lock = threading.Lock()
    next_i = [0]

    def worker():
        while True:
            with lock:
                i = next_i[0]
                if i >= a.requests:
                    return
                next_i[0] += 1
            try:
                r = one(cli, a, model, i)
                with lock:
                    results.append(r)
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e))

    t0 = time.perf_counter()
    th = [threading.Thread(target=worker) for _ in range(a.clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    ttft = [r["ttft"] for r in results if r["ttft"] is not None]
    itl = [x for r in results for x in r["itl"]]
    toks = sum(r["tokens"] for r in results)
    ms = lambda x: None if x is None else round(x * 1000.0, 2)  # noqa: E731
    summary = {
        "url": a.url, "model": model, "clients": a.clients, "requests": a.requests, "ok": len(results),
        "errors": len(errors), "max_tokens": a.max_tokens, "chat": a.chat, "temperature": a.temperature,
        "prompt_tokens": results[0]["prompt_tokens"] if results else None,
        "wall_s": round(wall, 3), "req_s": round(len(results) / wall, 3), "tok_s": round(toks / wall, 1),
        "completion_tokens": toks,
        "ttft_ms": {"p50": ms(pct(ttft, 50)), "p99": ms(pct(ttft, 99)), "mean": ms(statistics.mean(ttft)) if ttft else None},
        "itl_ms": {"p50": ms(pct(itl, 50)), "p99": ms(pct(itl, 99)), "mean": ms(statistics.mean(itl)) if itl else None},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print("%d clients, %d requests (%d ok, %d errors) in %.2f s against %s" % (
        a.clients, a.requests, len(results), len(errors), wall, model))
    print("  requests/s %.2f | completion tokens/s %.1f (%d tokens)" % (summary["req_s"], summary["tok_s"], toks))
    print("  time to first token  p50 %s ms  p99 %s ms" % (summary["ttft_ms"]["p50"], summary["ttft_ms"]["p99"]))
    print("  inter-token latency  p50 %s ms  p99 %s ms" % (summary["itl_ms"]["p50"], summary["itl_ms"]["p99"]))
    for e in errors[:5]:
        print("  error: %s" % e[:300])
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, a.json)
        print("  summary: %s" % a.json)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
