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

Needs torch, transformers, tokenizers and msmodelslim (PyPI, 26.1.0; CPU is enough):
  python3 tools/make_msmodelslim_fixture.py [--out tests/fixtures/models/qwen3_msmodelslim_w8a8]
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


def make_model(out):
    cfg = transformers.Qwen3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
        tie_word_embeddings=False, rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=258,
        pad_token_id=256, torch_dtype="bfloat16")
    torch.manual_seed(23)
    model = transformers.Qwen3ForCausalLM(cfg).to(torch.bfloat16)
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


def reference(ckpt, kind):
    """transformers' Qwen3 in float64 with the written tensors: linears as Linear(kind), norms
    plus their bias."""
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
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests" /
                                         "fixtures" / "models" / "qwen3_msmodelslim_w8a8"))
    a = ap.parse_args()
    out = Path(a.out)
    with tempfile.TemporaryDirectory() as tmp:
        src, written = Path(tmp) / "float", Path(tmp) / "w8a8"
        src.mkdir()
        make_model(src)
        make_tokenizer(src)
        subprocess.run([shutil.which("msmodelslim") or sys.exit("msmodelslim is not installed"),
                        "quant", "--model_type", "Qwen3-14B", "--model_path", str(src),
                        "--save_path", str(written), "--device", "cpu", "--quant_type", "w8a8"],
                       check=True)
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for f in written.iterdir():
            if f.suffix in (".json", ".safetensors") or f.name.endswith(".index.json"):
                shutil.copy(f, out / f.name)
    # Kestrel runs the goldens with f32 activations (the bf16 weights are exact in f32), against
    # the float64 reference; quant_type marks them quantized goldens (their tolerance).
    golden = {"name": out.name, "dtype": "float32", "quant_type": "W8A8_MIX",
              "source": "msmodelslim 26.1.0 quant "
              "--model_type Qwen3-14B --quant_type w8a8 --device cpu", "prompts": PROMPTS,
              "torch": torch.__version__}
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
    print(f"{out}: {sorted(set(json.loads((out / 'quant_model_description.json').read_text()).values()) - {'1.0.0'})}")


if __name__ == "__main__":
    main()
