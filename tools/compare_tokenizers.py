#!/usr/bin/env python3
"""Kestrel's tokenizers against the Python `tokenizers` library on a large generated corpus.

Usage:
    python3 tools/compare_tokenizers.py [--lines 3000] [--seed 0] [--kestrel build/src/kestrel]

For each tokenizer in ../shared/testdata/tokenizers/ the same seeded corpus is encoded by
`kestrel tokenize` and by tokenizers.Tokenizer.from_file(tokenizer.json), without special tokens
(with them too where tokenizer_config.json does not override the post-processor's BOS rule), and
ids and decoded text are compared. Lines mix: words of many scripts, random code points from
assorted Unicode blocks (incl. combining marks, emoji, controls, private use), whitespace runs
(\\t \\n \\r, U+0085, U+00A0, U+3000, U+FEFF), digits, punctuation, and special-token strings
whole and cut. Mismatches are printed (first few per tokenizer) with a count; exit code 1 if any.
"""

import argparse
import json
import pathlib
import random
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "testdata"

BLOCKS = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
          (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF),
          (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x1F300, 0x1FAFF),
          (0x2000, 0x206F), (0xE000, 0xE0FF), (0x0, 0x1F), (0xFF00, 0xFFEF)]
SPACES = [" ", "  ", "\t", "\n", "\n\n", "\r\n", "\u0085", "\u00a0", "\u3000", "\ufeff", " \n "]


def corpus(n: int, seed: int, words: list[str], specials: list[str]) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 25)):
            r = rng.random()
            if r < 0.45:
                parts.append(rng.choice(words))
            elif r < 0.7:
                lo, hi = rng.choice(BLOCKS)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 6))))
            elif r < 0.85:
                parts.append(rng.choice(SPACES))
            elif r < 0.93:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
            else:
                s = rng.choice(specials)
                parts.append(s if rng.random() < 0.7 else s[: rng.randint(1, max(1, len(s) - 1))])
        text = "".join(parts)
        # Lone surrogates cannot be encoded as UTF-8; replace them.
        out.append(text.encode("utf-8", "replace").decode("utf-8"))
    return out


def kestrel(binary: str, tok: pathlib.Path, lines: list[str], special: bool) -> list[dict]:
    args = [binary, "tokenize", "--tokenizer", str(tok)] + ([] if special else ["--no-special-tokens"])
    payload = "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in lines)
    out = subprocess.run(args, input=payload.encode(), capture_output=True, check=True).stdout
    return [json.loads(l) for l in out.decode().split("\n") if l]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kestrel", default=str(REPO / "build" / "src" / "kestrel"))
    a = ap.parse_args()
    import tokenizers

    words = []
    with open(SHARED / "goldens" / "tokenize.jsonl", encoding="utf-8") as f:
        for line in f:
            words += json.loads(line)["text"].split(" ")
    words = sorted(set(w for w in words if w))
    bad_total = 0
    for tok in sorted((SHARED / "tokenizers").iterdir()):
        ref = tokenizers.Tokenizer.from_file(str(tok / "tokenizer.json"))
        specials = [t.content for t in ref.get_added_tokens_decoder().values()][:200]
        lines = corpus(a.lines, a.seed, words, specials)
        cfg = json.loads((tok / "tokenizer_config.json").read_text())
        modes = [False] + ([True] if "add_bos_token" not in cfg and "add_eos_token" not in cfg else [])
        for special in modes:
            got = kestrel(a.kestrel, tok, lines, special)
            bad = 0
            for text, g in zip(lines, got):
                enc = ref.encode(text, add_special_tokens=special)
                dec = ref.decode(enc.ids, skip_special_tokens=False)
                if g.get("ids") != enc.ids or g.get("decoded") != dec:
                    bad += 1
                    if bad <= 3:
                        print(f"  {tok.name} special={special} MISMATCH {text!r}\n"
                              f"    kestrel {g}\n    tokenizers {enc.ids} {dec!r}")
            print(f"{tok.name} add_special_tokens={special}: {len(lines) - bad}/{len(lines)} identical "
                  f"(tokenizers {tokenizers.__version__})")
            bad_total += bad
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
