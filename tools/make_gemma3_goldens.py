#!/usr/bin/env python3
"""Writes llama.cpp's greedy goldens for Gemma3-270M (Q4_K_M GGUF).

Usage:
    python3 tools/make_gemma3_goldens.py [--model PATH]

PATH defaults to what scripts/fetch-gemma3.sh prints. Needs llama-cpp-python and numpy. Writes
tests/fixtures/gemma3_270m/llamacpp_greedy.json:

  {"model", "llama_cpp_python", "n_threads",
   "prompts": [{"text", "ids", "greedy": [32 ids], "margins": [32 gaps]}, ...]}
      ids: llama.cpp's tokenization of text (bos as the GGUF says, special tokens such as
      <start_of_turn> parsed). greedy: 32 tokens, each the argmax of llama.cpp's last logits,
      fed back one at a time with the KV cache; no stop at eos. margins: the top1-top2 logit gap
      behind each greedy token, so that a test can tell a real mismatch from a near-tie.

One prompt is longer than the model's 512-token sliding window, so the window is exercised.
The output is deterministic for fixed versions (argmax decoding, fixed thread count).
"""

import argparse
import json
import pathlib
import subprocess
import sys

import llama_cpp

from llamacpp_greedy import llamacpp_greedy

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "gemma3_270m" / "llamacpp_greedy.json"
N_THREADS = 2
N_GREEDY = 32

LONG = " ".join(f"Item {i}: the {['red', 'green', 'blue', 'amber'][i % 4]} box holds {i * 7 % 13} "
                f"marbles." for i in range(60)) + " Counting every box above, the total is"

PROMPTS = [
    "The old lighthouse keeper climbed the stairs every evening. One stormy night in November,",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n'
    "        return n\n",
    "<start_of_turn>user\nWhat is the capital of France? Answer in one sentence.<end_of_turn>\n"
    "<start_of_turn>model\n",
    "In 1969, Apollo 11 landed on the Moon. The mission's commander, Neil Armstrong, said:",
    "<start_of_turn>user\nWrite a haiku about autumn leaves.<end_of_turn>\n<start_of_turn>model\n",
    LONG,
]


def default_model_path():
    script = REPO / "scripts" / "fetch-gemma3.sh"
    return subprocess.run(["bash", str(script)], check=True, capture_output=True,
                          text=True).stdout.strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=pathlib.Path, help="the Q4_K_M GGUF")
    args = parser.parse_args()
    model_path = args.model or pathlib.Path(default_model_path())
    llm = llama_cpp.Llama(model_path=str(model_path), n_ctx=1024, n_threads=N_THREADS,
                          n_threads_batch=N_THREADS, logits_all=False, seed=0, verbose=False)
    prompts = []
    for text in PROMPTS:
        ids, greedy, gaps = llamacpp_greedy(llm, text, N_GREEDY)
        prompts.append({"text": text, "ids": ids, "greedy": greedy, "margins": gaps})
        continuation = llm.detokenize(greedy).decode(errors="replace")
        print(f"llama.cpp: {len(ids)} prompt ids -> {continuation!r}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    golden = {"model": model_path.name, "llama_cpp_python": llama_cpp.__version__,
              "n_threads": N_THREADS, "prompts": prompts}
    OUT.write_text(json.dumps(golden) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
