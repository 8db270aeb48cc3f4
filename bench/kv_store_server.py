#!/usr/bin/env python3
"""bench/kv_store_server.py: the global prompt cache measured through `tessera serve`.

64 prompts (8 families of a 1000-token prefix, each with 8 suffixes of 24
tokens: random token ids of the model's vocabulary) are sent one at a time,
streamed, and the time to the first streamed token is taken on the client:

  cold      a server without prefix caching;
  warm      a server with --kv-store DIR that served the prompts once
            already (second pass: every prefix in RAM);
  restart   that server stopped (SIGTERM) and started again on DIR;
  redis     (with --redis-server) two replicas on one Redis started here:
            replica 1 serves the prompts, then replica 2 serves them
            (its prefixes come from Redis); `local` is replica 1's second
            pass (its own RAM).

Every phase's completions (greedy, 4 tokens) must equal cold's. Prints JSON.

  bench/kv_store_server.py --tessera build/tessera --model M [--threads 2]
      [--families 8] [--per-family 8] [--prefix 1000] [--suffix 24]
      [--redis-server redis-server]
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def start_server(tessera, log, args):
    f = open(log, "w")
    p = subprocess.Popen([tessera, "serve", "--port", "0"] + args, stderr=f, stdout=subprocess.DEVNULL)
    for _ in range(600):
        text = open(log).read()
        m = re.search(r"listening on http://([0-9.]+):([0-9]+)", text)
        if m:
            host, port = m.group(1), int(m.group(2))
            for _ in range(600):
                try:
                    c = http.client.HTTPConnection(host, port, timeout=5)
                    c.request("GET", "/health")
                    if c.getresponse().status == 200:
                        return p, (host, port)
                except OSError:
                    pass
                time.sleep(0.1)
        if p.poll() is not None:
            raise RuntimeError("server exited early:\n" + open(log).read())
        time.sleep(0.1)
    raise RuntimeError("server did not start")


def stop_server(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)


def ask(addr, prompt, max_tokens):
    """Streams one completion; returns (seconds to the first token, text)."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True})
    c = http.client.HTTPConnection(*addr, timeout=300)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    ttft, text = None, ""
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        piece = chunk["choices"][0].get("text", "")
        if ttft is None and piece:
            ttft = time.perf_counter() - t0
        text += piece
    return ttft, text


def serve_all(addr, prompts, max_tokens):
    out = [ask(addr, p, max_tokens) for p in prompts]
    return [t for t, _ in out], [x for _, x in out]


def metric(addr, name):
    c = http.client.HTTPConnection(*addr, timeout=10)
    c.request("GET", "/metrics")
    for line in c.getresponse().read().decode().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            return float(parts[1])
    return 0.0


def describe(ttfts, texts, cold_texts):
    return {"ttft_mean_s": statistics.mean(ttfts), "ttft_p50_s": statistics.median(ttfts),
            "ttft_max_s": max(ttfts), "identical_to_cold": texts == cold_texts}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--families", type=int, default=8)
    ap.add_argument("--per-family", type=int, default=8)
    ap.add_argument("--prefix", type=int, default=1000)
    ap.add_argument("--suffix", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--redis-server", default="")
    a = ap.parse_args()

    rng = random.Random(11)
    prompts = []
    for _ in range(a.families):
        prefix = [1] + [rng.randrange(3, a.vocab) for _ in range(a.prefix - 1)]
        for _ in range(a.per_family):
            prompts.append(prefix + [rng.randrange(3, a.vocab) for _ in range(a.suffix)])
    tmp = tempfile.mkdtemp(prefix="tessera-kv-store-server-")
    common = ["-m", a.model, "-t", str(a.threads), "--kv-memory", "2G"]
    out = {"benchmark": "kv_store_server", "model": a.model, "threads": a.threads, "prompts": len(prompts),
           "families": a.families, "prefix_tokens": a.prefix, "suffix_tokens": a.suffix, "max_tokens": a.max_tokens}
    procs = []
    try:
        p, addr = start_server(a.tessera, f"{tmp}/cold.log", common + ["--no-prefix-cache"])
        cold_t, cold_x = serve_all(addr, prompts, a.max_tokens)
        stop_server(p)
        out["cold"] = describe(cold_t, cold_x, cold_x)

        store = ["--kv-store", f"{tmp}/store"]
        p, addr = start_server(a.tessera, f"{tmp}/a.log", common + store)
        serve_all(addr, prompts, a.max_tokens)
        warm_t, warm_x = serve_all(addr, prompts, a.max_tokens)
        stop_server(p)
        out["warm_ram"] = describe(warm_t, warm_x, cold_x)
        p, addr = start_server(a.tessera, f"{tmp}/b.log", common + store)
        rest_t, rest_x = serve_all(addr, prompts, a.max_tokens)
        out["restart_disk"] = describe(rest_t, rest_x, cold_x)
        out["restart_disk"]["blocks_loaded"] = metric(addr, 'tessera_kv_store_hits_total{tier="disk"}')
        stop_server(p)
        out["restart_over_warm"] = out["restart_disk"]["ttft_mean_s"] / out["warm_ram"]["ttft_mean_s"]
        out["cold_over_restart"] = out["cold"]["ttft_mean_s"] / out["restart_disk"]["ttft_mean_s"]

        if a.redis_server:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            rport = s.getsockname()[1]
            s.close()
            redis = subprocess.Popen([a.redis_server, "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", tmp],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(redis)
            time.sleep(0.5)
            r = ["--kv-store", f"redis://127.0.0.1:{rport}"]
            p1, addr1 = start_server(a.tessera, f"{tmp}/r1.log", common + r)
            procs.append(p1)
            serve_all(addr1, prompts, a.max_tokens)
            local_t, local_x = serve_all(addr1, prompts, a.max_tokens)
            stop_server(p1)
            p2, addr2 = start_server(a.tessera, f"{tmp}/r2.log", common + r)
            procs.append(p2)
            rep_t, rep_x = serve_all(addr2, prompts, a.max_tokens)
            out["redis_local"] = describe(local_t, local_x, cold_x)
            out["redis_replica"] = describe(rep_t, rep_x, cold_x)
            out["redis_replica"]["blocks_loaded"] = metric(addr2, 'tessera_kv_store_hits_total{tier="redis"}')
            stop_server(p2)
            out["redis_over_local"] = out["redis_replica"]["ttft_mean_s"] / out["redis_local"]["ttft_mean_s"]
    finally:
        for q in procs:
            if q.poll() is None:
                q.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
