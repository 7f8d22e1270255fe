#!/usr/bin/env python3
"""Generates Kestrel's tiny reference checkpoints and their transformers goldens.

Usage:
    python3 tools/make_fixtures.py [--only NAME] [--out DIR]

For each fixture NAME it writes tests/fixtures/models/NAME/:
  config.json, model.safetensors, generation_config.json   (save_pretrained output)
  golden.json         {"name", "dtype", "prompts": [[ids] x3], "greedy": [[16 ids] x3],
                       "transformers", "torch"}
  golden.safetensors  F32 "logits.i" = [len(prompt_i), vocab], the logits at every position of
                      one full forward of prompt i (computed in the fixture dtype, then cast).

Everything is seeded from the fixture's base name (the bf16 variant of a model has exactly the
f32 weights cast to bf16, and the same prompts), so re-running reproduces the same files for
the same library versions. Every parameter is randomized so that layout bugs in any tensor
change the logits: embeddings N(0, 1) (0.05 when tied), linear weights std 0.1 (lm_head 0.2),
biases std 0.1, norm weights 1 + 0.1 N(0, 1). The goldens come from the model reloaded from
the saved files, after checking that those files reproduce the built model (rope scaling
included). Greedy decoding uses model.generate with the KV cache, argmax only, no eos stop.
Prompts are random ids in [3, vocab), redrawn until no greedy step is a near-tie
(MIN_STEP_GAP).

The script prints, per fixture, the smallest top1-top2 logit gap over all golden positions and
over all greedy steps, to show how robust an exact argmax comparison is.
"""

import argparse
import functools
import json
import pathlib
import shutil
import sys
import tempfile
import zlib

import safetensors.torch
import torch
import transformers

VOCAB = 512
PROMPT_LENGTHS = (7, 19, 40)
NEW_TOKENS = 16
FIRST_PROMPT_ID = 3  # ids 0..2 are the configs' special tokens; prompts avoid them.

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    hidden_act="silu",
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}

# base name -> (config class, config kwargs). Fixture names are base + "_f32" / "_bf16".
MODELS = {
    "llama3": (
        transformers.LlamaConfig,
        dict(COMMON, num_hidden_layers=2, head_dim=16, rope_theta=10000.0,
             rope_scaling=LLAMA3_ROPE, tie_word_embeddings=False),
    ),
    "llama_linear": (
        transformers.LlamaConfig,
        dict(COMMON, num_hidden_layers=2, head_dim=16, rope_theta=10000.0,
             rope_scaling={"rope_type": "linear", "factor": 2.0},
             tie_word_embeddings=False),
    ),
    "llama_yarn": (
        transformers.LlamaConfig,
        dict(COMMON, num_hidden_layers=2, head_dim=16, rope_theta=10000.0,
             rope_scaling={"rope_type": "yarn", "factor": 4.0,
                           "original_max_position_embeddings": 64},
             tie_word_embeddings=False),
    ),
    "llama_tied": (
        transformers.LlamaConfig,
        dict(COMMON, num_hidden_layers=3, head_dim=16, rope_theta=10000.0,
             tie_word_embeddings=True),
    ),
    "qwen2": (
        transformers.Qwen2Config,
        dict(COMMON, num_hidden_layers=2, rope_theta=1000000.0, use_sliding_window=False,
             tie_word_embeddings=False),
    ),
    "qwen3": (
        transformers.Qwen3Config,
        dict(COMMON, num_hidden_layers=2, head_dim=32, rope_theta=1000000.0,
             attention_bias=False, use_sliding_window=False, tie_word_embeddings=False),
    ),
}

FIXTURES = {
    "llama3_f32": ("llama3", torch.float32),
    "llama3_bf16": ("llama3", torch.bfloat16),
    "llama_linear_f32": ("llama_linear", torch.float32),
    "llama_yarn_f32": ("llama_yarn", torch.float32),
    "llama_tied_f32": ("llama_tied", torch.float32),
    "qwen2_f32": ("qwen2", torch.float32),
    "qwen2_bf16": ("qwen2", torch.bfloat16),
    "qwen3_f32": ("qwen3", torch.float32),
    "qwen3_bf16": ("qwen3", torch.bfloat16),
}

# Smallest accepted top1-top2 logit gap at each greedy step (see select_prompts).
MIN_STEP_GAP = {torch.float32: 0.01, torch.bfloat16: 0.1}
MAX_PROMPT_TRIES = 1000

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}


def seed_of(text):
    return zlib.crc32(text.encode())


def randomize(model, gen, embed_std):
    """Overwrites every parameter; logits get a std of about 1.6 (0.4 for the tied model)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("embed_tokens.weight"):
                value = embed_std * noise
            elif name.endswith("norm.weight"):
                value = 1.0 + 0.1 * noise
            elif name.endswith(".bias"):
                value = 0.1 * noise
            elif name == "lm_head.weight":
                value = 0.2 * noise
            elif p.dim() == 2:
                value = 0.1 * noise
            else:
                raise ValueError(f"no randomization rule for parameter {name}")
            p.copy_(value)


def build_reference(base):
    """Builds the seeded random f32 model for a base name."""
    config_cls, kwargs = MODELS[base]
    config = config_cls(**kwargs)
    # With tied embeddings and std-1 rows, the residual stream is dominated by the input
    # token's own row and every greedy step repeats the last token; small rows let the layers
    # decide the output.
    embed_std = 0.05 if config.tie_word_embeddings else 1.0
    torch.manual_seed(seed_of(base))
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation="eager", dtype=torch.float32)
    randomize(model, torch.Generator().manual_seed(seed_of(base)), embed_std)
    return model


def top2_gap(logits):
    """Smallest top1 - top2 difference over the rows of a [rows, vocab] tensor."""
    top = torch.topk(logits.float(), 2, dim=-1).values
    return (top[..., 0] - top[..., 1]).min().item()


def greedy_generate(model, prompt):
    """Returns (16 new ids, [16, vocab] logits of each step) via generate with the KV cache."""
    # None in a GenerationConfig passed to generate() means "use the model's default", so the
    # eos stop must be removed from the model's own generation config.
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = COMMON["pad_token_id"]
    ids = torch.tensor([prompt])
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=NEW_TOKENS,
        use_cache=True,
        return_dict_in_generate=True,
        output_logits=True,
    )
    new_ids = out.sequences[0, len(prompt):].tolist()
    step_logits = torch.cat([step.float() for step in out.logits], dim=0)
    assert len(new_ids) == NEW_TOKENS, new_ids
    assert step_logits.argmax(-1).tolist() == new_ids
    return new_ids, step_logits


def load_checkpoint(path, dtype):
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="eager", dtype=dtype).eval()
    assert all(p.dtype == dtype for p in model.parameters()), path
    return model


def save_checkpoint(name, path):
    """Builds fixture NAME's model, saves it and checks that the files reproduce it."""
    base, dtype = FIXTURES[name]
    built = build_reference(base).eval()
    probe = torch.arange(FIRST_PROMPT_ID, FIRST_PROMPT_ID + 50).unsqueeze(0)
    with torch.no_grad():
        built_logits = built(probe).logits
    built.to(dtype)
    built.config.dtype = dtype
    built.save_pretrained(path, safe_serialization=True)
    config = json.loads((path / "config.json").read_text())
    for key in ("architectures", "model_type"):
        assert key in config, f"{name}: config.json lacks {key}"
    assert config.get("dtype", config.get("torch_dtype")) == DTYPE_NAMES[dtype], config

    loaded = load_checkpoint(path, dtype)
    assert loaded.config.rope_parameters == built.config.rope_parameters, name
    saved, original = loaded.state_dict(), built.state_dict()
    assert all(torch.equal(saved[k], original[k]) for k in saved), name
    if dtype == torch.float32:
        with torch.no_grad():
            assert torch.equal(loaded(probe).logits, built_logits), name


def stage_checkpoint(name, staging):
    """Returns fixture NAME's model as loaded from its saved files, as a user would load it (a
    model cast in memory differs: .to(bf16) also rounds the RoPE inv_freq buffer)."""
    path = staging / name
    if not path.exists():
        save_checkpoint(name, path)
    return load_checkpoint(path, FIXTURES[name][1])


@functools.cache  # the f32 and bf16 fixtures of a base share their prompts
def select_prompts(base, staging):
    """Draws seeded random prompts, keeping a candidate only when every greedy step of every
    dtype variant of the model has a top1-top2 gap of at least MIN_STEP_GAP[dtype].

    Near-ties would make an exact greedy comparison depend on rounding details (bf16 logits
    are themselves rounded to a 1/32 grid near |4|, so exact ties occur), not on correctness.
    """
    models = {dtype: stage_checkpoint(name, staging)
              for name, (fixture_base, dtype) in FIXTURES.items() if fixture_base == base}
    gen = torch.Generator().manual_seed(seed_of(base + "/prompts"))
    prompts = []
    for length in PROMPT_LENGTHS:
        for attempt in range(MAX_PROMPT_TRIES):
            candidate = torch.randint(FIRST_PROMPT_ID, VOCAB, (length,), generator=gen).tolist()
            if all(top2_gap(greedy_generate(model, candidate)[1]) >= MIN_STEP_GAP[dtype]
                   for dtype, model in models.items()):
                prompts.append(candidate)
                break
        else:
            raise RuntimeError(f"{base}: no prompt of length {length} with clear greedy steps")
        print(f"{base}: prompt of length {length} accepted after {attempt + 1} candidates",
              flush=True)
    return prompts


def make_fixture(name, root, staging):
    base, dtype = FIXTURES[name]
    prompts = select_prompts(base, staging)
    model = stage_checkpoint(name, staging)
    logits, greedy = {}, []
    pos_gap, step_gap, mismatches = float("inf"), float("inf"), 0
    with torch.no_grad():
        for i, prompt in enumerate(prompts):
            full = model(torch.tensor([prompt]), use_cache=False).logits[0].float()
            logits[f"logits.{i}"] = full.contiguous()
            new_ids, step_logits = greedy_generate(model, prompt)
            assert new_ids[0] == int(full[-1].argmax()), (name, i)
            greedy.append(new_ids)
            pos_gap = min(pos_gap, top2_gap(full))
            step_gap = min(step_gap, top2_gap(step_logits))
            # Information only: does a cache-free forward agree with cached decoding?
            seq = torch.tensor([prompt + new_ids[:-1]])
            nocache = model(seq, use_cache=False).logits[0, len(prompt) - 1:].argmax(-1)
            mismatches += sum(a != b for a, b in zip(nocache.tolist(), new_ids))

    out_dir = root / name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    shutil.copytree(staging / name, out_dir)
    safetensors.torch.save_file(logits, out_dir / "golden.safetensors")
    golden = {
        "name": name,
        "dtype": DTYPE_NAMES[dtype],
        "prompts": prompts,
        "greedy": greedy,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    (out_dir / "golden.json").write_text(json.dumps(golden) + "\n")
    size = sum(f.stat().st_size for f in out_dir.iterdir())
    print(f"{name}: min top1-top2 gap: positions {pos_gap:.4f}, greedy steps {step_gap:.4f}; "
          f"cache-free argmax mismatches {mismatches}/{NEW_TOKENS * len(prompts)}; "
          f"{size / 1024:.0f} KiB", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(FIXTURES), help="generate one fixture")
    parser.add_argument("--out", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent.parent
                        / "tests" / "fixtures" / "models")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # fixed reduction order, independent of the machine's core count
    transformers.logging.set_verbosity_error()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as staging:
        for name in [args.only] if args.only else FIXTURES:
            make_fixture(name, args.out, pathlib.Path(staging))
    return 0


if __name__ == "__main__":
    sys.exit(main())
