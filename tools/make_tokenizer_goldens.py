#!/usr/bin/env python3
"""Writes tests/fixtures/smollm2/tokenize_golden.json: reference token ids for the default model.

Usage:
    bash scripts/fetch-default-model.sh        # places the GGUF under ~/.cache/kestrel/models/
    python3 tools/make_tokenizer_goldens.py [--models DIR] [--out PATH]

The tokenizer is built by transformers from the GGUF itself (AutoTokenizer.from_pretrained with
gguf_file=...), so the ids come from an implementation independent of Kestrel. Ids are encoded
WITHOUT special tokens added (add_special_tokens=False); "add_bos" records whether the GGUF asks
for a BOS token (tokenizer.ggml.add_bos_token).

Pre-tokenizer caveat: this GGUF says tokenizer.ggml.pre = "smollm". llama.cpp splits such text
into single digits (\\p{N}) before the GPT-2 regex, as the original SmolLM2 tokenizer.json does
(Digits(individual_digits=True) then ByteLevel). transformers' GGUF converter does not know
"smollm" and keeps plain GPT-2 ByteLevel splitting, which differs on a numeric character after a
space (" ²" becomes "Ġ" + "Â²" with the digit split, "ĠÂ" + "²" without). We therefore install the
digit-splitting pre-tokenizer for "smollm" and record, per case, the stock converter's ids where
they differ ("stock_transformers_ids"), so the choice stays visible.

Deterministic: a fixed list of texts, no randomness.
"""

import argparse
import json
import os
import sys

from tokenizers import pre_tokenizers
from transformers import AutoTokenizer

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

TEXTS = [
    "",
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "12345 3.14",
    "Numbers: 1,000,000 and 42nd, 0.5% or -7e10.",
    "don't I'll we've she's they're I'd I'm DON'T SHE'S",
    "def foo(x):\n    return x * 2\n",
    "\tif (a) {\n\t\tb();\n\t}\n",
    "    indented with four spaces\n        and eight",
    "multiple   spaces    here",
    "  leading and trailing  ",
    "line1\n\nline2\n\n\n",
    "windows\r\nline endings\r\n",
    "Café déjà vu, naïve façade",
    "Ünïcödé ÀÉÎÕÜ",
    "日本語のテキストと中文",
    "emoji 😀👍🏽 and 🇺🇸 flags",
    "Привет, мир! Как дела?",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "안녕하세요 세계",
    "x ² y ½ and ³⁄₄",
    "∑_{i=1}^{n} i² = n(n+1)(2n+1)/6",
    "a\u00a0b and a\u200bb",
    "https://example.com/path?query=1&x=2#frag",
    '{"key": [1, 2, 3], "nested": {"a": null}}',
    "C++ is fun; Python3.11 too!!! ~@#$%^&*()_+-=[]{}|;':\",./<>?",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "repeat repeat repeat aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "Mixed:日本語English123Русский",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "<|im_end|><|im_start|> and a partial <|im_start without its end",
    "<repo_name>kestrel<file_sep>main.cc<filename>x.py",
]


# Bytes 0x04 and 0x13 have no token in this vocabulary: transformers drops them and lets their
# neighbours merge. These cannot round-trip, so they are kept apart from TEXTS.
LOSSY_TEXTS = [
    "!\x04! ctrl\x06chars\x13",
    "(\x13( x\x04",
]


def digit_splitting_pre_tokenizer():
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )


def main():
    default_models = os.environ.get("KESTREL_MODELS", os.path.expanduser("~/.cache/kestrel/models"))
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(here, "..", "tests", "fixtures", "smollm2", "tokenize_golden.json")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=default_models)
    parser.add_argument("--out", default=default_out)
    args = parser.parse_args()

    from gguf import GGUFReader

    reader = GGUFReader(os.path.join(args.models, GGUF_NAME))
    pre = reader.fields["tokenizer.ggml.pre"].contents()
    add_bos = bool(reader.fields["tokenizer.ggml.add_bos_token"].contents())

    stock = AutoTokenizer.from_pretrained(args.models, gguf_file=GGUF_NAME)
    tok = AutoTokenizer.from_pretrained(args.models, gguf_file=GGUF_NAME)
    if pre != "smollm":
        sys.exit(f"expected tokenizer.ggml.pre 'smollm', found {pre!r}: revisit the caveat above")
    tok.backend_tokenizer.pre_tokenizer = digit_splitting_pre_tokenizer()

    cases = []
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        if tok.decode(ids, skip_special_tokens=False) != text:
            sys.exit(f"transformers does not round-trip {text!r}")
        case = {"text": text, "ids": ids}
        stock_ids = stock.encode(text, add_special_tokens=False)
        if stock_ids != ids:
            case["stock_transformers_ids"] = stock_ids
        cases.append(case)

    lossy_cases = []
    for text in LOSSY_TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        if tok.decode(ids, skip_special_tokens=False) == text:
            sys.exit(f"{text!r} was expected to lose bytes")
        lossy_cases.append({"text": text, "ids": ids})

    golden = {
        "model": GGUF_NAME,
        "tokenizer_pre": pre,
        "add_bos": add_bos,
        "bos_id": tok.bos_token_id,
        "eos_id": tok.eos_token_id,
        "cases": cases,
        "lossy_cases": lossy_cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    differing = sum("stock_transformers_ids" in c for c in cases)
    print(f"wrote {len(cases)} cases to {args.out} ({differing} differ from the stock converter)")


if __name__ == "__main__":
    main()
