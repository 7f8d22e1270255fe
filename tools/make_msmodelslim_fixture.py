#!/usr/bin/env python3
"""A fixture written by msModelSlim itself (issue 23), which pins Kestrel's reader to the real
writer rather than to our reading of its format: a tiny random Qwen3 (vocab 512 through a
byte-level tokenizer made here, so the tool's calibration text tokenizes) quantized by
`msmodelslim quant --model_type Qwen3-14B --quant_type w8a8 --device cpu`, the Qwen3 best practice
the tool ships (qwen3-14b-dense-w8a8: W8A8_MIX layers carrying both the static and the per-token
scheme's tensors, anti-outlier smoothing that leaves biases on the norms and on q/k/v and
gate/up, sensitive layers rolled back to FLOAT, bf16 side tensors).

Goldens are float64 evaluations of the written tensors' math (transformers' Qwen3 blocks with each
quantized linear replaced), for both ways vLLM-Ascend runs W8A8_MIX:
  golden.safetensors         per-token dynamic (weight_scale), plus the float bias: any instance
                             but a PD decode one;
  golden_static.safetensors  static (input_scale, input_offset, deq_scale, quant_bias, which
                             holds the bias): a PD decode instance (kv_consumer).
Norms add their `.bias` after the RMSNorm.

A second fixture, qwen3_msmodelslim_w8a8c8, is the Qwen3-32B w8a8c8 best practice (iterative
smoothing, W8A8_MIX linears, and the C8 int8 KV cache: per-channel k_proj/v_proj kv_cache_scale
and kv_cache_offset, kv_cache_type C8) run with --config_path on a copy of that practice whose
calibration set is three short texts (its own takes over ten minutes on two cores), on a float32
model (its smoothing stops on bf16 weights with this transformers: "expected m1 and m2 to have
the same dtype"). Its goldens also quantize the cached K (after RoPE) and V with the written
scales (make_modelslim_fixtures.KvCache).

Needs torch, transformers, tokenizers and msmodelslim (PyPI, 26.1.0; CPU is enough):
  python3 tools/make_msmodelslim_fixture.py [--root tests/fixtures/models]
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

import make_fixtures as mf
import make_modelslim_fixtures as mm

VOCAB = 512
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PROMPTS = [[72, 101, 108, 108, 111, 44, 32, 119], [84, 104, 101, 32, 113, 117, 105, 99, 107, 32,
                                                   98, 114, 111, 119, 110],
           [300, 17, 256, 99, 5, 77, 140, 201, 33, 64, 410, 2]]


def byte_level_chars():
    """Byte-level BPE's spelling of bytes: printable Latin-1 bytes as themselves, the others as
    the code points from 256 up, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def make_tokenizer(out):
    """Byte-level BPE without merges: token i < 256 is byte i (in GPT-2's byte-to-unicode
    spelling), then the specials."""
    vocab = {c: b for b, c in byte_level_chars().items()}
    for i, s in enumerate(SPECIALS):
        vocab[s] = 256 + i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "bos_token": None, "model_max_length": 256}, indent=1) + "\n")


def make_model(out, dtype=torch.bfloat16):
    cfg = transformers.Qwen3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
        tie_word_embeddings=False, rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=258,
        pad_token_id=256, torch_dtype=str(dtype).removeprefix("torch."))
    torch.manual_seed(23)
    model = transformers.Qwen3ForCausalLM(cfg).to(dtype)
    model.save_pretrained(str(out))


class Linear(torch.nn.Module):
    """A written linear's math in float64: FLOAT (w x + b), W8A8_MIX dynamic (per-token int8
    activations against the codes, times weight_scale, plus the bias) or static (clamped codes
    with input_scale and input_offset, deq_scale · (Σ + quant_bias))."""

    def __init__(self, t, prefix, kind):
        super().__init__()
        f = lambda n: t[prefix + n].double()
        self.kind = kind
        self.w = f(".weight")
        self.bias = f(".bias") if prefix + ".bias" in t else None
        if kind == "dynamic":
            self.s = f(".weight_scale")[:, 0]
        elif kind == "static":
            self.s_x, self.o = float(f(".input_scale")[0]), float(f(".input_offset")[0])
            self.deq, self.qb = f(".deq_scale"), f(".quant_bias")

    def forward(self, x):
        if self.kind == "float":
            y = x @ self.w.T
        elif self.kind == "dynamic":
            a = x.abs().amax(dim=-1, keepdim=True) / 127.0
            q = torch.where(a > 0, torch.round(x / a), torch.zeros_like(x))
            y = (q @ self.w.T) * a * self.s
        else:
            q = torch.clamp(torch.round(x / self.s_x + self.o), -128, 127)
            return self.deq * (q @ self.w.T + self.qb)  # quant_bias holds the bias
        return y if self.bias is None else y + self.bias


def c8_cache(t, layers):
    """The written C8 scales as make_modelslim_fixtures.KvCache applies them to each layer's
    cached K and V ([kv_heads, 1, head_dim] per channel)."""
    cache = mm.KvCache()
    cache.kind = "C8"
    for layer in range(layers):
        for which in ("k", "v"):
            p = f"model.layers.{layer}.self_attn.{which}_proj.kv_cache_"
            shape = (2, 1, 32)
            cache.scales[(layer, which)] = (t[p + "scale"].double().reshape(shape),
                                            t[p + "offset"].double().reshape(shape))
    return cache


def reference(ckpt, kind):
    """transformers' Qwen3 in float64 with the written tensors: linears as Linear(kind), norms
    plus their bias, and a C8 KV cache where the description has one."""
    t = {}
    for f in sorted(ckpt.glob("quant_model_weight*.safetensors")):
        t.update(load_file(str(f)))
    types = json.loads((ckpt / "quant_model_description.json").read_text())
    cfg = transformers.AutoConfig.from_pretrained(str(ckpt))
    model = transformers.Qwen3ForCausalLM(cfg).to(torch.float64).eval()
    model.config._attn_implementation = "eager"
    state = {k: v.double() for k, v in t.items()
             if k.endswith(".weight") and types.get(k) == "FLOAT"}
    missing = model.load_state_dict(state, strict=False).missing_keys
    for name, module in list(model.named_modules()):
        if isinstance(module, torch.nn.Linear) and name + ".weight" in t:
            quantized = types[name + ".weight"] != "FLOAT"
            mm.replace(model, name, Linear(t, name, kind if quantized else "float"))
            missing = [k for k in missing if not k.startswith(name + ".")]
        if name + ".bias" in t and "norm" in name.split(".")[-1]:
            bias = t[name + ".bias"].double()
            module.register_forward_hook(lambda _, __, out, b=bias: out + b)
    assert not missing, missing
    if types.get("kv_cache_type") == "C8":
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, eager_mask
        AttentionInterface.register("kestrel_c8", c8_cache(t, cfg.num_hidden_layers))
        AttentionMaskInterface.register("kestrel_c8", eager_mask)
        model.set_attn_implementation("kestrel_c8")
    return model


def quantize(out, quant):
    """Runs msModelSlim on a new tiny model into `out`; `quant` "w8a8" or "w8a8c8"."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src, written = tmp / "float", tmp / "written"
        src.mkdir()
        make_model(src, torch.bfloat16 if quant == "w8a8" else torch.float32)
        make_tokenizer(src)
        tool = shutil.which("msmodelslim") or sys.exit("msmodelslim is not installed")
        if quant == "w8a8":
            how = ["--model_type", "Qwen3-14B", "--quant_type", "w8a8"]
        else:
            import msmodelslim
            practice = (Path(msmodelslim.__file__).parent / "lab_practice" / "qwen3" /
                        "qwen3-32b-dense-w8a8c8.yaml").read_text()
            (tmp / "calib.json").write_text(json.dumps([
                "The quick brown fox jumps over the lazy dog. " * 4,
                "def add(a, b):\n    return a + b\n" * 3,
                "Hello, world! How are you today? " * 4]))
            config = practice.replace('dataset: "qwen3_cot.json"',
                                      f'dataset: "{tmp / "calib.json"}"')
            assert config != practice
            (tmp / "practice.yaml").write_text(config)
            how = ["--model_type", "Qwen3-32B", "--config_path", str(tmp / "practice.yaml")]
        subprocess.run([tool, "quant", "--model_path", str(src), "--save_path", str(written),
                        "--device", "cpu", *how], check=True)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for f in written.iterdir():
            if f.suffix in (".json", ".safetensors"):
                shutil.copy(f, out / f.name)
                (out / f.name).chmod(0o644)
        return " ".join(["msmodelslim 26.1.0 quant", *how[:2], *(how[2:] if quant == "w8a8" else
                         ["--config_path", "qwen3-32b-dense-w8a8c8.yaml with a 3-text dataset"]),
                         "--device cpu"])


def make(out, quant):
    source = quantize(out, quant)
    # Kestrel runs the goldens with f32 activations (the weights are exact in f32), against
    # the float64 reference; quant_type marks them quantized goldens (their tolerance).
    golden = {"name": out.name, "dtype": "float32", "quant_type": "W8A8_MIX", "source": source,
              "prompts": PROMPTS, "torch": torch.__version__}
    if quant == "w8a8c8":
        golden["kv_cache"], golden["kv_cache_dtype"] = "C8", "auto"
    for kind, file in (("dynamic", "golden.safetensors"), ("static", "golden_static.safetensors")):
        model = reference(out, kind)
        logits, greedy = {}, []
        with torch.no_grad():
            for i, p in enumerate(PROMPTS):
                logits[f"logits.{i}"] = model(torch.tensor([p])).logits[0].float().contiguous()
                greedy.append(mf.greedy_generate(model, p)[0])
        save_file(logits, str(out / file))
        golden["greedy" if kind == "dynamic" else "greedy_static"] = greedy
    (out / "golden.json").write_text(json.dumps(golden) + "\n")
    types = json.loads((out / "quant_model_description.json").read_text())
    print(f"{out}: {sorted({v for v in types.values() if isinstance(v, str)})}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent / "tests" /
                                          "fixtures" / "models"))
    ap.add_argument("--only", choices=["w8a8", "w8a8c8"])
    a = ap.parse_args()
    for quant in ("w8a8", "w8a8c8"):
        if a.only in (None, quant):
            make(Path(a.root) / f"qwen3_msmodelslim_{quant}", quant)


if __name__ == "__main__":
    main()
