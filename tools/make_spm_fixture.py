#!/usr/bin/env python3
"""Writes tests/fixtures/gguf/tiny_spm.gguf: a tiny SentencePiece-style GGUF vocabulary.

Usage: python3 tools/make_spm_fixture.py [out_path]   (default: tests/fixtures/gguf/tiny_spm.gguf)

Deterministic (no randomness); needs the `gguf` package (gguf-py). Metadata only, no tensors:
tokenizer.ggml.model = "llama"; tokens 0-2 <unk> (UNKNOWN), <s>, </s> (CONTROL); 3-258 the byte
tokens <0x00>..<0xFF> (BYTE); then the normal pieces below with their scores, and "<tool>"
(USER_DEFINED). The same vocabulary is built in C++ by tests/tokenizer/spm_test.cc, whose expected
ids were derived by hand from the merge rules; fuzz/tokenizer_fuzz.cc uses this file by default.
"""

import sys
from pathlib import Path

import gguf

SPACE = "\u2581"
PIECES = [
    (SPACE, -10), ("h", -10), ("e", -10), ("l", -10), ("o", -10), ("w", -10), ("r", -10),
    ("d", -10), ("ll", -1), ("he", -2), ("hell", -3), (SPACE + "h", -4), ("llo", -5),
    (SPACE + "he", -6), ("hello", -7), (SPACE + "w", -3), ("or", -3), (SPACE + "wor", -2),
    ("a", -10), ("aa", -1),
]


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("tests/fixtures/gguf/tiny_spm.gguf")
    tokens, scores, types = [], [], []

    def add(text: str, score: float, kind: gguf.TokenType) -> None:
        tokens.append(text)
        scores.append(score)
        types.append(kind)

    add("<unk>", 0, gguf.TokenType.UNKNOWN)
    add("<s>", 0, gguf.TokenType.CONTROL)
    add("</s>", 0, gguf.TokenType.CONTROL)
    for b in range(256):
        add(f"<0x{b:02X}>", 0, gguf.TokenType.BYTE)
    for text, score in PIECES:
        add(text, score, gguf.TokenType.NORMAL)
    add("<tool>", 0, gguf.TokenType.USER_DEFINED)

    w = gguf.GGUFWriter(str(out), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
