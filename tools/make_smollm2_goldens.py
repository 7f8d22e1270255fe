#!/usr/bin/env python3
"""Writes greedy-decoding goldens for the default model (SmolLM2-135M-Instruct, Q4_1 GGUF).

Usage:
    python3 tools/make_smollm2_goldens.py [--model PATH]

PATH defaults to what scripts/fetch-default-model.sh prints. Needs llama-cpp-python, gguf,
transformers 5.x, torch and accelerate (for GGUF loading). Writes into tests/fixtures/smollm2/:

  llamacpp_greedy.json  {"model", "llama_cpp_python", "n_threads", "prompts":
                         [{"text", "ids", "greedy": [32 ids]}, ...]}
      ids: llama.cpp's tokenization of text (bos added as the GGUF metadata says, special
      tokens such as <|im_start|> parsed). greedy: 32 tokens, each the argmax of llama.cpp's
      last logits, fed back one at a time with the KV cache; no stop at eos.

  hf_argmax.json        {"transformers", "sequences": [{"ids", "argmax"}, ...]}
      transformers loads the same GGUF (dequantized to f32) and runs one full forward over
      ids + greedy of each prompt; argmax has one entry per position (the predicted next token).

  margins.json          {"llamacpp_greedy": [[32 gaps] per prompt],
                         "hf_argmax": [[one gap per position] per sequence]}
      the top1-top2 logit gap behind each recorded token, so that tests can tell a real
      mismatch from a near-tie (the real model has steps with gaps below 0.05).

It prints how often transformers' argmax agrees with llama.cpp's next token: the two use
different arithmetic (llama.cpp quantizes activations for its Q4_1 dot products), so a few
disagreements at near-ties are expected. The output is deterministic for fixed versions
(argmax decoding, fixed thread count).
"""

import argparse
import json
import pathlib
import subprocess
import sys

import llama_cpp
import torch
import transformers
from llamacpp_greedy import llamacpp_greedy, top2_gap

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "tests" / "fixtures" / "smollm2"
N_THREADS = 2
N_GREEDY = 32

PROMPTS = [
    "The old lighthouse keeper climbed the stairs every evening. One stormy night in November,",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n'
    "        return n\n",
    "<|im_start|>user\nWhat is the capital of France? Answer in one sentence.<|im_end|>\n"
    "<|im_start|>assistant\n",
    "In 1969, Apollo 11 landed on the Moon. The mission's commander, Neil Armstrong, said:",
]


def default_model_path():
    script = REPO / "scripts" / "fetch-default-model.sh"
    return subprocess.run(["bash", str(script)], check=True, capture_output=True,
                          text=True).stdout.strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=pathlib.Path, help="the Q4_1 GGUF")
    args = parser.parse_args()
    model_path = args.model or pathlib.Path(default_model_path())
    OUT_DIR.mkdir(parents=True, exist_ok=True)

    llm = llama_cpp.Llama(model_path=str(model_path), n_ctx=512, n_threads=N_THREADS,
                          n_threads_batch=N_THREADS, logits_all=False, seed=0, verbose=False)
    prompts, greedy_gaps = [], []
    for text in PROMPTS:
        ids, greedy, gaps = llamacpp_greedy(llm, text, N_GREEDY)
        prompts.append({"text": text, "ids": ids, "greedy": greedy})
        greedy_gaps.append(gaps)
        continuation = llm.detokenize(greedy).decode(errors="replace")
        print(f"llama.cpp: {len(ids)} prompt ids -> {continuation!r}")
    del llm
    greedy_golden = {
        "model": model_path.name,
        "llama_cpp_python": llama_cpp.__version__,
        "n_threads": N_THREADS,
        "prompts": prompts,
    }
    (OUT_DIR / "llamacpp_greedy.json").write_text(json.dumps(greedy_golden) + "\n")

    torch.set_num_threads(N_THREADS)
    transformers.logging.set_verbosity_error()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_path.parent, gguf_file=model_path.name, dtype=torch.float32)
    model.eval()
    sequences, argmax_gaps = [], []
    agree, total = 0, 0
    with torch.no_grad():
        for prompt in prompts:
            ids = prompt["ids"] + prompt["greedy"]
            logits = model(torch.tensor([ids]), use_cache=False).logits[0]
            argmax = logits.argmax(-1).tolist()
            sequences.append({"ids": ids, "argmax": argmax})
            argmax_gaps.append(top2_gap(logits.numpy()))
            start = len(prompt["ids"]) - 1
            matches = sum(a == b for a, b in zip(argmax[start:], prompt["greedy"]))
            first_miss = next((k for k, (a, b) in enumerate(zip(argmax[start:], prompt["greedy"]))
                               if a != b), None)
            print(f"transformers agrees with llama.cpp on {matches}/{N_GREEDY} next tokens "
                  f"(first disagreement at step {first_miss})")
            agree += matches
            total += N_GREEDY
    print(f"overall agreement: {agree}/{total}")
    hf_golden = {"transformers": transformers.__version__, "sequences": sequences}
    (OUT_DIR / "hf_argmax.json").write_text(json.dumps(hf_golden) + "\n")
    gaps = {"llamacpp_greedy": greedy_gaps, "hf_argmax": argmax_gaps}
    (OUT_DIR / "margins.json").write_text(json.dumps(gaps) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
