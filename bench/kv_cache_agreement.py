#!/usr/bin/env python3
"""Agreement of quantized KV caches with a reference cache (issue 23). The reference server
(`kestrel serve MODEL --kv-cache-dtype REF`) continues each prompt greedily (eos ignored); then
every cache type, the reference included, reads prompt + continuation back as one prompt with
prompt_logprobs, and the script reports per type:
  - top-1: the share of continuation positions whose most likely token is the reference's
    (teacher-forced greedy agreement: one early difference does not hide the rest),
  - dlogp: the mean |difference| of those tokens' logprobs from the reference's own reading,
  - free: the share of positions equal when the type continues the prompts on its own.

  python3 bench/kv_cache_agreement.py [--model PATH] [--reference fp32] [--tokens 64]
      [--types fp16,bf16,fp8,fp8_e5m2,mxfp8,"fp8 --calculate-kv-scales"] [--ids [--vocab N]]
      [-- more serve flags]

A type may carry more flags after a space. --ids sends each prompt as deterministic
pseudo-random token ids (the fixtures have no tokenizer).
"""
import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))
import kestrel_e2e as e2e  # noqa: E402

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "The three laws of thermodynamics state that",
    "Here is a recipe for a simple tomato soup:\n1.",
    "Q: What is the boiling point of water at sea level?\nA:",
    "In 1969, the Apollo 11 mission",
    "The most important thing to remember when learning a new language is",
    "SELECT name, COUNT(*) FROM orders",
    "Dear hiring manager,\n\nI am writing to apply for",
    "Photosynthesis is the process by which",
    "The stock market fell sharply today after",
    "A haiku about autumn:\n",
    "To install the package, run the following command:",
    "The difference between a list and a tuple in Python is",
    "Breaking news: scientists have discovered",
]


def post(server, prompt, **fields):
    status, body = e2e.post_json(server.base_url, "/v1/completions", {
        "model": server.model, "prompt": prompt, "temperature": 0, "ignore_eos": True,
        "return_tokens_as_token_ids": True, **fields})
    assert status == 200, body
    return body["choices"][0]


def continuation(server, prompt, n):
    """prompt's token ids and its n greedy continuation ids."""
    if isinstance(prompt, list):
        ids = prompt
    else:
        status, body = e2e.post_json(server.base_url, "/tokenize",
                                     {"model": server.model, "prompt": prompt})
        assert status == 200, body
        ids = body["tokens"]
    out = post(server, ids, max_tokens=n, logprobs=0)["logprobs"]["tokens"]
    return ids, [int(t.split(":")[1]) for t in out]


def read_back(server, ids, out):
    """Per continuation position: (whether out's token ranks first, its logprob)."""
    rows = post(server, ids + out, max_tokens=1, prompt_logprobs=0)["prompt_logprobs"]
    got = []
    for pos, tok in enumerate(out, start=len(ids)):
        entry = rows[pos][str(tok)]
        got.append((entry["rank"] == 1, entry["logprob"]))
    return got


def measure(model, kv_flags, extra, sequences, n):
    server = e2e.Server([*kv_flags, *extra], model_path=model)
    try:
        read = [read_back(server, ids, out) for ids, out in sequences]
        free = [continuation(server, ids, n)[1] for ids, _ in sequences]
        return read, free
    finally:
        server.terminate()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(e2e.MODEL_PATH))
    ap.add_argument("--reference", default="fp32")
    ap.add_argument("--types", default="fp16,bf16,fp8,fp8_e5m2,mxfp8,fp8 --calculate-kv-scales")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--ids", action="store_true")
    ap.add_argument("--vocab", type=int, default=0, help="with --ids: ids below this")
    ap.add_argument("extra", nargs="*", help="more serve flags (after --)")
    a = ap.parse_args()
    prompts = PROMPTS
    if a.ids:
        rng = random.Random(7)
        vocab = a.vocab or 96
        prompts = [[rng.randrange(vocab) for _ in range(8 + 3 * i)] for i in range(len(PROMPTS))]
    ref_server = e2e.Server(["--kv-cache-dtype", a.reference, *a.extra], model_path=a.model)
    try:
        sequences = [continuation(ref_server, p, a.tokens) for p in prompts]
    finally:
        ref_server.terminate()
    base, _ = measure(a.model, ["--kv-cache-dtype", a.reference], a.extra, sequences, a.tokens)
    print(f"model {a.model}: {len(prompts)} prompts x {a.tokens} greedy tokens of "
          f"--kv-cache-dtype {a.reference}")
    for t in [a.reference, *a.types.split(",")]:
        read, free = measure(a.model, ["--kv-cache-dtype", *t.split()], a.extra, sequences,
                             a.tokens)
        flat = [x for r in read for x in r]
        top1 = sum(ok for ok, _ in flat) / len(flat)
        dlogp = sum(abs(lp - b[1]) for r, br in zip(read, base) for (_, lp), b in zip(r, br))
        same = sum(x == y for f, (_, out) in zip(free, sequences) for x, y in zip(f, out))
        print(f"  {t:32s} top-1 {100 * top1:5.1f} %  dlogp {dlogp / len(flat):.4f}  "
              f"free {100 * same / len(flat):5.1f} %")


if __name__ == "__main__":
    main()
