"""msModelSlim checkpoints (`--quantization ascend`) served by `kestrel serve`: the W8A8_DYNAMIC,
W8A8, MoE W8A8_DYNAMIC, MoE W4A8_DYNAMIC (int4 experts) and DeepSeek-V3 W8A8_DYNAMIC fixtures
(tools/make_modelslim_fixtures.py) reproduce their goldens' greedy continuations under
concurrent requests, also on two tensor-parallel ranks (each holding its rows of the int8
weights and their scales) and without the flag (the description file is recognised); the flag
on a checkpoint without that file stops serve with the reason; the compressed-tensors int8
fixtures serve their goldens too; and what `kestrel quantize` writes serves the same tokens."""

import concurrent.futures
import json
import re
import shutil
import subprocess

import pytest

from kestrel_e2e import KESTREL_BIN, KESTREL_SHARED, REPO, greedy_tokens, post_json

FIXTURES = REPO / "tests" / "fixtures" / "models"


@pytest.mark.parametrize("fixture,flags", [
    ("qwen3_w8a8_dynamic", ["--quantization", "ascend"]),
    ("qwen3_w8a8", ["--quantization", "ascend"]),
    ("qwen3_moe_w8a8_dynamic", ["--quantization", "ascend"]),
    ("qwen3_w8a8_dynamic", ["--quantization", "ascend", "--tensor-parallel-size", "2"]),
    ("qwen3_moe_w8a8_dynamic", ["--tensor-parallel-size", "2"]),
    ("qwen3_moe_w4a8_dynamic", ["--quantization", "ascend"]),
    ("qwen3_moe_w4a8_dynamic", ["--tensor-parallel-size", "2"]),
    ("qwen3_w8a8", ["--tensor-parallel-size", "2"]),
    ("qwen3_w8a8", []),
    ("qwen3_ct_w8a8_dynamic", []),
    ("qwen3_ct_w8a8_static", ["--tensor-parallel-size", "2"]),
    # What msModelSlim's own writer made (W8A8_MIX, biases on linears and norms), per-token.
    ("qwen3_msmodelslim_w8a8", ["--dtype", "float32"]),
    ("qwen3_msmodelslim_w8a8", ["--dtype", "float32", "--tensor-parallel-size", "2"]),
    # ...and its w8a8c8 practice: the same linears and its C8 int8 KV cache (auto picks it).
    ("qwen3_msmodelslim_w8a8c8", ["--dtype", "float32", "--tensor-parallel-size", "2"]),
    # DeepSeek-V3's MLA projections and experts int8 (kv_b dequantized for absorption), with an
    # FP8 latent cache too.
    ("deepseek_v3_w8a8_dynamic", []),
    ("deepseek_v3_w8a8_dynamic", ["--tensor-parallel-size", "2", "--enable-expert-parallel"]),
    # Quantized KV caches: C8 (picked by `auto` from the description's kv_cache_type), FP8 with
    # the compressed-tensors kv_cache_scheme's per-head scales, MXFP8 with the description's V
    # scales; on two ranks each holds its heads' channels of the scales.
    ("qwen3_w8a8c8", []),
    ("qwen3_w8a8c8", ["--tensor-parallel-size", "2", "--quantization", "ascend"]),
    ("qwen3_ct_w8a8_fp8kv", ["--kv-cache-dtype", "fp8"]),
    ("qwen3_ct_w8a8_fp8kv", ["--kv-cache-dtype", "fp8_e4m3", "--tensor-parallel-size", "2"]),
    ("qwen3_w8a8_mxfp8kv", ["--kv-cache-dtype", "mxfp8"]),
    ("qwen3_w8a8_mxfp8kv", ["--kv-cache-dtype", "mxfp8", "--tensor-parallel-size", "2"]),
])
def test_greedy_matches_the_quantized_goldens(start_server, fixture, flags):
    golden = json.loads((FIXTURES / fixture / "golden.json").read_text())
    srv = start_server("--max-model-len", "256", *flags, model_path=FIXTURES / fixture)
    prompts, want = golden["prompts"], golden["greedy"]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        got = list(pool.map(lambda p: greedy_tokens(srv.base_url, srv.model, p, len(want[0])),
                            prompts))
    assert got == want
    if golden.get("kv_cache"):
        dtype = {"C8": "i8", "FP8": "f8_e4m3", "MXFP8": "mxfp8"}[golden["kv_cache"]]
        assert f"{dtype} KV cache" in srv.log()
    if "_ct_" not in fixture:  # compressed-tensors checkpoints say so in config.json
        assert "msModelSlim checkpoint (" in srv.log()
    # The int4 experts' scale_bias agrees with the unpacked weights (else the loader warns).
    assert "scale_bias" not in srv.log()


def test_the_ascend_flag_without_a_description_stops_serve():
    r = subprocess.run([str(KESTREL_BIN), "serve", str(FIXTURES / "qwen3_f32"), "--port", "0",
                        "--threads", "1", "--max-model-len", "256", "--quantization", "ascend"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "has no quant_model_description.json" in r.stderr + r.stdout, r.stderr + r.stdout


def quantize(source, out, *flags):
    """`kestrel quantize SOURCE -o OUT FLAGS`; its summary line (the run must succeed)."""
    r = subprocess.run([str(KESTREL_BIN), "quantize", str(source), "-o", str(out), *flags],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def serves_the_goldens(start_server, model, fixture, env=None):
    """A server on `model` continues `fixture`'s golden prompts with its greedy tokens."""
    golden = json.loads((FIXTURES / fixture / "golden.json").read_text())
    srv = start_server("--max-model-len", "256", model_path=model, env=env)
    got = [greedy_tokens(srv.base_url, srv.model, p, len(golden["greedy"][0]))
           for p in golden["prompts"]]
    assert got == golden["greedy"]
    return srv


@pytest.mark.parametrize("fixture", ["qwen3_w8a8", "qwen3_moe_w4a8_dynamic"])
def test_the_avx2_int8_gemm_serves_the_goldens(start_server, fixture):
    # What a CPU without AVX-512 runs (KESTREL_CPU_ISA caps this server's kernels to it): the
    # AVX2 GEMM over int8 panels (static W8A8) and int4 panels (W4A8 experts).
    srv = serves_the_goldens(start_server, FIXTURES / fixture, fixture,
                             env={"KESTREL_CPU_ISA": "avx2"})
    assert "avx2, int8 quantized matmuls" in srv.log()


def test_kestrel_quantize_writes_what_serve_reads(start_server, tmp_path):
    """`kestrel quantize` on the f32 fixture, then `kestrel serve` on its output: the
    W8A8_DYNAMIC fixture's greedy continuations (the same bytes, made in numpy)."""
    out = tmp_path / "w8a8"
    assert "14 weights quantized to int8" in quantize(FIXTURES / "qwen3_f32", out)
    serves_the_goldens(start_server, out, "qwen3_w8a8_dynamic")
    again = subprocess.run([str(KESTREL_BIN), "quantize", str(FIXTURES / "qwen3_f32"), "-o",
                            str(out)], capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "not empty" in again.stderr


def kv_cache_tokens(log):
    m = re.search(r"KV cache size: (\d+) tokens", log)
    assert m, log[-2000:]
    return int(m.group(1))


def test_a_quantized_kv_cache_holds_more_tokens_in_the_same_memory(start_server):
    """At a fixed --kv-cache-memory the block count grows by the byte ratio: FP8 rows take half
    an f16 row's bytes, MXFP8 rows 33/64 (the default model's head_dim 64: 64 codes and 2 E8M0
    scales against 128 bytes)."""
    flags = ["--kv-cache-memory", "64M", "--block-size", "16"]
    f16 = kv_cache_tokens(start_server(*flags, "--kv-cache-dtype", "fp16").log())
    fp8 = kv_cache_tokens(start_server(*flags, "--kv-cache-dtype", "fp8").log())
    mx = kv_cache_tokens(start_server(*flags, "--kv-cache-dtype", "mxfp8").log())
    # Whole blocks of 16 tokens: within one block of the exact ratio.
    assert abs(fp8 - 2 * f16) <= 2 * 16, (f16, fp8)
    assert abs(mx - f16 * 128 / 66) <= 2 * 16, (f16, mx)
    assert fp8 > mx > f16


def test_kv_cache_dtype_refusals_name_the_reason():
    """int8 needs a C8 checkpoint; MXFP8 needs head_dim % 32; MLA latents take only fp8; a C8
    checkpoint refuses an FP8 cache (its scales are int8 ones)."""
    def refusal(model, *flags):
        r = subprocess.run([str(KESTREL_BIN), "serve", str(model), "--port", "0", "--threads",
                            "1", "--max-model-len", "256", *flags],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0
        return r.stderr + r.stdout
    assert "kv_cache_type C8" in refusal(FIXTURES / "qwen3_f32", "--kv-cache-dtype", "int8")
    assert "takes fp8, fp8_e4m3 or fp8_e5m2" in refusal(FIXTURES / "deepseek_v3_f32",
                                                         "--kv-cache-dtype", "mxfp8")
    assert "is a C8 checkpoint" in refusal(FIXTURES / "qwen3_w8a8c8", "--kv-cache-dtype", "fp8")


def test_kestrel_quantize_calibrates_static_w8a8_from_token_ids(start_server, tmp_path):
    """--quant-type W8A8 with the fixture's prompts as JSON id lines: the static fixture's greedy
    continuations (its activation ranges came from the same prompts)."""
    golden = json.loads((FIXTURES / "qwen3_w8a8" / "golden.json").read_text())
    calib = tmp_path / "calib.jsonl"
    calib.write_text("".join(json.dumps(p) + "\n" for p in golden["prompts"]))
    out = tmp_path / "w8a8"
    summary = quantize(FIXTURES / "qwen3_f32", out, "--quant-type", "W8A8", "--calibration-file",
                       str(calib))
    assert "14 weights quantized to int8 (14 with static activations, 0 int4)" in summary, summary
    serves_the_goldens(start_server, out, "qwen3_w8a8")


def test_kestrel_quantize_calibrates_on_text(start_server, tmp_path):
    """A text calibration file goes through the checkpoint's tokenizer: a small random bf16
    checkpoint with Qwen3's tokenizer, calibrated on a few lines of text, serves text prompts;
    a checkpoint without a tokenizer refuses text lines, naming the file and line."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 151936,
              "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "hidden_act": "silu", "rms_norm_eps": 1e-5, "max_position_embeddings": 512,
              "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 1,
              "eos_token_id": 2, "torch_dtype": "bfloat16"}
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(config))
    model = tmp_path / "bf16"
    subprocess.run(["python3", str(REPO / "bench" / "random_checkpoint.py"), str(tmp_path / "cfg"),
                    str(model)], check=True, timeout=120)
    tokenizer = KESTREL_SHARED / "testdata" / "tokenizers" / "qwen3"
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (model / f).write_bytes((tokenizer / f).read_bytes())
    calib = tmp_path / "calib.txt"
    calib.write_text("The quick brown fox jumps over the lazy dog.\n\n"
                     "def add(a, b):\n    return a + b\n")
    out = tmp_path / "w8a8"
    summary = quantize(model, out, "--quant-type", "W8A8", "--calibration-file", str(calib))
    assert "14 weights quantized to int8 (14 with static activations, 0 int4)" in summary, summary
    description = json.loads((out / "quant_model_description.json").read_text())
    assert description["model.layers.1.mlp.down_proj.input_scale"] == "W8A8"
    assert (out / "tokenizer.json").exists()
    srv = start_server("--max-model-len", "256", model_path=out)
    status, body = post_json(srv.base_url, "/v1/completions", {
        "model": srv.model, "prompt": "Hello", "max_tokens": 4, "temperature": 0})
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 4
    bad = subprocess.run([str(KESTREL_BIN), "quantize", str(FIXTURES / "qwen3_f32"), "-o",
                          str(tmp_path / "x"), "--quant-type", "W8A8", "--calibration-file",
                          str(calib)], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0
    assert "line 1 is text" in bad.stderr, bad.stderr


def test_kestrel_quantize_w4a8_packs_the_experts_as_int4(start_server, tmp_path):
    """--quant-type W4A8_DYNAMIC on the MoE fixture: the numpy-made int4-expert fixture's greedy
    tokens (its bytes), served from int4 panels."""
    out = tmp_path / "w4a8"
    summary = quantize(FIXTURES / "qwen3_moe_f32", out, "--quant-type", "W4A8_DYNAMIC")
    assert "(0 with static activations, 48 int4)" in summary, summary
    serves_the_goldens(start_server, out, "qwen3_moe_w4a8_dynamic")


def rename_tensors(path, rename):
    """Rewrites a safetensors file with tensor names passed through `rename` (the header is JSON;
    the data stays where it is)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header = {(k if k == "__metadata__" else rename(k)): v for k, v in header.items()}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + n:])


def test_weight_packed_names_read_as_weights(start_server, tmp_path):
    """An msModelSlim checkpoint whose int8 codes are stored as `.weight_packed` (a name
    vLLM-Ascend renames to `.weight` on load) serves the same tokens."""
    src = FIXTURES / "qwen3_w8a8_dynamic"
    out = tmp_path / "packed"
    shutil.copytree(src, out)
    desc = json.loads((src / "quant_model_description.json").read_text())
    packed = {k for k, v in desc.items() if k.endswith(".weight") and v == "W8A8_DYNAMIC"}
    assert packed
    rename_tensors(out / "quant_model_weights.safetensors",
                   lambda k: k + "_packed" if k in packed else k)
    (out / "quant_model_description.json").write_text(json.dumps(
        {(k + "_packed" if k in packed else k): v for k, v in desc.items()}))
    serves_the_goldens(start_server, out, "qwen3_w8a8_dynamic")
