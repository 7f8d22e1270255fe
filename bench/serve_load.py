#!/usr/bin/env python3
"""Load check for `kestrel serve`: N concurrent streaming clients (threads, one connection each)
against a running server; reports completions, errors, wall time, tokens/s, and the server's peak
RSS and CPU time read from /proc/<pid>.

  python3 bench/serve_load.py --base-url http://127.0.0.1:8000 --pid $(pgrep -f 'kestrel serve') \
      --clients 256 --max-tokens 32
"""
import argparse
import http.client
import json
import threading
import time
import urllib.parse


def stream_one(base, model, prompt, max_tokens, results, i):
    u = urllib.parse.urlsplit(base)
    t0 = time.monotonic()
    try:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                           "temperature": 0, "ignore_eos": True, "stream": True,
                           "stream_options": {"include_usage": True}})
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            results[i] = ("error", f"HTTP {resp.status}", 0, time.monotonic() - t0, None)
            return
        tokens, done, ttft = 0, False, None
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                results[i] = ("error", chunk["error"]["message"], 0, time.monotonic() - t0, ttft)
                return
            if chunk["choices"] and ttft is None:
                ttft = time.monotonic() - t0
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
        results[i] = ("ok" if done else "error", "" if done else "no [DONE]", tokens,
                      time.monotonic() - t0, ttft)
    except Exception as e:  # noqa: BLE001 - every failure is counted, none stops the run
        results[i] = ("error", repr(e), 0, time.monotonic() - t0, None)


def proc_stats(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime + stime
    return rss * 1024, ticks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--clients", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--model", default=None)
    a = ap.parse_args()
    u = urllib.parse.urlsplit(a.base_url)
    conn = http.client.HTTPConnection(u.hostname, u.port)
    conn.request("GET", "/v1/models")
    model = a.model or json.loads(conn.getresponse().read())["data"][0]["id"]

    import os
    hz = os.sysconf("SC_CLK_TCK")
    rss0, ticks0 = proc_stats(a.pid)
    peak = [rss0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], proc_stats(a.pid)[0])
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    results = [None] * a.clients
    threads = [threading.Thread(target=stream_one,
                                args=(a.base_url, model, f"Story number {i}: once upon a time",
                                      a.max_tokens, results, i)) for i in range(a.clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    stop.set()
    sampler.join()
    _, ticks1 = proc_stats(a.pid)
    ok = [r for r in results if r and r[0] == "ok"]
    errors = [r for r in results if not r or r[0] != "ok"]
    tokens = sum(r[2] for r in ok)
    ttfts = sorted(r[4] for r in ok if r[4] is not None)
    print(f"clients: {a.clients}, completed: {len(ok)}, errors: {len(errors)}")
    for e in errors[:5]:
        print("  error:", e[1] if e else "no result")
    print(f"wall: {wall:.1f} s, output tokens: {tokens}, output tok/s: {tokens / wall:.1f}")
    if ttfts:
        print(f"TTFT median {ttfts[len(ttfts) // 2]:.2f} s, max {ttfts[-1]:.2f} s")
    print(f"server RSS: {rss0 / 2**20:.0f} MiB before, {peak[0] / 2**20:.0f} MiB peak; "
          f"server CPU: {(ticks1 - ticks0) / hz:.1f} s over {wall:.1f} s wall "
          f"({(ticks1 - ticks0) / hz / wall * 100:.0f}% of one core)")


if __name__ == "__main__":
    main()
