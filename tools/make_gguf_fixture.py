#!/usr/bin/env python3
"""Writes the small GGUF fixtures used by tests/model/gguf_test.cc and gguf_dequant_test.cc.

Usage: python3 tools/make_gguf_fixture.py [out_dir]   (default: tests/fixtures/gguf)

Deterministic (numpy seed 1234); needs numpy and the `gguf` package (gguf-py). Writes:

quant_types.gguf
    general.alignment = 64; one metadata key of every GGUF value type (values hard-coded in the test),
    including UTF-8 strings and nested arrays. Tensors:
      f32.iota [3, 256] and f32.iota3d [2, 3, 64]: F32 with value = flat index, to check views;
      f16, bf16: random normal data (f16 also holds subnormals, -0, 65504 and inf);
      q8_0, q4_0, q4_1, q5_0, q5_1: random normal data quantized with gguf.quants.quantize;
      q4_k, q5_k, q6_k: gguf-py has no quantizer for these, so the blocks are random bytes with
      finite fp16 scales (every byte pattern is a valid block);
    and for each of those T except f32.*, "T.expected" (F32) = gguf.quants.dequantize of the same bytes,
    an independent reference for Kestrel's dequantizer.
tiny_llama_meta.gguf
    llama.* hyper-parameters written with GGUFWriter's own key helpers, a 40-token vocabulary and no
    vocab_size key, bos/eos/eot ids, linear rope scaling and only token_embd.weight (tied embeddings).
tiny_llama_quants.gguf
    a random 2-layer llama (hidden 256, 4 heads of 64, 2 KV heads, FFN 512, vocab 256) whose
    linears hold every GGUF weight format Kestrel computes with int8 activations (Q4_0, Q4_1,
    Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; token_embd Q4_K, output Q6_K), for the test that every ISA
    gives the same logits bits (tests/model/cpu_isa_logits_test.cc). K-quant blocks are random
    bytes with scales sized for weights of about 0.02; the others are gguf.quants.quantize of
    normal data.
tiny_qwen3_meta.gguf
    qwen3.* hyper-parameters with attention.key_length != embedding_length / head_count, no
    head_count_kv, vocab_size as uint64, yarn rope scaling (with beta_fast and attn_factor), and an
    output.weight (untied).
"""

import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT
from gguf import GGUFWriter, RopeScalingType
from gguf import quants

SEED = 1234
ROWS = 4


def write(writer: GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def add_all_value_types(w: GGUFWriter) -> None:
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.15625)
    w.add_bool("test.bool_true", True)
    w.add_bool("test.bool_false", False)
    w.add_string("test.string", "héllo wörld — ✓ 日本語")
    w.add_key_value("test.empty_string", "", VT.STRING)  # add_string() drops empty strings
    w.add_uint64("test.u64", 123456789012)
    w.add_uint64("test.u64_huge", 2**63 + 5)
    w.add_int64("test.i64", -(2**62) - 3)
    w.add_float64("test.f64", 3.141592653589793)
    w.add_key_value("test.arr_u8", [1, 2, 255], VT.ARRAY, sub_type=VT.UINT8)
    w.add_key_value("test.arr_i16", [-7, 0, 7], VT.ARRAY, sub_type=VT.INT16)
    w.add_key_value("test.arr_u64", [2**40, 1], VT.ARRAY, sub_type=VT.UINT64)
    w.add_array("test.arr_i32", [-1, 0, 2147483647])
    w.add_array("test.arr_f32", [0.5, -1.25, 3.0])
    w.add_key_value("test.arr_f64", [0.1, -2.5], VT.ARRAY, sub_type=VT.FLOAT64)
    w.add_array("test.arr_bool", [True, False, True])
    w.add_array("test.arr_string", ["a", "ß", "日本", ""])
    w.add_array("test.arr_nested", [[1, 2], [3], [4, 5, 6]])
    w.add_array("test.arr_nested_string", [["x"], ["y", "z"]])


def random_k_blocks(rng: np.random.Generator, qtype: QT, rows: int, cols: int) -> np.ndarray:
    """Random raw K-quant blocks whose fp16 scales are finite and of realistic size."""
    block_elems, block_bytes = quants.GGML_QUANT_SIZES[qtype]
    n_blocks = cols // block_elems
    raw = rng.integers(0, 256, size=(rows, n_blocks, block_bytes), dtype=np.uint8)

    def f16(lo: float, hi: float) -> np.ndarray:
        return rng.uniform(lo, hi, size=(rows, n_blocks)).astype(np.float16).view(np.uint8)

    if qtype == QT.Q6_K:
        raw[..., block_bytes - 2:] = f16(-0.02, 0.02).reshape(rows, n_blocks, 2)  # d is last
    else:
        raw[..., 0:2] = f16(0.0005, 0.02).reshape(rows, n_blocks, 2)  # d
        raw[..., 2:4] = f16(0.0005, 0.02).reshape(rows, n_blocks, 2)  # dmin
    return raw.reshape(rows, n_blocks * block_bytes)


def make_quant_types(path: Path) -> None:
    rng = np.random.default_rng(SEED)
    w = GGUFWriter(str(path), "test")
    w.add_custom_alignment(64)
    add_all_value_types(w)

    w.add_tensor("f32.iota", np.arange(3 * 256, dtype=np.float32).reshape(3, 256))
    w.add_tensor("f32.iota3d", np.arange(2 * 3 * 64, dtype=np.float32).reshape(2, 3, 64))

    f16 = rng.standard_normal((ROWS, 256)).astype(np.float16)
    f16[0, :6] = [6e-8, -6e-8, 3e-5, -0.0, 65504.0, np.inf]  # subnormals, -0, max, inf
    tensors = [("f16", QT.F16, f16.view(np.uint8).reshape(ROWS, -1))]
    bf16_src = rng.standard_normal((ROWS, 256)).astype(np.float32)
    tensors.append(("bf16", QT.BF16, quants.quantize(bf16_src, QT.BF16)))
    for name, qtype in [("q8_0", QT.Q8_0), ("q4_0", QT.Q4_0), ("q4_1", QT.Q4_1),
                        ("q5_0", QT.Q5_0), ("q5_1", QT.Q5_1)]:
        x = rng.standard_normal((ROWS, 256)).astype(np.float32)
        tensors.append((name, qtype, quants.quantize(x, qtype)))
    for name, qtype in [("q4_k", QT.Q4_K), ("q5_k", QT.Q5_K), ("q6_k", QT.Q6_K)]:
        tensors.append((name, qtype, random_k_blocks(rng, qtype, ROWS, 512)))

    for name, qtype, raw in tensors:
        expected = quants.dequantize(raw, qtype).astype(np.float32)
        assert not np.any(np.isnan(expected)), name
        w.add_tensor(name, raw, raw_dtype=qtype)
        w.add_tensor(name + ".expected", expected)
    write(w)


def token_list(n: int) -> list[str]:
    return ["<unk>", "<s>", "</s>", "<eot>"] + [f"tok{i}" for i in range(4, n)]


def make_tiny_llama(path: Path) -> None:
    rng = np.random.default_rng(SEED + 1)
    w = GGUFWriter(str(path), "llama")
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_block_count(2)
    w.add_feed_forward_length(160)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(500000.0)
    w.add_rope_dimension_count(16)
    w.add_rope_scaling_type(RopeScalingType.LINEAR)
    w.add_rope_scaling_factor(2.0)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(token_list(40))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_eot_token_id(3)
    w.add_tensor("token_embd.weight", rng.standard_normal((40, 64)).astype(np.float16))
    write(w)


def quant_tensor(rng: np.random.Generator, qtype: QT, rows: int, cols: int) -> np.ndarray:
    """Raw blocks of a [rows, cols] weight of about 0.02 in magnitude."""
    if qtype in (QT.Q4_K, QT.Q5_K, QT.Q6_K):
        block_elems, block_bytes = quants.GGML_QUANT_SIZES[qtype]
        n_blocks = cols // block_elems
        raw = rng.integers(0, 256, size=(rows, n_blocks, block_bytes), dtype=np.uint8)

        def f16(lo: float, hi: float) -> np.ndarray:
            return rng.uniform(lo, hi, size=(rows, n_blocks, 1)).astype(np.float16).view(np.uint8)

        if qtype == QT.Q6_K:  # d · sc · (q - 32), sc signed 8-bit, q - 32 in [-32, 31]
            raw[..., block_bytes - 2:] = f16(-2e-5, 2e-5)
        else:  # d · sc · q - dmin · mn, sc and mn 6-bit, q 4 (5) bits
            top = 2e-4 if qtype == QT.Q4_K else 1e-4
            raw[..., 0:2] = f16(top / 4, top)
            raw[..., 2:4] = f16(top / 4, top)
        return raw.reshape(rows, n_blocks * block_bytes)
    return quants.quantize(0.02 * rng.standard_normal((rows, cols)).astype(np.float32), qtype)


def make_tiny_llama_quants(path: Path) -> None:
    rng = np.random.default_rng(SEED + 3)
    hidden, ffn, heads, kv_heads, vocab = 256, 512, 4, 2, 256
    head_dim = hidden // heads
    w = GGUFWriter(str(path), "llama")
    w.add_context_length(1024)
    w.add_embedding_length(hidden)
    w.add_block_count(2)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(head_dim)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(token_list(vocab))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def add(name: str, qtype: QT, rows: int, cols: int) -> None:
        w.add_tensor(name, quant_tensor(rng, qtype, rows, cols), raw_dtype=qtype)

    def norm(name: str) -> None:
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))

    add("token_embd.weight", QT.Q4_K, vocab, hidden)
    layers = [
        {"attn_q": QT.Q4_K, "attn_k": QT.Q5_K, "attn_v": QT.Q6_K, "attn_output": QT.Q5_0,
         "ffn_gate": QT.Q5_1, "ffn_up": QT.Q4_0, "ffn_down": QT.Q6_K},
        {"attn_q": QT.Q5_0, "attn_k": QT.Q5_1, "attn_v": QT.Q8_0, "attn_output": QT.Q4_1,
         "ffn_gate": QT.Q4_K, "ffn_up": QT.Q5_K, "ffn_down": QT.Q5_1},
    ]
    shapes = {"attn_q": (hidden, hidden), "attn_k": (kv_heads * head_dim, hidden),
              "attn_v": (kv_heads * head_dim, hidden), "attn_output": (hidden, hidden),
              "ffn_gate": (ffn, hidden), "ffn_up": (ffn, hidden), "ffn_down": (hidden, ffn)}
    for i, types in enumerate(layers):
        norm(f"blk.{i}.attn_norm.weight")
        for name, qtype in types.items():
            add(f"blk.{i}.{name}.weight", qtype, *shapes[name])
        norm(f"blk.{i}.ffn_norm.weight")
    norm("output_norm.weight")
    add("output.weight", QT.Q6_K, vocab, hidden)
    write(w)


def make_tiny_qwen3(path: Path) -> None:
    rng = np.random.default_rng(SEED + 2)
    w = GGUFWriter(str(path), "qwen3")
    w.add_context_length(32768)
    w.add_embedding_length(64)
    w.add_block_count(3)
    w.add_feed_forward_length(96)
    w.add_head_count(2)
    w.add_key_length(48)
    w.add_value_length(48)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0)
    w.add_rope_scaling_type(RopeScalingType.YARN)
    w.add_rope_scaling_factor(4.0)
    w.add_rope_scaling_orig_ctx_len(8192)
    w.add_rope_scaling_yarn_beta_fast(16.0)
    w.add_rope_scaling_attn_factors(1.25)
    w.add_key_value("qwen3.vocab_size", 48, VT.UINT64)
    w.add_eos_token_id(7)
    w.add_eot_token_id(7)  # same as eos: listed once
    w.add_tensor("token_embd.weight", rng.standard_normal((48, 64)).astype(np.float16))
    w.add_tensor("output.weight", rng.standard_normal((48, 64)).astype(np.float16))
    write(w)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent.parent / "tests/fixtures/gguf"
    out.mkdir(parents=True, exist_ok=True)
    make_quant_types(out / "quant_types.gguf")
    make_tiny_llama(out / "tiny_llama_meta.gguf")
    make_tiny_llama_quants(out / "tiny_llama_quants.gguf")
    make_tiny_qwen3(out / "tiny_qwen3_meta.gguf")
    for f in sorted(out.glob("*.gguf")):
        print(f"{f}: {f.stat().st_size} bytes")


if __name__ == "__main__":
    main()
