#!/usr/bin/env python3
"""A random bf16 safetensors checkpoint for a Llama-family or DeepSeek-V3 config.json
(bench/w8a8_vs_bf16.sh):
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


def mlp(p, rows, h):
    return {p + "gate_proj.weight": (rows, h), p + "up_proj.weight": (rows, h),
            p + "down_proj.weight": (h, rows)}


def deepseek_layer(c, p, layer):
    """DeepSeek-V3's MLA projections, and a dense MLP or routed plus shared experts."""
    h, nh = c["hidden_size"], c["num_attention_heads"]
    qr, r = c["q_lora_rank"], c["kv_lora_rank"]
    dn, dr, dv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    a = p + "self_attn."
    out = {a + "q_a_proj.weight": (qr, h), a + "q_a_layernorm.weight": (qr,),
           a + "q_b_proj.weight": (nh * (dn + dr), qr), a + "kv_a_proj_with_mqa.weight": (r + dr, h),
           a + "kv_a_layernorm.weight": (r,), a + "kv_b_proj.weight": (nh * (dn + dv), r),
           a + "o_proj.weight": (h, nh * dv)}
    if layer < c["first_k_dense_replace"]:
        out.update(mlp(p + "mlp.", c["intermediate_size"], h))
        return out
    e, mi = c["n_routed_experts"], c["moe_intermediate_size"]
    out.update({p + "mlp.gate.weight": (e, h), p + "mlp.gate.e_score_correction_bias": (e,)})
    for x in range(e):
        out.update(mlp(p + f"mlp.experts.{x}.", mi, h))
    out.update(mlp(p + "mlp.shared_experts.", mi * c["n_shared_experts"], h))
    return out


def shapes(c):
    h, v = c["hidden_size"], c["vocab_size"]
    out = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        out.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,)})
        if c["model_type"] == "deepseek_v3":
            out.update(deepseek_layer(c, p, layer))
            continue
        d = c.get("head_dim", h // c["num_attention_heads"])
        q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
        out.update({p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                    p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q)})
        out.update(mlp(p + "mlp.", c["intermediate_size"], h))
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
