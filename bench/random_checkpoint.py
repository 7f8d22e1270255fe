#!/usr/bin/env python3
"""A random bf16 safetensors checkpoint for a Llama-family config.json (bench/w8a8_vs_bf16.sh):
every tensor the architecture has, normal(0, 0.02) weights and unit norms, written as bf16 by
truncating f32 (numpy has no bf16). For benchmarks only: `kestrel quantize` needs real files,
where --load-format dummy makes weights in memory.

  python3 bench/random_checkpoint.py CONFIG_DIR OUT_DIR
"""
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np


def shapes(c):
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    d = c.get("head_dim", h // c["num_attention_heads"])
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    out = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        out.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                    p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                    p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                    p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h),
                    p + "mlp.down_proj.weight": (h, i)})
    return out


def main():
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    config = json.loads((src / "config.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "config.json", out / "config.json")
    rng = np.random.default_rng(0)
    tensors = shapes(config)
    header, offset = {}, 0
    for name, shape in tensors.items():
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in tensors.items():
            if len(shape) == 1:
                values = np.ones(shape, np.float32)
            else:
                values = rng.standard_normal(shape, dtype=np.float32) * 0.02
            f.write((values.view(np.uint32) >> 16).astype(np.uint16).tobytes())


if __name__ == "__main__":
    main()
