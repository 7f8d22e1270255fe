#!/usr/bin/env python3
"""Cost of grammar-constrained decoding: streams the same chat request with a constraint and then
without one (ignore_eos, the same token count), alternating, and prints the median inter-token
latency of each. The constraint is a json_schema response_format (default), or a
structured_outputs regex or EBNF grammar. Run against `kestrel serve` on an idle machine:

  python3 bench/structured_overhead.py --base-url http://127.0.0.1:8000 --model NAME [--pairs 5]
      [--constraint schema|regex|grammar]
"""
import argparse
import http.client
import json
import statistics
import time
import urllib.parse

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"},
                         "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8}},
          "required": ["name", "age", "tags"]}


# A JSON grammar in EBNF, for the generic (non-JSON-Schema) matcher path.
JSON_EBNF = r"""
root   ::= object
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws (pair ("," ws pair)*)? ws "}"
pair   ::= string ws ":" ws value
array  ::= "[" ws (value ("," ws value)*)? ws "]"
string ::= "\"" [^"\\\x00-\x1f]* "\""
number ::= "-"? [0-9]+ ("." [0-9]+)?
ws     ::= [ ]?
"""
CONSTRAINTS = {
    "schema": {"response_format": {"type": "json_schema",
                                   "json_schema": {"name": "p", "schema": SCHEMA}}},
    "regex": {"structured_outputs": {"regex": "[A-Za-z ,.]{1,400}"}},
    "grammar": {"structured_outputs": {"grammar": JSON_EBNF}},
}


def stream(base, body):
    u = urllib.parse.urlsplit(base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    c.request("POST", "/v1/chat/completions", json.dumps({**body, "stream": True}),
              {"content-type": "application/json"})
    r = c.getresponse()
    times = []
    for line in r:
        if line.startswith(b"data: ") and b"[DONE]" not in line:
            d = json.loads(line[6:])
            if d["choices"] and d["choices"][0]["delta"].get("content"):
                times.append(time.perf_counter())
    return len(times), statistics.median(b - a for a, b in zip(times, times[1:])) * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", required=True)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--constraint", choices=sorted(CONSTRAINTS), default="schema")
    a = ap.parse_args()
    msgs = [{"role": "user", "content": "Describe a person as JSON."}]
    constraint = CONSTRAINTS[a.constraint]
    masked, plain = [], []
    for seed in range(a.pairs):
        n, itl = stream(a.base_url, {"model": a.model, "messages": msgs, "temperature": 1.0,
                                     "seed": seed, "max_completion_tokens": 200, **constraint})
        masked.append(itl)
        _, itl2 = stream(a.base_url, {"model": a.model, "messages": msgs, "temperature": 1.0,
                                      "seed": seed, "max_completion_tokens": n, "ignore_eos": True})
        plain.append(itl2)
        print(f"pair {seed}: {n} tokens, masked {itl:.2f} ms, unmasked {itl2:.2f} ms")
    m, p = statistics.median(masked), statistics.median(plain)
    print(f"median ITL: masked {m:.2f} ms, unmasked {p:.2f} ms, overhead {100 * (m / p - 1):+.1f} %")


if __name__ == "__main__":
    main()
