#!/usr/bin/env python3
"""Times llama.cpp (via llama-cpp-python) on a GGUF, as the reference for Kestrel's CPU numbers.

Usage:
    python3 bench/llamacpp_reference.py [--model PATH] [--threads 2]

PATH defaults to what scripts/fetch-default-model.sh prints.
  pp128: one batch of 128 seeded random token ids evaluated from an empty cache;
         tok/s = 128 / time, median of 5 runs after one warm-up run.
  tg128: 128 seeded random tokens evaluated one at a time from an empty cache (decode cost
         only, no sampling); tok/s = 128 / time, median of 3 runs after one warm-up run.
Prints the command (stderr) and one JSON line (stdout)
  {"model", "threads", "pp128_tok_s", "tg128_tok_s"}.
"""

import argparse
import json
import pathlib
import shlex
import statistics
import subprocess
import sys
import time

import llama_cpp
import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
N_TOKENS = 128
PP_RUNS = 5
TG_RUNS = 3


def default_model_path():
    script = REPO / "scripts" / "fetch-default-model.sh"
    return subprocess.run(["bash", str(script)], check=True, capture_output=True,
                          text=True).stdout.strip()


def time_prompt(llm, tokens):
    llm.reset()  # the next eval drops every cached position
    start = time.perf_counter()
    llm.eval(tokens)
    return time.perf_counter() - start


def time_decode(llm, tokens):
    llm.reset()
    start = time.perf_counter()
    for token in tokens:
        llm.eval([token])
    return time.perf_counter() - start


def median_tok_s(timer, llm, tokens, runs):
    timer(llm, tokens)  # warm-up
    return round(len(tokens) / statistics.median(timer(llm, tokens) for _ in range(runs)), 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=pathlib.Path)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    model_path = args.model or pathlib.Path(default_model_path())
    print(f"command: {shlex.join([sys.executable] + sys.argv)} "
          f"(llama-cpp-python {llama_cpp.__version__})", file=sys.stderr)

    llm = llama_cpp.Llama(model_path=str(model_path), n_ctx=2 * N_TOKENS + 16,
                          n_batch=N_TOKENS, n_ubatch=N_TOKENS, n_threads=args.threads,
                          n_threads_batch=args.threads, logits_all=False, seed=0,
                          verbose=False)
    rng = np.random.default_rng(0)
    # Skip the lowest ids, which are control tokens in most vocabularies.
    tokens = rng.integers(100, llm.n_vocab(), size=N_TOKENS).tolist()
    result = {
        "model": model_path.name,
        "threads": args.threads,
        "pp128_tok_s": median_tok_s(time_prompt, llm, tokens, PP_RUNS),
        "tg128_tok_s": median_tok_s(time_decode, llm, tokens, TG_RUNS),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
