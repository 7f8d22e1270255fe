#!/usr/bin/env python3
"""Encode throughput of Kestrel's tokenizer beside the Python `tokenizers` library (Rust).

Usage:
    python3 bench/tokenizer_throughput.py [--tokenizer DIR] [--kestrel build/src/kestrel] [--mb 1]

The corpus is ~1 MB of mixed-language text built deterministically from the texts of
../shared/testdata/goldens/tokenize.jsonl (shuffled with a fixed seed and concatenated), split
into lines of at most 4 KB. Both engines encode the same lines without special tokens:
  - tokenizers: Tokenizer.from_file(DIR/tokenizer.json).encode() line by line, one thread, so
    both sides do the same work;
  - Kestrel: `kestrel tokenize --tokenizer DIR --no-special-tokens --stats` over the lines as
    JSON; --stats times the encode calls alone (no loading, no JSON I/O), as the Python side
    times encode() alone.
Prints MB/s for each and checks that both produced the same ids.
"""

import argparse
import json
import pathlib
import random
import subprocess
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "testdata"


def corpus(mb: float) -> list[str]:
    texts = []
    with open(SHARED / "goldens" / "tokenize.jsonl", encoding="utf-8") as f:
        for line in f:
            t = json.loads(line)["text"]
            if t and t not in texts:
                texts.append(t)
    rng = random.Random(0)
    lines, size, chunk = [], 0, ""
    while size < mb * 1e6:
        rng.shuffle(texts)
        for t in texts:
            chunk += t + "\n"
            if len(chunk.encode()) > 4000:
                lines.append(chunk)
                size += len(chunk.encode())
                chunk = ""
    return lines


def run_kestrel(binary: str, tok: str, lines: list[str]) -> tuple[float, list[list[int]]]:
    payload = "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in lines)
    r = subprocess.run([binary, "tokenize", "--tokenizer", tok, "--no-special-tokens", "--stats"],
                       input=payload.encode(), capture_output=True, check=True)
    seconds = float(r.stderr.decode().split(" in ")[1].split(" s")[0])
    return seconds, [json.loads(l)["ids"] for l in r.stdout.decode().split("\n") if l]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=str(SHARED / "tokenizers" / "qwen3"))
    ap.add_argument("--kestrel", default=str(REPO / "build" / "src" / "kestrel"))
    ap.add_argument("--mb", type=float, default=1.0)
    a = ap.parse_args()
    import tokenizers

    lines = corpus(a.mb)
    nbytes = sum(len(l.encode()) for l in lines)
    tk = tokenizers.Tokenizer.from_file(str(pathlib.Path(a.tokenizer) / "tokenizer.json"))
    tk.encode("warm up", add_special_tokens=False)
    t0 = time.perf_counter()
    ref = [tk.encode(l, add_special_tokens=False).ids for l in lines]
    py_dt = time.perf_counter() - t0
    k_dt, ids = run_kestrel(a.kestrel, a.tokenizer, lines)
    same = sum(1 for x, y in zip(ids, ref) if x == y)
    print(json.dumps({
        "tokenizer": pathlib.Path(a.tokenizer).name, "bytes": nbytes, "lines": len(lines),
        "tokenizers_version": tokenizers.__version__,
        "tokenizers_mb_s": round(nbytes / py_dt / 1e6, 2),
        "kestrel_mb_s": round(nbytes / k_dt / 1e6, 2),
        "identical_lines": f"{same}/{len(lines)}"}))


if __name__ == "__main__":
    main()
