#!/usr/bin/env python3
"""msModelSlim-format fixtures (issue 23) made from the tiny float fixtures of make_fixtures.py:
quant_model_description.json + quant_model_weights.safetensors as msModelSlim's ascendv1 writer
lays them out (../shared/docs/reference/specdec-quant.md §2.1-2.2), with goldens from a float64
evaluation of the same quantized math.

  W8A8_DYNAMIC: every linear of the decoder layers (experts included, routers kept FLOAT) gets
    int8 weights with per-row symmetric scales (weight_scale [N, 1], weight_offset [N, 1] zeros);
    activations are quantized per token at run time.
  W4A8_DYNAMIC (the routed experts; the rest as W8A8_DYNAMIC): int4 weights with per-row scales
    max|w| / 7, two per byte along the output rows (row 2r in the low nibble of byte (r, c), 2r + 1
    in the high one), and scale_bias = 8 * scale * sum(w) per row ([N, 1] for gate and up, [N, 16]
    per column chunk for down), the term vLLM-Ascend hands the NPU's int4 kernel.
  W8A8: the same weights with static per-tensor asymmetric activations calibrated on the
    fixture's prompts (input_scale, input_offset), deq_scale = input_scale * weight scale and
    quant_bias = -input_offset * sum(w) (no float bias).

Compressed-tensors fixtures hold the same codes and scales in that format instead (config.json's
quantization_config, one config group: int8 channel weights with weight_scale [N, 1], and token
dynamic or tensor static activations with input_scale and input_zero_point), so they share their
msModelSlim twins' math and goldens.

The golden logits and greedy tokens come from the source fixture's transformers model in float64
with each quantized linear replaced by its integer math (torch.round rounds half to even, as
Kestrel's code rounding does). golden.json also records the float model's greedy tokens.

  python3 tools/make_modelslim_fixtures.py [--root tests/fixtures/models] [--only NAME]
"""
import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

import make_fixtures as mf

FIXTURES = {
    # name: (source fixture, quant type)
    "qwen3_w8a8_dynamic": ("qwen3_f32", "W8A8_DYNAMIC"),
    "qwen3_w8a8": ("qwen3_f32", "W8A8"),
    "qwen3_moe_w8a8_dynamic": ("qwen3_moe_f32", "W8A8_DYNAMIC"),
    # msModelSlim's w4a8 recipe: the routed experts W4A8_DYNAMIC, the other linears W8A8_DYNAMIC.
    "qwen3_moe_w4a8_dynamic": ("qwen3_moe_f32", "W4A8_DYNAMIC"),
    # The same quantizations as compressed-tensors checkpoints (llm-compressor's int8 W8A8).
    "qwen3_ct_w8a8_dynamic": ("qwen3_f32", "W8A8_DYNAMIC", "compressed-tensors"),
    "qwen3_ct_w8a8_static": ("qwen3_f32", "W8A8", "compressed-tensors"),
}

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def quantized_layer(name):
    """The decoder layers' linears (not the router `mlp.gate`, not lm_head or embeddings)."""
    return name.startswith("model.layers.") and name.endswith(".weight") and \
        name.split(".")[-2] in LINEARS


def quantize_weight(w, levels=127):
    """Per-row symmetric: scale = max|w| / levels (f32), codes = round(w / scale) (127: int8,
    7: int4)."""
    scale = (np.abs(w).max(axis=1, keepdims=True) / levels).astype(np.float32)
    scale[scale == 0] = 1.0
    codes = np.clip(np.round(w / scale), -levels - 1, levels).astype(np.int8)
    return codes, scale


def pack_int4_rows(codes):
    """Two int4 per byte along the output rows: row 2r in the low nibble, 2r + 1 in the high."""
    low = codes[0::2].astype(np.uint8) & 0xF
    high = (codes[1::2].astype(np.uint8) & 0xF) << 4
    return (low | high).view(np.int8)


def scale_bias(codes, scale, chunks):
    """8 * scale * sum(w) per row, split over `chunks` equal column chunks ([N, chunks])."""
    parts = np.array_split(codes.astype(np.float64), chunks, axis=1)
    return np.stack([8.0 * scale[:, 0] * p.sum(axis=1) for p in parts], axis=1).astype(np.float32)


class QuantLinear(torch.nn.Module):
    """A linear's quantized math in float64: dynamic (per-token a = max|x| / 127, q = round(x / a),
    y = (q @ w.T) * a * s) or static (q = clamp(round(x / s_x + o), -128, 127),
    y = deq * (q @ w.T + quant_bias))."""

    def __init__(self, codes, scale, static=None):
        super().__init__()
        self.w = torch.tensor(codes, dtype=torch.float64)
        self.s = torch.tensor(scale[:, 0], dtype=torch.float64)
        self.static = static

    def forward(self, x):
        if self.static is None:
            a = x.abs().amax(dim=-1, keepdim=True) / 127.0
            q = torch.where(a > 0, torch.round(x / a), torch.zeros_like(x))
            return (q @ self.w.T) * a * self.s
        s_x, o, deq, qb = self.static
        q = torch.clamp(torch.round(x / s_x + o), -128, 127)
        return deq * (q @ self.w.T + qb)


class QuantExperts(torch.nn.Module):
    """transformers' fused Qwen3MoeExperts with each expert's gate, up and down as QuantLinear
    (the checkpoint keeps them per expert, each with its own row scales)."""

    def __init__(self, experts, act_fn):
        super().__init__()
        self.experts = experts  # [(gate, up, down)] per expert
        self.act_fn = act_fn

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        for e, (gate, up, down) in enumerate(self.experts):
            token, slot = torch.where(top_k_index == e)
            if len(token) == 0:
                continue
            x = hidden_states[token]
            y = down(self.act_fn(gate(x)) * up(x)) * top_k_weights[token, slot, None]
            out.index_add_(0, token, y)
        return out


def calibrate(model, prompts):
    """Per linear (by module name), the min and max of its inputs over the prompts."""
    ranges, hooks = {}, []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and quantized_layer(name + ".weight"):
            def record(_, inputs, __, name=name):
                x = inputs[0]
                lo, hi = ranges.get(name, (np.inf, -np.inf))
                ranges[name] = (min(lo, x.min().item()), max(hi, x.max().item()))
            hooks.append(module.register_forward_hook(record))
    with torch.no_grad():
        for p in prompts:
            model(torch.tensor([p]))
    for h in hooks:
        h.remove()
    return ranges


def replace(model, name, module):
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent), child, module)


def compressed_tensors(saved, types, qtype, scales):
    """The msModelSlim tensors of `saved` in compressed-tensors' names (with the weights' row
    `scales`, which msModelSlim's static layout folds into deq_scale), and the config group."""
    out = {f"{prefix}.weight_scale": scale for prefix, scale in scales.items()}
    for key, value in saved.items():
        if types[key] == "FLOAT":
            out[key] = value
        elif key.endswith((".weight", ".weight_scale", ".input_scale")):
            out[key] = value
        elif key.endswith(".input_offset"):
            out[key[: -len("input_offset")] + "input_zero_point"] = value.astype(np.int32)
    dynamic = qtype == "W8A8_DYNAMIC"
    config = {
        "quant_method": "compressed-tensors", "format": "int-quantized",
        "quantization_status": "compressed", "ignore": ["lm_head"], "kv_cache_scheme": None,
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
                        "dynamic": False},
            "input_activations": {"num_bits": 8, "type": "int", "symmetric": dynamic,
                                  "strategy": "token" if dynamic else "tensor",
                                  "dynamic": dynamic}}}}
    return out, config


def make(name, root):
    source, qtype, *layout = FIXTURES[name]
    layout = layout[0] if layout else "modelslim"
    src, out = root / source, root / name
    golden = json.loads((src / "golden.json").read_text())
    tensors = load_file(str(src / "model.safetensors"))
    model = mf.load_checkpoint(str(src), torch.float64)
    ranges = calibrate(model, golden["prompts"]) if qtype == "W8A8" else {}

    saved, types, expert_modules, row_scales = {}, {}, {}, {}
    for key, value in tensors.items():
        if not quantized_layer(key):
            saved[key] = value
            types[key] = "FLOAT"
            continue
        prefix = key[: -len(".weight")]
        layer_type = qtype
        if qtype == "W4A8_DYNAMIC" and ".experts." not in prefix:
            layer_type = "W8A8_DYNAMIC"
        codes, scale = quantize_weight(value.astype(np.float32),
                                       7 if layer_type == "W4A8_DYNAMIC" else 127)
        saved[key] = codes
        row_scales[prefix] = scale
        if layer_type == "W4A8_DYNAMIC":
            saved[key] = pack_int4_rows(codes)
            saved[prefix + ".weight_scale"] = scale
            saved[prefix + ".weight_offset"] = np.zeros_like(scale)
            saved[prefix + ".scale_bias"] = scale_bias(
                codes, scale, 16 if prefix.endswith("down_proj") else 1)
            static = None
        elif layer_type == "W8A8_DYNAMIC":
            saved[prefix + ".weight_scale"] = scale
            saved[prefix + ".weight_offset"] = np.zeros_like(scale)
            static = None
        else:
            lo, hi = ranges[prefix]
            s_x = np.float32(max(hi - lo, 1e-6) / 255.0)
            o = np.float32(np.round(-128.0 - lo / s_x))
            deq = (s_x * scale[:, 0]).astype(np.float32)
            qb = (-o * codes.astype(np.int64).sum(axis=1)).astype(np.int32)
            saved[prefix + ".input_scale"] = np.array([s_x], np.float32)
            saved[prefix + ".input_offset"] = np.array([o], np.float32)
            saved[prefix + ".deq_scale"] = deq
            saved[prefix + ".quant_bias"] = qb
            static = (float(s_x), float(o), torch.tensor(deq, dtype=torch.float64),
                      torch.tensor(qb, dtype=torch.float64))
        for k in saved:
            if k.startswith(prefix + ".") and k not in types:
                types[k] = layer_type
        module = QuantLinear(codes, scale, static)
        if ".experts." in prefix:
            experts_prefix, e, proj = prefix.rsplit(".", 2)
            expert_modules.setdefault(experts_prefix, {}).setdefault(int(e), {})[proj] = module
        else:
            replace(model, prefix, module)
    for experts_prefix, per_expert in expert_modules.items():
        fused = model.get_submodule(experts_prefix)
        modules = [(per_expert[e]["gate_proj"], per_expert[e]["up_proj"],
                    per_expert[e]["down_proj"]) for e in range(len(per_expert))]
        replace(model, experts_prefix, QuantExperts(modules, fused.act_fn))

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copy(src / "generation_config.json", out / "generation_config.json")
    if layout == "compressed-tensors":
        tensors_out, quant_config = compressed_tensors(saved, types, qtype, row_scales)
        save_file(tensors_out, str(out / "model.safetensors"))
        config = json.loads((src / "config.json").read_text())
        config["quantization_config"] = quant_config
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    else:
        shutil.copy(src / "config.json", out / "config.json")
        save_file(saved, str(out / "quant_model_weights.safetensors"))
        # The writer's model_quant_type leaves W4A8_DYNAMIC out of its priority list.
        model_type = "W8A8_DYNAMIC" if qtype == "W4A8_DYNAMIC" else qtype
        description = {"version": "1.0.0", "model_quant_type": model_type, "group_size": 0,
                       **types}
        (out / "quant_model_description.json").write_text(json.dumps(description, indent=1) +
                                                          "\n")

    logits, greedy = {}, []
    with torch.no_grad():
        for i, p in enumerate(golden["prompts"]):
            logits[f"logits.{i}"] = model(torch.tensor([p])).logits[0].float().numpy()
            greedy.append(mf.greedy_generate(model, p)[0])
    save_file(logits, str(out / "golden.safetensors"))
    agree = sum(a == b for g, f in zip(greedy, golden["greedy"]) for a, b in zip(g, f))
    record = {"name": name, "dtype": "float32", "source": source, "quant_type": qtype,
              "format": layout,
              "prompts": golden["prompts"], "greedy": greedy, "float_greedy": golden["greedy"],
              "greedy_agreement_with_float": f"{agree}/{sum(len(g) for g in greedy)}",
              "torch": torch.__version__}
    (out / "golden.json").write_text(json.dumps(record) + "\n")
    print(f"{name}: greedy agrees with {source} on {record['greedy_agreement_with_float']}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent / "tests" /
                                              "fixtures" / "models"))
    parser.add_argument("--only")
    args = parser.parse_args()
    for name in FIXTURES:
        if args.only in (None, name):
            make(name, Path(args.root))


if __name__ == "__main__":
    main()
