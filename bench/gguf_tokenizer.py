#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer directory (tokenizer.json, tokenizer_config.json, chat template)
from the tokenizer built into a GGUF file, for benchmark tools that want an HF tokenizer path
(guidellm --tokenizer, evalscope --tokenizer-path, AISBench's model `path`). Used by
bench/{aisbench,evalscope,guidellm}.sh; runs in the tool's virtualenv.

    python bench/gguf_tokenizer.py MODEL.gguf OUT_DIR [--check-url http://HOST:PORT --model NAME]

Needs transformers (every one of the three tools brings it) and the `gguf` package. transformers'
own GGUF loading (`AutoTokenizer.from_pretrained(dir, gguf_file=...)`) wants torch; where torch is
missing (evalscope's venv) the file's metadata is read with `gguf.GGUFReader` and handed to the
same transformers converter. With --check-url the result is compared with the server's /tokenize
on a few strings, so a tool never counts tokens with a tokenizer that differs from Kestrel's.
"""

import argparse
import json
import os
import shutil
import sys
import urllib.request

SAMPLES = [
    "Hello world, what is 2+2?",
    "  leading spaces, tabs\tand\nnewlines; numbers 1234567 and 3.14159",
    "Ünïcödé, emoji 🚀 and 中文 text",
    "<|im_start|>user\nhi<|im_end|>",
]


def load_with_transformers(gguf_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(gguf_path)),
                                         gguf_file=os.path.basename(gguf_path))


def load_without_torch(gguf_path):
    """transformers' GGUF tokenizer conversion, fed by gguf.GGUFReader instead of its torch reader."""
    import gguf
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        _SPECIAL_TOKENS, GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer)

    fields = gguf.GGUFReader(gguf_path).fields
    meta = {k: f.contents() for k, f in fields.items()
            if k.startswith("tokenizer.") or k == "general.architecture"}
    grouped = {group: {name: meta[f"tokenizer.{key}"] for key, name in renames.items()
                       if f"tokenizer.{key}" in meta}
               for group, renames in GGUF_TOKENIZER_MAPPING.items()}
    tok, config = grouped["tokenizer"], grouped["tokenizer_config"]
    if tok.get("tokenizer_type") == "llama":
        config.setdefault("add_bos_token", True)
    for name, key in _SPECIAL_TOKENS.items():
        token_id = meta.get(f"tokenizer.ggml.{key}")
        config[name] = tok["tokens"][token_id] if token_id is not None else None
    backend, extra = convert_gguf_tokenizer(meta["general.architecture"], tok)
    config.update(extra)
    chat_template = config.pop("chat_template", None)
    out = PreTrainedTokenizerFast(tokenizer_object=backend, **config)
    if chat_template:
        out.chat_template = chat_template
    return out


def check(tokenizer, url, model):
    bad = 0
    for text in SAMPLES:
        body = json.dumps({"model": model, "prompt": text, "add_special_tokens": True}).encode()
        req = urllib.request.Request(url.rstrip("/") + "/tokenize", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            server = json.load(r)["tokens"]
        ours = tokenizer(text, add_special_tokens=True)["input_ids"]
        if ours != server:
            bad += 1
            print(f"gguf_tokenizer: MISMATCH on {text!r}:\n  hf     {ours}\n  server {server}",
                  file=sys.stderr)
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--check-url", help="a running server: compare with its /tokenize")
    ap.add_argument("--model", default="", help="served model name for --check-url")
    a = ap.parse_args()

    if os.path.isfile(os.path.join(a.out, "tokenizer.json")):
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(a.out)
    else:
        try:
            tokenizer = load_with_transformers(a.gguf)
        except ImportError:  # torch missing: transformers' GGUF reader imports it
            tokenizer = load_without_torch(a.gguf)
        tmp = a.out + ".part"
        shutil.rmtree(tmp, ignore_errors=True)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(a.out, ignore_errors=True)
        os.replace(tmp, a.out)
        print(f"gguf_tokenizer: wrote {a.out} ({len(tokenizer)} tokens)", file=sys.stderr)
    if a.check_url:
        bad = check(tokenizer, a.check_url, a.model)
        if bad:
            print(f"gguf_tokenizer: {bad}/{len(SAMPLES)} samples tokenize differently from the "
                  "server; token counts made with this tokenizer will be off", file=sys.stderr)
            return 1
        print(f"gguf_tokenizer: {a.out} matches the server's /tokenize on {len(SAMPLES)} samples",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
