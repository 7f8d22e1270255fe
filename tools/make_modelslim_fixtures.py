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

Fixtures with a quantized KV cache add its scales and quantize the cached K (after RoPE) and V
in the goldens' attention, as Kestrel's cache stores and reads them (specdec-quant.md §2.7,
§2.8, §3):
  C8 (msModelSlim's w8a8c8): kv_cache_type "C8"; self_attn.{k,v}_proj.kv_cache_scale and
    .kv_cache_offset [total_kv_heads * head_dim] f32, typed "C8", calibrated per channel on the
    prompts as msModelSlim's asymmetric min-max (scale = (max - min) / 255, offset =
    round(-128 - min / scale)); cached q = clamp(round(x / scale + offset), -128, 127).
  MXFP8 (kv_cache_type K_DYNAMIC_V_STATIC_MXFP8_PER_CHANNEL, served with --kv-cache-dtype
    mxfp8): K rows as E4M3 codes under one E8M0 scale per 32 values (floor(log2 amax) - 8);
    V as E4M3 under static per-channel E8M0 bytes in self_attn.v_proj.kv_cache_scale
    ([channels, 1] uint8, the same rule over the prompts; channel 0 of layer 0 stored as 0,
    which reads as 127 = 1.0) with zero kv_cache_offset.
  FP8 (compressed-tensors kv_cache_scheme, float 8-bit attn_head; served with --kv-cache-dtype
    fp8): self_attn.k_scale and v_scale [num_kv_heads] = max|x| / 448 per head over the prompts;
    cached x = e4m3(x / scale) * scale, saturating.

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
    # The same weights with a quantized KV cache.
    "qwen3_w8a8c8": ("qwen3_f32", "W8A8_DYNAMIC", "modelslim", "C8"),
    "qwen3_w8a8_mxfp8kv": ("qwen3_f32", "W8A8_DYNAMIC", "modelslim", "MXFP8"),
    "qwen3_ct_w8a8_fp8kv": ("qwen3_f32", "W8A8_DYNAMIC", "compressed-tensors", "FP8"),
    # DeepSeek-V3's W8A8_DYNAMIC (the guides' w8a8 checkpoints): MLA's projections, the dense
    # MLP and every expert int8; routers and the MTP layer FLOAT.
    "deepseek_v3_w8a8_dynamic": ("deepseek_v3_f32", "W8A8_DYNAMIC"),
}

MXFP8_MARKER = "K_DYNAMIC_V_STATIC_MXFP8_PER_CHANNEL"
E4M3_MAX = 448.0

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
           # DeepSeek's MLA
           "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")


def quantized_layer(name, num_layers=None):
    """The decoder layers' linears (not the router `mlp.gate`, not lm_head or embeddings, not an
    MTP layer past num_layers: the published -mtp checkpoints keep it FLOAT)."""
    if not (name.startswith("model.layers.") and name.endswith(".weight") and
            name.split(".")[-2] in LINEARS):
        return False
    return num_layers is None or int(name.split(".")[2]) < num_layers


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


def e4m3(x):
    """x rounded to the nearest E4M3 value (ties to even), saturating at +-448."""
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float32).to(torch.float8_e4m3fn).to(x.dtype)


def e8m0_exponent(amax):
    """The OCP MX shared exponent of E4M3 elements: floor(log2 amax) - 8, in [-127, 127]
    (an all-zero group takes f32's smallest normal as its max)."""
    m = torch.clamp(amax, min=2.0 ** -126)
    return torch.clamp(torch.floor(torch.log2(m)) - 8, -127, 127)


class KvCache:
    """The cached K and V of each attention layer as the fixture's KV cache stores them: `kind`
    None (recording per-channel ranges for calibration), "C8", "MXFP8" or "FP8". Tensors are
    [batch, kv_heads, tokens, head_dim]; scales are per layer, [kv_heads, 1, head_dim] (per
    channel) or [kv_heads, 1, 1] (per head)."""

    def __init__(self):
        self.kind, self.ranges, self.scales = None, {}, {}

    def __call__(self, module, query, key, value, *args, **kwargs):
        layer = module.layer_idx
        if self.kind is None:
            for which, x in (("k", key), ("v", value)):
                lo, hi = x.amin(dim=(0, 2)), x.amax(dim=(0, 2))  # [kv_heads, head_dim]
                old = self.ranges.get((layer, which))
                self.ranges[(layer, which)] = (lo, hi) if old is None else (
                    torch.minimum(old[0], lo), torch.maximum(old[1], hi))
        else:
            key, value = self.quantize(layer, "k", key), self.quantize(layer, "v", value)
        return eager_attention(module, query, key, value, *args, **kwargs)

    def quantize(self, layer, which, x):
        s = self.scales.get((layer, which))
        if self.kind == "C8":
            scale, offset = s
            q = torch.clamp(torch.round(x / scale + offset), -128, 127)
            return (q - offset) * scale
        if self.kind == "MXFP8" and which == "k":
            groups = x.unflatten(-1, (-1, 32))
            step = torch.exp2(e8m0_exponent(groups.abs().amax(dim=-1, keepdim=True)))
            return (e4m3(groups / step) * step).flatten(-2)
        return e4m3(x / s) * s

    def calibrate(self, kind):
        """Sets the scales from the recorded ranges; returns the checkpoint tensors."""
        self.kind, out = kind, {}
        for (layer, which), (lo, hi) in sorted(self.ranges.items()):
            p = f"model.layers.{layer}.self_attn."
            if kind == "C8":
                scale = torch.clamp((hi - lo) / 255.0, min=1e-6).float()
                offset = torch.round(-128.0 - lo / scale).float()
                self.scales[(layer, which)] = (scale[:, None, :].double(),
                                               offset[:, None, :].double())
                out[p + f"{which}_proj.kv_cache_scale"] = scale.flatten().numpy()
                out[p + f"{which}_proj.kv_cache_offset"] = offset.flatten().numpy()
            elif kind == "MXFP8":
                if which == "k":
                    continue  # K's scales are each row's own
                e = e8m0_exponent(torch.maximum(hi.abs(), lo.abs()))
                stored = (e + 127).to(torch.uint8)
                if layer == 0:
                    stored[0, 0] = 0  # a stored 0 reads as 127
                read = torch.where(stored == 0, torch.tensor(127, dtype=torch.uint8), stored)
                self.scales[(layer, which)] = torch.exp2(read.double() - 127)[:, None, :]
                out[p + "v_proj.kv_cache_scale"] = stored.flatten()[:, None].numpy()
                out[p + "v_proj.kv_cache_offset"] = np.zeros(stored.numel(), np.float32)
            else:
                amax = torch.maximum(hi.abs(), lo.abs()).amax(dim=-1)  # per KV head
                scale = (amax / E4M3_MAX).float()
                self.scales[(layer, which)] = scale[:, None, None].double()
                out[p + f"{which}_scale"] = scale.numpy()
        return out


def eager_attention(*args, **kwargs):
    from transformers.models.qwen3 import modeling_qwen3
    return modeling_qwen3.eager_attention_forward(*args, **kwargs)


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
    source, qtype, *rest = FIXTURES[name]
    layout = rest[0] if rest else "modelslim"
    kv_kind = rest[1] if len(rest) > 1 else None
    src, out = root / source, root / name
    golden = json.loads((src / "golden.json").read_text())
    tensors = load_file(str(src / "model.safetensors"))
    model = mf.load_checkpoint(str(src), torch.float64)
    ranges = calibrate(model, golden["prompts"]) if qtype == "W8A8" else {}

    num_layers = model.config.num_hidden_layers
    saved, types, expert_modules, row_scales = {}, {}, {}, {}
    for key, value in tensors.items():
        if not quantized_layer(key, num_layers):
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
        if prefix.endswith("kv_b_proj"):
            # MLA absorbs kv_b into the query and the attention output, so engines (vLLM-Ascend
            # and Kestrel alike) dequantize it to float: its input is never quantized.
            module = torch.nn.Linear(value.shape[1], value.shape[0], bias=False,
                                     dtype=torch.float64)
            module.weight.data = torch.tensor(codes, dtype=torch.float64) * \
                torch.tensor(scale, dtype=torch.float64)
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

    kv_tensors, kv_cache = {}, None
    if kv_kind:
        # Recorded on the quantized-weight model's own K and V, the values the cache will hold.
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, eager_mask
        kv_cache = KvCache()
        AttentionInterface.register("kestrel_kv_cache", kv_cache)
        AttentionMaskInterface.register("kestrel_kv_cache", eager_mask)  # eager's float mask
        model.set_attn_implementation("kestrel_kv_cache")
        with torch.no_grad():
            for p in golden["prompts"]:
                model(torch.tensor([p]))
        kv_tensors = kv_cache.calibrate(kv_kind)

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copy(src / "generation_config.json", out / "generation_config.json")
    if layout == "compressed-tensors":
        tensors_out, quant_config = compressed_tensors(saved, types, qtype, row_scales)
        if kv_kind == "FP8":
            quant_config["kv_cache_scheme"] = {"num_bits": 8, "type": "float",
                                               "strategy": "attn_head", "dynamic": False,
                                               "symmetric": True}
        save_file({**tensors_out, **kv_tensors}, str(out / "model.safetensors"))
        config = json.loads((src / "config.json").read_text())
        config["quantization_config"] = quant_config
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    else:
        shutil.copy(src / "config.json", out / "config.json")
        save_file({**saved, **kv_tensors}, str(out / "quant_model_weights.safetensors"))
        # The writer's model_quant_type leaves W4A8_DYNAMIC out of its priority list.
        model_type = "W8A8_DYNAMIC" if qtype == "W4A8_DYNAMIC" else qtype
        description = {"version": "1.0.0", "model_quant_type": model_type, "group_size": 0,
                       **types}
        if kv_kind:
            marker = "C8" if kv_kind == "C8" else MXFP8_MARKER
            description["kv_cache_type"] = marker
            description.update({k: marker for k in kv_tensors})
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
    if kv_kind:  # the --kv-cache-dtype that serves the fixture's cache
        record["kv_cache"] = kv_kind
        record["kv_cache_dtype"] = {"C8": "auto", "MXFP8": "mxfp8", "FP8": "fp8"}[kv_kind]
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
