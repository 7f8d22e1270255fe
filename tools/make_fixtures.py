#!/usr/bin/env python3
"""Generates Kestrel's tiny reference checkpoints and their transformers goldens.

Usage:
    python3 tools/make_fixtures.py [--only NAME]... [--out DIR]

For each fixture NAME it writes tests/fixtures/models/NAME/:
  config.json, model.safetensors, generation_config.json   (save_pretrained output)
  golden.json         {"name", "dtype", "prompts": [[ids] x3], "greedy": [[16 ids] x3],
                       "transformers", "torch"}  (+ "weight_format": "fp8_block128" for FP8)
  golden.safetensors  F32 "logits.i" = [len(prompt_i), vocab], the logits at every position of
                      one full forward of prompt i (computed in the fixture dtype, then cast);
                      DeepSeek-V3, Qwen3-Next and Qwen3.5 fixtures add F32 "mtp_logits.i" =
                      [len(prompt_i) - 1, vocab], the multi-token-prediction layer's logits
                      (see mtp_logits).

Everything is seeded from the fixture's base name (the bf16 variant of a model has exactly the
f32 weights cast to bf16, and the same prompts), so re-running reproduces the same files for
the same library versions. Every parameter is randomized so that layout bugs in any tensor
change the logits: embeddings N(0, 1) (0.05 when tied), linear and expert weights std 0.1
(lm_head 0.2), biases std 0.1, norm weights 1 + 0.1 N(0, 1), DeepSeek's router score bias
0.05 |N(0, 1)|. The goldens come from the model reloaded from the saved files, after checking
that those files reproduce the built model (rope scaling included). Greedy decoding uses
model.generate with the KV cache, argmax only, no eos stop. Prompts are random ids in
[3, vocab), redrawn until no greedy step is a near-tie (MIN_STEP_GAP).

MoE checkpoints are stored per expert (transformers' default on-disk format; it fuses experts
only in memory). DeepSeek-V3 checkpoints also hold the MTP layer at index num_hidden_layers,
which transformers neither creates nor loads: the script generates it and builds its
reference from transformers' blocks; the same for the Qwen3-Next and Qwen3.5 fixtures' MTP
layer, stored under mtp. (a full-attention decoder layer; transformers ignores those keys). The FP8 fixture stores DeepSeek's 128x128 block-scaled
float8_e4m3fn weights; its goldens run transformers in f32 on the dequantized weights.

Sliding-window fixtures: Mistral (window 5 in every layer) and Qwen2 with use_sliding_window
(window 6, max_window_layers 1: layer 0 full, layers 1-2 sliding); see sliding_window_check.py.

The script prints, per fixture, the smallest top1-top2 logit gap over all golden positions and
over all greedy steps, to show how robust an exact argmax comparison is, and for MoE models
the smallest margin of a routing decision.
"""

import argparse
import copy
import functools
import json
import math
import pathlib
import re
import shutil
import sys
import tempfile
import typing
import zlib

import sliding_window_check

import safetensors.torch
import torch
import transformers
from transformers.masking_utils import create_causal_mask
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as deepseek_v3
from transformers.models.deepseek_v32 import modeling_deepseek_v32 as deepseek_v32
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as deepseek_v4
from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen3_5
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as qwen3_5_moe
from transformers.models.qwen3_moe import modeling_qwen3_moe as qwen3_moe
from transformers.models.qwen3_next import modeling_qwen3_next as qwen3_next

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

# DeepSeek-V3's yarn settings scaled down: mscale_all_dim scales the softmax by mscale^2.
DEEPSEEK_YARN_ROPE = {
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 64,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}

QWEN3_MOE = dict(
    COMMON, num_hidden_layers=3, head_dim=16, rope_theta=10000.0, attention_bias=False,
    use_sliding_window=False, tie_word_embeddings=False, num_experts=8, num_experts_per_tok=2,
    moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0],
)

# Layer 0 dense, layer 1 MoE, MTP layer 2 (MoE); 2 groups of 4 experts, one group kept.
DEEPSEEK_V3 = dict(
    COMMON, num_key_value_heads=4, num_hidden_layers=2, rms_norm_eps=1e-6,
    q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
    moe_intermediate_size=32, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
    n_group=2, topk_group=1, routed_scaling_factor=2.5, norm_topk_prob=True,
    first_k_dense_replace=1, num_nextn_predict_layers=1, rope_theta=10000.0,
    rope_scaling=None, rope_interleave=True, attention_bias=False, tie_word_embeddings=False,
)

# Wide enough that FP8's 128x128 blocks tile most matrices 2-3 times per axis, with partial
# edge blocks on both axes (e.g. q_a_proj [160, 192], mlp.down_proj [192, 320]).
DEEPSEEK_V3_WIDE = dict(
    DEEPSEEK_V3, hidden_size=192, intermediate_size=320, moe_intermediate_size=160,
    q_lora_rank=160, kv_lora_rank=144, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
)

# DeepSeek-V3.2: V3's shape with the lightning indexer on every layer. index_topk 8 is below the
# two longer prompts and every decode step, and 16 indexer heads keep exact zero-score ties
# away (see IndexerMonitor); YaRN as in V3, since the indexer's RoPE shares its table.
DEEPSEEK_V32 = dict(
    {k: v for k, v in DEEPSEEK_V3.items() if k not in ("rope_interleave", "rope_scaling")},
    rope_parameters=dict(DEEPSEEK_YARN_ROPE, rope_theta=10000.0), index_n_heads=16,
    index_head_dim=32, index_topk=8,
)

# DeepSeek-V4 with sliding-window layers only (compressed layers come later): a window of 6 that
# the longer prompts cross, mHC over 4 streams, a hash-routed first layer, sqrtsoftplus routing,
# clamps low enough (0.5) that random weights hit them, sinks and the grouped output projection.
DEEPSEEK_V4_WINDOW = dict(
    COMMON, num_key_value_heads=1, num_hidden_layers=3, head_dim=32, partial_rotary_factor=0.25,
    q_lora_rank=32, o_groups=2, o_lora_rank=16, n_routed_experts=8, num_experts_per_tok=2,
    n_shared_experts=1, moe_intermediate_size=32, scoring_func="sqrtsoftplus",
    norm_topk_prob=True, routed_scaling_factor=1.5, sliding_window=6,
    layer_types=["sliding_attention"] * 3, mlp_layer_types=["hash_moe", "moe", "moe"],
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, swiglu_limit=0.5, rms_norm_eps=1e-6,
    rope_theta=10000.0, num_nextn_predict_layers=0, tie_word_embeddings=False,
)

# Hybrid models (models.md 5): layers [linear, full, linear, full] (full_attention_interval 2),
# Gated DeltaNet with 2 key heads of 4 value heads (q/k repeated), conv kernel 4, gated full
# attention over head_dim 32 with a rotary width of 8.
HYBRID = dict(
    COMMON, num_hidden_layers=4, full_attention_interval=2, head_dim=32,
    linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
    linear_num_key_heads=2, linear_num_value_heads=4, rms_norm_eps=1e-6,
    tie_word_embeddings=False, attention_bias=False,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    mtp_num_hidden_layers=1,  # as the released configs; transformers keeps it as a plain key
)
HYBRID_MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                  shared_expert_intermediate_size=32)

# Reloaded from their files, these models' logits differ from the built model's by about 1e-6
# (same tensors, state dicts equal; transformers' load-time expert conversion changes how their
# MoE matmuls run), so the check that the files reproduce the model allows that much.
RELOAD_TOLERANCE = {"qwen3_next": 1e-5, "qwen3_5_moe": 1e-5}

# Gemma3 text (models.md 6): layers [sliding, full, sliding, full] with a window of 8, the two
# RoPE bases, query_pre_attn_scalar 32 (not head_dim 16, so an engine scaling by head_dim fails),
# GELU-tanh, four zero-centred norms per layer, tied embeddings scaled by sqrt(hidden), and a
# final logit softcap of 30 (released checkpoints have none; set here to exercise it).
GEMMA3 = dict(
    {k: v for k, v in COMMON.items() if k != "hidden_act"}, num_hidden_layers=4, head_dim=16,
    query_pre_attn_scalar=32, sliding_window=8,
    layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                     "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
    hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, final_logit_softcapping=30.0,
    attn_logit_softcapping=None, tie_word_embeddings=True, attention_bias=False,
)

# base name -> (config class, config kwargs).
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
    # Sliding windows far shorter than the prompts, so that prefill and decoding cross them.
    "mistral": (
        transformers.MistralConfig,
        dict(COMMON, num_hidden_layers=2, head_dim=16, rope_theta=10000.0, sliding_window=5,
             tie_word_embeddings=False),
    ),
    # transformers makes layer i sliding iff i >= max_window_layers (with use_sliding_window).
    "qwen2_sliding": (
        transformers.Qwen2Config,
        dict(COMMON, num_hidden_layers=3, rope_theta=1000000.0, use_sliding_window=True,
             sliding_window=6, max_window_layers=1, tie_word_embeddings=False),
    ),
    "qwen3": (
        transformers.Qwen3Config,
        dict(COMMON, num_hidden_layers=2, head_dim=32, rope_theta=1000000.0,
             attention_bias=False, use_sliding_window=False, tie_word_embeddings=False),
    ),
    "qwen3_moe": (transformers.Qwen3MoeConfig, QWEN3_MOE),
    "deepseek_v3": (transformers.DeepseekV3Config,
                    dict(DEEPSEEK_V3, rope_scaling=DEEPSEEK_YARN_ROPE)),
    "deepseek_v3_nolora": (transformers.DeepseekV3Config, dict(DEEPSEEK_V3, q_lora_rank=None)),
    "deepseek_v3_wide": (transformers.DeepseekV3Config, DEEPSEEK_V3_WIDE),
    "deepseek_v32": (transformers.DeepseekV32Config, DEEPSEEK_V32),
    "deepseek_v4_window": (transformers.DeepseekV4Config, DEEPSEEK_V4_WINDOW),
    # Qwen3-Next: fused in_proj_qkvz / in_proj_ba; layers 0 and 2 dense, 1 and 3 MoE with the
    # gated shared expert (four MoE layers leave no prompt whose bf16 routing is clear).
    "qwen3_next": (transformers.Qwen3NextConfig,
                   dict(HYBRID, **HYBRID_MOE, norm_topk_prob=True, decoder_sparse_step=1,
                        mlp_only_layers=[0, 2])),
    # Qwen3.5 text models: split in_proj_qkv / _z / _b / _a; dense SwiGLU, or MoE whose router
    # always renormalises.
    "qwen3_5": (transformers.Qwen3_5TextConfig, HYBRID),
    "gemma3": (transformers.Gemma3TextConfig, GEMMA3),
    # Every Qwen3.5-MoE layer is MoE: two layers [linear, full], for clear bf16 routing.
    "qwen3_5_moe": (transformers.Qwen3_5MoeTextConfig,
                    dict({k: v for k, v in HYBRID.items() if k != "intermediate_size"},
                         **HYBRID_MOE, num_hidden_layers=2)),
}


class Fixture(typing.NamedTuple):
    base: str  # key of MODELS
    dtype: torch.dtype  # of the golden forwards, and of the stored weights unless fp8
    fp8: bool = False  # weights stored FP8 block-quantized; goldens run f32 on their dequantization


# Fixture names are base + "_f32" / "_bf16", except the FP8 one.
FIXTURES = {
    "llama3_f32": Fixture("llama3", torch.float32),
    "llama3_bf16": Fixture("llama3", torch.bfloat16),
    "llama_linear_f32": Fixture("llama_linear", torch.float32),
    "llama_yarn_f32": Fixture("llama_yarn", torch.float32),
    "llama_tied_f32": Fixture("llama_tied", torch.float32),
    "qwen2_f32": Fixture("qwen2", torch.float32),
    "qwen2_bf16": Fixture("qwen2", torch.bfloat16),
    "qwen2_sliding_f32": Fixture("qwen2_sliding", torch.float32),
    "mistral_f32": Fixture("mistral", torch.float32),
    "mistral_bf16": Fixture("mistral", torch.bfloat16),
    "qwen3_f32": Fixture("qwen3", torch.float32),
    "qwen3_bf16": Fixture("qwen3", torch.bfloat16),
    "qwen3_moe_f32": Fixture("qwen3_moe", torch.float32),
    "qwen3_moe_bf16": Fixture("qwen3_moe", torch.bfloat16),
    "deepseek_v3_f32": Fixture("deepseek_v3", torch.float32),
    "deepseek_v3_bf16": Fixture("deepseek_v3", torch.bfloat16),
    "deepseek_v3_nolora_f32": Fixture("deepseek_v3_nolora", torch.float32),
    "deepseek_v3_fp8": Fixture("deepseek_v3_wide", torch.float32, fp8=True),
    "deepseek_v32_f32": Fixture("deepseek_v32", torch.float32),
    "deepseek_v32_bf16": Fixture("deepseek_v32", torch.bfloat16),
    "deepseek_v4_window_f32": Fixture("deepseek_v4_window", torch.float32),
    "deepseek_v4_window_bf16": Fixture("deepseek_v4_window", torch.bfloat16),
    "gemma3_f32": Fixture("gemma3", torch.float32),
    "gemma3_bf16": Fixture("gemma3", torch.bfloat16),
    "qwen3_next_f32": Fixture("qwen3_next", torch.float32),
    "qwen3_next_bf16": Fixture("qwen3_next", torch.bfloat16),
    "qwen3_5_f32": Fixture("qwen3_5", torch.float32),
    "qwen3_5_bf16": Fixture("qwen3_5", torch.bfloat16),
    "qwen3_5_moe_f32": Fixture("qwen3_5_moe", torch.float32),
    "qwen3_5_moe_bf16": Fixture("qwen3_5_moe", torch.bfloat16),
}

# Smallest accepted top1-top2 logit gap at each greedy step (see select_prompts).
MIN_STEP_GAP = {torch.float32: 0.01, torch.bfloat16: 0.1}
# Smallest accepted gap between the k-th and (k+1)-th indexer score of a query, relative to the
# k-th (see IndexerMonitor): bf16 runs may round a q or k value one ulp apart from transformers.
MIN_INDEX_MARGIN = {torch.float32: 1e-4, torch.bfloat16: 2e-3}
# Smallest accepted routing margin (see clear_decisions): about six bf16 ulps of a router logit
# near 1 in softmax probability, a few in DeepSeek's sigmoid scores.
MIN_ROUTING_MARGIN = {torch.float32: 1e-5, torch.bfloat16: 3e-3}
MAX_PROMPT_TRIES = 1000

DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}

# transformers 5.x fuses each MoE layer's experts in memory as experts.gate_up_proj
# [E, 2 * I, H] (gate rows, then up rows) and experts.down_proj [E, H, I]; files hold them per
# expert (see split_experts).
FUSED_EXPERTS = re.compile(r"(.*\.experts)\.(gate_up_proj|down_proj)$")

# Released DeepSeek-V3 checkpoints keep the router's score correction bias in F32 whatever the
# other tensors' dtype (transformers also computes with it in F32).
F32_ON_DISK = "e_score_correction_bias"

# The tensors DeepSeek stores as FP8: every attention and FFN projection (dense, routed and
# shared experts), the MTP block's included; not the router gate, eh_proj, norms, embeddings.
FP8_TENSORS = re.compile(
    r"\.(self_attn\.(q_a_proj|q_b_proj|q_proj|kv_a_proj_with_mqa|kv_b_proj|o_proj)"
    r"|mlp\.(experts\.\d+\.|shared_experts\.)?(gate_proj|up_proj|down_proj))\.weight$")
FP8_BLOCK = 128
FP8_MAX = 448.0  # largest finite float8_e4m3fn
FP8_QUANTIZATION_CONFIG = {
    "quant_method": "fp8",
    "fmt": "e4m3",
    "activation_scheme": "dynamic",
    "weight_block_size": [FP8_BLOCK, FP8_BLOCK],
}
DEQUANTIZED_SUFFIX = ".dequantized"  # staging directory of an FP8 fixture's f32 reference

MTP_SMALL_TENSORS = ("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight")


def seed_of(text):
    return zlib.crc32(text.encode())


def randomize(model, gen, embed_std):
    """Overwrites every parameter and persistent buffer; logits get a std of about 1.6 (0.4 for
    the tied model)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("embed_tokens.weight"):
                value = embed_std * noise
            elif name.endswith(("norm.weight", "pre_fc_norm_embedding.weight",
                                "pre_fc_norm_hidden.weight")):
                value = 1.0 + 0.1 * noise
            elif name.endswith(".bias"):
                value = 0.1 * noise
            elif name == "lm_head.weight":
                value = 0.2 * noise
            elif p.dim() == 2 or FUSED_EXPERTS.match(name):
                value = 0.1 * noise
            elif name.endswith("conv1d.weight"):
                value = 0.3 * noise  # 4 taps: the conv must visibly mix neighbouring tokens
            elif name.endswith(("A_log", "dt_bias")):
                value = 0.5 * noise  # decays exp(-e^A_log softplus(a + dt_bias)) spread over (0, 1)
            elif name.endswith(("hc.base", "hc_head.hc_base", "sinks")):
                value = 0.5 * noise  # mHC biases and attention sinks: zero at init, not here
            elif name.endswith(("hc.scale", "hc_head.hc_scale")):
                value = 1.0 + 0.1 * noise
            else:
                raise ValueError(f"no randomization rule for parameter {name}")
            p.copy_(value)
        persistent = model.state_dict().keys()
        for name, b in model.named_buffers():
            if name not in persistent:
                continue  # derived values such as RoPE's inv_freq
            noise = torch.randn(b.shape, generator=gen, dtype=torch.float32)
            if name.endswith("tid2eid"):
                # DeepSeek-V4's hash routing: distinct experts per token id.
                experts = b.shape[1]
                n = model.config.n_routed_experts
                value = torch.stack([torch.randperm(n, generator=gen)[:experts]
                                     for _ in range(b.shape[0])]).to(b.dtype)
                b.copy_(value)
                continue
            if name.endswith(F32_ON_DISK):
                # Small against the sigmoid scores it corrects, so that it reorders experts
                # only where their scores are close; non-negative so that every selection
                # score sigmoid + bias stays positive, and masking the excluded groups' scores
                # with 0 or with -inf selects the same experts.
                value = 0.05 * noise.abs()
            else:
                raise ValueError(f"no randomization rule for buffer {name}")
            b.copy_(value)


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


# Hybrid model type -> (its decoder layer class, its RMSNorm class), for their MTP layers.
HYBRID_MTP_CLASSES = {
    "qwen3_next": (qwen3_next.Qwen3NextDecoderLayer, qwen3_next.Qwen3NextRMSNorm),
    "qwen3_5_text": (qwen3_5.Qwen3_5DecoderLayer, qwen3_5.Qwen3_5RMSNorm),
    "qwen3_5_moe_text": (qwen3_5_moe.Qwen3_5MoeDecoderLayer, qwen3_5_moe.Qwen3_5MoeRMSNorm),
}


# DeepSeek model type -> its decoder layer class (the MTP block is one).
DEEPSEEK_LAYERS = {
    "deepseek_v3": deepseek_v3.DeepseekV3DecoderLayer,
    "deepseek_v32": deepseek_v32.DeepseekV32DecoderLayer,
}


def mtp_layer_config(config):
    """The config of a model with one more layer, whose last layer is the MTP block: DeepSeek-V3.2
    lists its layers' kinds, which must then cover the extra one."""
    changes = {"num_hidden_layers": config.num_hidden_layers + 1}
    if config.model_type == "deepseek_v32":
        changes["mlp_layer_types"] = list(config.mlp_layer_types) + ["sparse"]
        changes["layer_types"] = list(config.layer_types) + ["indexed_attention"]
    return changes


def is_hybrid_mtp(config):
    return config.model_type in HYBRID_MTP_CLASSES


def has_mtp(config):
    """Whether the checkpoint carries a multi-token-prediction layer: DeepSeek-V3's at layer
    index num_hidden_layers, or Qwen3-Next's / Qwen3.5's under mtp."""
    if is_hybrid_mtp(config):
        layers = getattr(config, "mtp_num_hidden_layers", 0)
    elif config.model_type in DEEPSEEK_LAYERS:
        layers = config.num_nextn_predict_layers
    else:
        return False
    assert layers in (0, 1), "one MTP layer supported"
    return layers == 1


class HybridMtpModule(torch.nn.Module):
    """Qwen3-Next's and Qwen3.5's MTP layer (models.md 5.6; vLLM's qwen3_next_mtp.py) from
    transformers' blocks: z = fc([pre_fc_norm_embedding(Emb(t_{i+1})) |
    pre_fc_norm_hidden(h_i)]), a full-attention decoder layer, then norm and the model's
    lm_head. Parameter names are the checkpoint's under mtp."""

    def __init__(self, config):
        super().__init__()
        layer_cls, norm_cls = HYBRID_MTP_CLASSES[config.model_type]
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.pre_fc_norm_embedding = norm_cls(hidden, eps=eps)
        self.pre_fc_norm_hidden = norm_cls(hidden, eps=eps)
        self.fc = torch.nn.Linear(2 * hidden, hidden, bias=False)
        # The block is layer L of a model whose layer L is full attention.
        extended = copy.deepcopy(config)
        extended.layer_types = list(config.layer_types) + ["full_attention"]
        extended.num_hidden_layers = config.num_hidden_layers + 1
        self.layers = torch.nn.ModuleList([layer_cls(extended, config.num_hidden_layers)])
        self.norm = norm_cls(hidden, eps=eps)


class MtpModule(torch.nn.Module):
    """DeepSeek-V3's MTP layer (models.md 4.7) assembled from transformers' blocks, which have
    no MTP module of their own. Parameter names are the checkpoint's under model.layers.L,
    except that the decoder block's carry a "block." prefix (see mtp_checkpoint_tensors)."""

    def __init__(self, config, block):
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.enorm = deepseek_v3.DeepseekV3RMSNorm(hidden, eps=eps)
        self.hnorm = deepseek_v3.DeepseekV3RMSNorm(hidden, eps=eps)
        self.eh_proj = torch.nn.Linear(2 * hidden, hidden, bias=False)
        self.block = block
        self.shared_head = torch.nn.Module()
        self.shared_head.norm = deepseek_v3.DeepseekV3RMSNorm(hidden, eps=eps)


def build_mtp(base, model):
    """Builds the seeded random f32 MTP layer that goes with base's main model."""
    config = model.config
    if is_hybrid_mtp(config):
        mtp = HybridMtpModule(config).to(torch.float32)
    else:
        extended = copy.deepcopy(config)
        for key, value in mtp_layer_config(config).items():
            setattr(extended, key, value)
        block = DEEPSEEK_LAYERS[config.model_type](extended, layer_idx=config.num_hidden_layers)
        mtp = MtpModule(config, block).to(torch.float32)
    randomize(mtp, torch.Generator().manual_seed(seed_of(base + "/mtp")), embed_std=None)
    return mtp


def split_experts(state):
    """Returns a state dict with fused expert tensors written per expert, as on disk:
    experts.J.{gate,up}_proj.weight [I, H] and experts.J.down_proj.weight [H, I]."""
    out = {}
    for name, tensor in state.items():
        match = FUSED_EXPERTS.match(name)
        if not match:
            out[name] = tensor
            continue
        prefix, kind = match.groups()
        for j, expert in enumerate(tensor):
            if kind == "down_proj":
                out[f"{prefix}.{j}.down_proj.weight"] = expert
            else:
                gate, up = expert.chunk(2, dim=0)
                out[f"{prefix}.{j}.gate_proj.weight"] = gate
                out[f"{prefix}.{j}.up_proj.weight"] = up
    return out


def mtp_checkpoint_tensors(model, mtp):
    """The MTP layer's tensors as the checkpoint names them: DeepSeek's at layer index
    num_hidden_layers, including its copies of the main embedding and lm_head; the hybrid
    models' under mtp., which share the main ones."""
    if is_hybrid_mtp(model.config):
        return {"mtp." + name: t for name, t in split_experts(mtp.state_dict()).items()}
    prefix = f"model.layers.{model.config.num_hidden_layers}."
    state = {name.removeprefix("block."): t for name, t in mtp.state_dict().items()}
    tensors = {prefix + name: t for name, t in split_experts(state).items()}
    tensors[prefix + "embed_tokens.weight"] = model.model.embed_tokens.weight
    tensors[prefix + "shared_head.head.weight"] = model.lm_head.weight
    return tensors


def cast_for_disk(tensors, dtype):
    """Casts checkpoint tensors to dtype, except the ones released checkpoints keep in F32."""
    return {name: t.detach().to(torch.float32 if name.endswith(F32_ON_DISK) else dtype)
            .contiguous() for name, t in tensors.items()}


def cast_model(model, dtype):
    """Casts model to dtype like cast_for_disk casts its tensors."""
    kept = {name: b.detach().clone() for name, b in model.named_buffers()
            if name.endswith(F32_ON_DISK)}
    model.to(dtype)
    for name, b in kept.items():
        module, _, attr = name.rpartition(".")
        setattr(model.get_submodule(module), attr, b)


def quantize_fp8(weight):
    """Returns (float8_e4m3fn weight, F32 weight_scale_inv [ceil(out/128), ceil(in/128)]) as
    DeepSeek stores them: each 128x128 block (partial at the edges) is divided by its scale
    amax / 448 and rounded to nearest; weight = fp8 * weight_scale_inv dequantizes."""
    rows, cols = weight.shape
    grid = (math.ceil(rows / FP8_BLOCK), math.ceil(cols / FP8_BLOCK))
    quantized = torch.empty(weight.shape, dtype=torch.float8_e4m3fn)
    scale = torch.empty(grid, dtype=torch.float32)
    for bi in range(grid[0]):
        for bj in range(grid[1]):
            block = (slice(bi * FP8_BLOCK, (bi + 1) * FP8_BLOCK),
                     slice(bj * FP8_BLOCK, (bj + 1) * FP8_BLOCK))
            amax = weight[block].abs().max()
            assert amax > 0, "an all-zero block has no scale"
            scale[bi, bj] = amax / FP8_MAX
            quantized[block] = (weight[block] / scale[bi, bj]).to(torch.float8_e4m3fn)
    assert not quantized.float().isnan().any()
    return quantized, scale


def expand_scale(scale, shape):
    """Each element's block scale: scale[i // 128, j // 128] over a [rows, cols] weight."""
    rows, cols = shape
    return scale.repeat_interleave(FP8_BLOCK, 0)[:rows].repeat_interleave(FP8_BLOCK, 1)[:, :cols]


def dequantize_fp8(quantized, scale):
    return quantized.float() * expand_scale(scale, quantized.shape)


def fp8_checkpoint(tensors):
    """Returns (FP8 file tensors, their f32 dequantization under the same names): FP8_TENSORS
    become FP8 + weight_scale_inv, the rest bf16 (F32_ON_DISK stays F32)."""
    stored = cast_for_disk(tensors, torch.bfloat16)
    dequantized = {name: t.float() for name, t in stored.items()}
    for name, weight in tensors.items():
        if not FP8_TENSORS.search(name):
            continue
        quantized, scale = quantize_fp8(weight.detach().float())
        stored[name] = quantized
        stored[name + "_scale_inv"] = scale
        dequantized[name] = dequantize_fp8(quantized, scale)
        # Rounding to e4m3 (3 mantissa bits) errs by at most 1/16 of a normal value, and by
        # half the subnormal step 2^-9 below 2^-6 (in units of the block's scale).
        error = (dequantized[name] - weight).abs()
        bound = weight.abs() / 16 + expand_scale(scale, weight.shape) * 2.0**-10
        assert (error <= bound).all(), name
    return stored, dequantized


def write_tensors(path, tensors):
    safetensors.torch.save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})


def read_tensors(path):
    return safetensors.torch.load_file(path / "model.safetensors")


def write_config(path, **changes):
    """Edits path/config.json, written as save_pretrained writes it."""
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def assert_same_tensors(actual, expected, what, exact_dtype=False):
    """Same names and values, and unless exact_dtype the actual dtype may be wider (loading
    upcasts DeepSeek's router to F32)."""
    assert actual.keys() == expected.keys(), (what, actual.keys() ^ expected.keys())
    for name, t in actual.items():
        assert torch.equal(t.float(), expected[name].float()), (what, name)
        assert not exact_dtype or t.dtype == expected[name].dtype, (what, name)


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


def expected_dtype(model, name, dtype):
    """transformers keeps some modules in F32 whatever the requested dtype (DeepSeek's router)."""
    kept = model._keep_in_fp32_modules_strict or ()
    return torch.float32 if any(key in name for key in kept) else dtype


def load_checkpoint(path, dtype, **config_changes):
    """Loads path as a user would; the MTP keys of DeepSeek checkpoints are unexpected and
    ignored, so config_changes={"num_hidden_layers": L + 1} loads the MTP block as layer L."""
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="eager", dtype=dtype, output_loading_info=True,
        **config_changes)
    assert not info["missing_keys"] and not info["mismatched_keys"], (path, info)
    mtp_layer = f"model.layers.{transformers.AutoConfig.from_pretrained(path).num_hidden_layers}."
    assert all(k.startswith((mtp_layer, "mtp.")) for k in info["unexpected_keys"]), (path, info)
    assert all(p.dtype == expected_dtype(model, n, dtype) for n, p in model.named_parameters())
    return model.eval()


def reference_dir(name, staging):
    """The staged checkpoint the goldens run: an FP8 fixture's f32 dequantization."""
    return staging / (name + DEQUANTIZED_SUFFIX if FIXTURES[name].fp8 else name)


def save_checkpoint(name, staging):
    """Builds fixture NAME's model (and MTP layer), saves it and checks that the files
    reproduce it."""
    base, dtype, fp8 = FIXTURES[name]
    path, reference = staging / name, reference_dir(name, staging)
    built = build_reference(base).eval()
    probe = torch.arange(FIRST_PROMPT_ID, FIRST_PROMPT_ID + 50).unsqueeze(0)
    with torch.no_grad():
        built_logits = built(probe).logits
    tensors = split_experts(built.state_dict())
    if has_mtp(built.config):
        tensors.update(mtp_checkpoint_tensors(built, build_mtp(base, built)))
    tensors = {k: v.detach().clone() for k, v in tensors.items()}  # cast_model changes params

    save_with_transformers(built, torch.float32 if fp8 else dtype, reference)
    if fp8:
        stored, dequantized = fp8_checkpoint(tensors)
        write_tensors(reference, dequantized)
        shutil.copytree(reference, path)
        write_tensors(path, stored)
        write_config(path, dtype="bfloat16", quantization_config=FP8_QUANTIZATION_CONFIG)
    elif has_mtp(built.config):
        write_tensors(path, cast_for_disk(tensors, dtype))

    loaded = load_checkpoint(reference, dtype)
    assert loaded.config.rope_parameters == built.config.rope_parameters, name
    if fp8:
        on_disk = split_experts(loaded.state_dict())
        assert_same_tensors(on_disk, {k: dequantized[k] for k in on_disk}, name)
    else:
        saved, original = loaded.state_dict(), built.state_dict()
        assert all(torch.equal(saved[k].to(original[k].dtype), original[k]) for k in saved), name
    if dtype == torch.float32 and not fp8:
        with torch.no_grad():
            reloaded = loaded(probe).logits
        tolerance = RELOAD_TOLERANCE.get(base, 0.0)
        assert (reloaded - built_logits).abs().max().item() <= tolerance, name
    if has_mtp(built.config) and not is_hybrid_mtp(built.config):
        check_mtp_files(reference, dtype)


def save_with_transformers(model, dtype, path):
    """Casts model to dtype and saves it with save_pretrained, checking config.json and that
    the file holds split_experts' layout (the one MTP and FP8 tensors are written in)."""
    cast_model(model, dtype)
    model.config.dtype = dtype
    model.save_pretrained(path, safe_serialization=True)
    config = json.loads((path / "config.json").read_text())
    for key in ("architectures", "model_type"):
        assert key in config, f"{path.name}: config.json lacks {key}"
    assert config.get("dtype", config.get("torch_dtype")) == DTYPE_NAMES[dtype], config
    if model.config.model_type == "deepseek_v4":
        # transformers writes DeepSeek-V4 in the released checkpoint's names (attn.wq_a,
        # ffn.experts.J.w1, hc_attn_fn, head, ...) and maps them back on load; save_checkpoint
        # checks the reload instead.
        return
    written = read_tensors(path)
    expected = split_experts(model.state_dict())
    tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    assert expected.keys() - written.keys() == tied, path
    assert_same_tensors(written, {k: expected[k] for k in written}, path, exact_dtype=True)


def load_hybrid_mtp(base, model, path, dtype):
    """The hybrid model's MTP layer in dtype: rebuilt from its seed and cast as the main model
    is, after checking that the file at path holds exactly its tensors."""
    mtp = build_mtp(base, model)
    cast_model(mtp, dtype)
    tensors = read_tensors(path)
    stored = {k: v for k, v in tensors.items() if k.startswith("mtp.")}
    expected = mtp_checkpoint_tensors(model, mtp)
    assert stored.keys() == expected.keys(), path
    assert_same_tensors(stored, expected, path, exact_dtype=True)
    return mtp.eval()


def load_mtp(path, dtype):
    """Loads the MTP layer of the checkpoint at path in dtype: its decoder block through
    transformers (as layer L of a model with L + 1 layers, so that expert fusion and F32 router
    match the main layers'), the other tensors directly."""
    config = transformers.AutoConfig.from_pretrained(path)
    layers = config.num_hidden_layers
    block = load_checkpoint(path, dtype, **mtp_layer_config(config)).model.layers[layers]
    mtp = MtpModule(block.self_attn.config, block)
    tensors = read_tensors(path)
    with torch.no_grad():
        for name in MTP_SMALL_TENSORS:
            param = mtp.get_parameter(name)
            param.copy_(tensors[f"model.layers.{layers}.{name}"])
            param.data = param.data.to(dtype)
    return mtp.eval()


def check_mtp_files(path, dtype):
    """The MTP layer loaded by load_mtp holds the file's tensors, and its embedding and head
    copies equal the main model's."""
    tensors = read_tensors(path)
    prefix = f"model.layers.{transformers.AutoConfig.from_pretrained(path).num_hidden_layers}."
    for copy, original in (("embed_tokens.weight", "model.embed_tokens.weight"),
                           ("shared_head.head.weight", "lm_head.weight")):
        assert torch.equal(tensors[prefix + copy], tensors[original]), copy
    state = {k.removeprefix("block."): v for k, v in load_mtp(path, dtype).state_dict().items()}
    loaded = {prefix + k: v for k, v in split_experts(state).items()}
    mtp_keys = {k for k in tensors if k.startswith(prefix)} - {
        prefix + "embed_tokens.weight", prefix + "shared_head.head.weight"}
    assert_same_tensors(loaded, {k: tensors[k] for k in mtp_keys}, path)


def stage_checkpoint(name, staging):
    """Returns fixture NAME's model as loaded from its saved files, as a user would load it (a
    model cast in memory differs: .to(bf16) also rounds the RoPE inv_freq buffer)."""
    if not (staging / name).exists():
        save_checkpoint(name, staging)
    return load_checkpoint(reference_dir(name, staging), FIXTURES[name].dtype)


def clear_decisions(model, prompt, dtype, mtp=None):
    """Whether every greedy step has a top1-top2 gap of at least MIN_STEP_GAP[dtype] and, in MoE
    models, every routing decision over prompt + continuation a margin of at least
    MIN_ROUTING_MARGIN[dtype] (in bf16 a router logit one ulp away flips an expert choice); the
    same for the indexers' choices of DeepSeek-V3.2, its MTP layer's (`mtp`) included."""
    new_ids, step_logits = greedy_generate(model, prompt)
    if top2_gap(step_logits) < MIN_STEP_GAP[dtype]:
        return False
    monitor, indexers = RoutingMonitor(model), IndexerMonitor(model)
    with torch.no_grad():
        model(torch.tensor([prompt + new_ids]), use_cache=False)
    margin, index_margin = monitor.remove(), indexers.remove()
    if index_margin is not None and index_margin < MIN_INDEX_MARGIN[dtype]:
        return False
    if mtp is not None:
        mtp_indexers = IndexerMonitor(mtp)
        with torch.no_grad():
            mtp_logits(model, mtp, prompt)
        mtp_margin = mtp_indexers.remove()
        if mtp_margin is not None and mtp_margin < MIN_INDEX_MARGIN[dtype]:
            return False
    return margin is None or margin >= MIN_ROUTING_MARGIN[dtype]


@functools.cache  # the f32 and bf16 fixtures of a base share their prompts
def select_prompts(base, staging):
    """Draws seeded random prompts, keeping a candidate only when every dtype variant of the
    model decides clearly (clear_decisions).

    Near-ties would make an exact greedy comparison depend on rounding details (bf16 logits
    are themselves rounded to a 1/32 grid near |4|, so exact ties occur), not on correctness.
    """
    models = {fixture.dtype: stage_checkpoint(name, staging)
              for name, fixture in FIXTURES.items() if fixture.base == base}
    # DeepSeek-V3.2's MTP layer picks keys too; its choices must be clear as well.
    mtps = {fixture.dtype: load_mtp(reference_dir(name, staging), fixture.dtype)
            for name, fixture in FIXTURES.items()
            if fixture.base == base and MODELS[base][0] is transformers.DeepseekV32Config}
    gen = torch.Generator().manual_seed(seed_of(base + "/prompts"))
    prompts = []
    for length in PROMPT_LENGTHS:
        for attempt in range(MAX_PROMPT_TRIES):
            candidate = torch.randint(FIRST_PROMPT_ID, VOCAB, (length,), generator=gen).tolist()
            if all(clear_decisions(model, candidate, dtype, mtps.get(dtype))
                   for dtype, model in models.items()):
                prompts.append(candidate)
                break
        else:
            raise RuntimeError(f"{base}: no prompt of length {length} with clear greedy steps")
        print(f"{base}: prompt of length {length} accepted after {attempt + 1} candidates",
              flush=True)
    return prompts


def mtp_logits(model, mtp, prompt):
    """The MTP layer's logits [n - 1, vocab] for a prompt of n tokens (models.md 4.7): row i
    predicts token i + 2 from h_i, the main model's final-normed hidden state at i, and the
    embedding of token i + 1, after a causal pass of the MTP block over rows 0..n-2."""
    ids = torch.tensor([prompt])
    hidden = model.model(ids, use_cache=False).last_hidden_state[:, :-1]
    embeds = model.model.embed_tokens(ids[:, 1:])
    hybrid = is_hybrid_mtp(model.config)
    if hybrid:
        z = mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(embeds), mtp.pre_fc_norm_hidden(hidden)],
                             dim=-1))
    else:
        z = mtp.eh_proj(torch.cat([mtp.enorm(embeds), mtp.hnorm(hidden)], dim=-1))
    positions = torch.arange(z.shape[1]).unsqueeze(0)
    mask = create_causal_mask(config=model.config, inputs_embeds=z, attention_mask=None,
                              cache=None, position_ids=positions)
    assert mask is not None  # eager attention applies no causal mask of its own
    # Qwen3.5's rotary takes mRoPE's three position rows, all equal for text.
    rope_positions = (positions.expand(3, -1, -1) if model.config.model_type.startswith("qwen3_5")
                      else positions)
    block = mtp.layers[0] if hybrid else mtp.block
    z = block(z, attention_mask=mask, position_ids=positions,
              position_embeddings=model.model.rotary_emb(z, rope_positions))
    return model.lm_head((mtp.norm if hybrid else mtp.shared_head.norm)(z))[0]


def routing_margin(router, logits):
    """Per token, the smallest score difference that decided the router's expert choice (the
    k-th vs (k+1)-th expert, and for DeepSeek the last kept vs first dropped group)."""
    if isinstance(router, deepseek_v4.DeepseekV4TopKRouter):
        # Selection by sqrt(softplus(logits)) + bias, computed in the logits' dtype as the router
        # does; no groups.
        scores = router.score_fn(logits).float() + router.e_score_correction_bias
        top = scores.topk(router.top_k + 1, dim=-1).values
        return top[:, -2] - top[:, -1]
    logits = logits.float()
    if isinstance(router, SOFTMAX_ROUTERS):
        top = logits.softmax(-1).topk(router.top_k + 1, dim=-1).values
        return top[:, -2] - top[:, -1]
    scores = logits.sigmoid() + router.e_score_correction_bias
    assert (scores > 0).all(), "a negative selection score: engines masking groups with 0 differ"
    groups = scores.view(len(scores), router.num_group, -1)
    group_scores = groups.topk(2, dim=-1).values.sum(-1)  # sum of each group's best two
    ranked = group_scores.sort(-1, descending=True).values
    last_kept = ranked[:, router.topk_group - 1:router.topk_group]
    group_margin = last_kept[:, 0] - ranked[:, router.topk_group]
    kept = (group_scores >= last_kept).unsqueeze(-1).expand_as(groups)
    candidates = groups.masked_fill(~kept, float("-inf")).flatten(1)
    top = candidates.topk(router.top_k + 1, dim=-1).values
    return torch.minimum(group_margin, top[:, -2] - top[:, -1])


SOFTMAX_ROUTERS = (qwen3_moe.Qwen3MoeTopKRouter, qwen3_next.Qwen3NextTopKRouter,
                   qwen3_5_moe.Qwen3_5MoeTopKRouter)


class RoutingMonitor:
    """Records the smallest routing margin of every router forward while active."""

    ROUTERS = (*SOFTMAX_ROUTERS, deepseek_v3.DeepseekV3TopkRouter,
               deepseek_v32.DeepseekV32TopkRouter, deepseek_v4.DeepseekV4TopKRouter)

    def __init__(self, *modules):
        self.margin = float("inf")
        self.hooks = [m.register_forward_hook(self.record)
                      for module in modules for m in module.modules()
                      if isinstance(m, self.ROUTERS)]

    def record(self, router, _, output):
        self.margin = min(self.margin, routing_margin(router, output[0]).min().item())

    def remove(self):
        for hook in self.hooks:
            hook.remove()
        return self.margin if self.hooks else None


class IndexerMonitor:
    """Records, over DeepSeek-V3.2 indexer forwards without a cache, the smallest gap between a
    query's k-th and (k+1)-th causal score relative to the k-th: a near-tie there makes the
    selected keys, and so the logits, depend on rounding (§7.5 of the V4 family reference)."""

    def __init__(self, *modules):
        self.margin = float("inf")
        self.hooks = [m.register_forward_hook(self.record, with_kwargs=True)
                      for module in modules for m in module.modules()
                      if isinstance(m, deepseek_v32.DeepseekV32Indexer)]

    def record(self, indexer, args, kwargs, _):
        hidden, q_resid, (cos, sin) = args[0], args[1], args[2]
        assert kwargs.get("cache") is None, "scores are recomputed without a cache"
        b, s, _ = hidden.shape
        rope = indexer.qk_rope_head_dim
        q = indexer.wq_b(q_resid).view(b, s, indexer.n_heads, indexer.head_dim)
        k = indexer.k_norm(indexer.wk(hidden)).unsqueeze(2)
        q_rot, k_rot = deepseek_v32.apply_rotary_pos_emb(q[..., :rope], k[..., :rope], cos, sin,
                                                         unsqueeze_dim=2)
        q = torch.cat([q_rot, q[..., rope:]], dim=-1)
        k = torch.cat([k_rot, k[..., rope:]], dim=-1).squeeze(2)
        scores = torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1))
        scores = torch.relu(scores * indexer.softmax_scale)
        weights = indexer.weights_proj(hidden.to(indexer.weights_proj.weight.dtype)).float()
        index = torch.matmul((weights * indexer.n_heads ** -0.5).unsqueeze(-2), scores).squeeze(-2)
        k_top = indexer.index_topk
        for row in range(k_top, s):  # queries with more causal keys than they keep
            top = index[0, row, :row + 1].topk(k_top + 1).values
            gap = (top[-2] - top[-1]).item() / max(abs(top[-2].item()), 1e-6)
            self.margin = min(self.margin, gap)

    def remove(self):
        for hook in self.hooks:
            hook.remove()
        return self.margin if self.hooks else None


def make_fixture(name, root, staging):
    base, dtype, fp8 = FIXTURES[name]
    prompts = select_prompts(base, staging)
    model = stage_checkpoint(name, staging)
    mtp = None
    if has_mtp(model.config) and is_hybrid_mtp(model.config):
        mtp = load_hybrid_mtp(base, model, staging / name, dtype)
    elif has_mtp(model.config):
        mtp = load_mtp(reference_dir(name, staging), dtype)
    monitor = RoutingMonitor(model, *([mtp] if mtp else []))
    logits, greedy, all_step_logits = {}, [], []
    pos_gap, step_gap, mtp_gap, mismatches = float("inf"), float("inf"), float("inf"), 0
    with torch.no_grad():
        for i, prompt in enumerate(prompts):
            full = model(torch.tensor([prompt]), use_cache=False).logits[0].float()
            logits[f"logits.{i}"] = full.contiguous()
            if mtp:
                draft = mtp_logits(model, mtp, prompt).float()
                logits[f"mtp_logits.{i}"] = draft.contiguous()
                mtp_gap = min(mtp_gap, top2_gap(draft))
            new_ids, step_logits = greedy_generate(model, prompt)
            assert new_ids[0] == int(full[-1].argmax()), (name, i)
            greedy.append(new_ids)
            all_step_logits.append(step_logits)
            pos_gap = min(pos_gap, top2_gap(full))
            step_gap = min(step_gap, top2_gap(step_logits))
            # Information only: does a cache-free forward agree with cached decoding?
            seq = torch.tensor([prompt + new_ids[:-1]])
            nocache = model(seq, use_cache=False).logits[0, len(prompt) - 1:].argmax(-1)
            mismatches += sum(a != b for a, b in zip(nocache.tolist(), new_ids))
    routing = monitor.remove()
    # DeepSeek-V4's window is part of every layer (not an option to switch off and compare).
    if (getattr(model.config, "sliding_window", None) is not None
            and model.config.model_type != "deepseek_v4"):
        sliding_window_check.check(name, reference_dir(name, staging), model, prompts, greedy,
                                   all_step_logits, load_checkpoint, NEW_TOKENS)

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
    if fp8:
        golden["weight_format"] = "fp8_block128"
    (out_dir / "golden.json").write_text(json.dumps(golden) + "\n")
    size = sum(f.stat().st_size for f in out_dir.iterdir())
    extra = "" if mtp is None else f", MTP positions {mtp_gap:.4f}"
    extra += "" if routing is None else f"; min routing margin {routing:.2e}"
    print(f"{name}: min top1-top2 gap: positions {pos_gap:.4f}, greedy steps {step_gap:.4f}"
          f"{extra}; cache-free argmax mismatches {mismatches}/{NEW_TOKENS * len(prompts)}; "
          f"{size / 1024:.0f} KiB", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(FIXTURES),
                        help="generate this fixture (repeatable); default: all")
    parser.add_argument("--out", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent.parent
                        / "tests" / "fixtures" / "models")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # fixed reduction order, independent of the machine's core count
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as staging:
        for name in args.only or FIXTURES:
            make_fixture(name, args.out, pathlib.Path(staging))
    return 0


if __name__ == "__main__":
    sys.exit(main())
