"""Qwen3-MoE, DeepSeek-V3 (MLA + MoE), DeepSeek-V3.2 (MLA with the lightning indexer) and
DeepSeek-V4 (window-only layers, mHC, hash and sqrtsoftplus routing) fixtures served by `kestrel serve`: concurrent greedy requests reproduce transformers' greedy
continuations (batching; also on two tensor-parallel ranks, V3.2 with expert parallelism,
Qwen3-MoE on two data-parallel engines of two), start-up prices the KV bytes per token over the
cache groups (V3.2's rows carry the indexer key), a repeated prompt is served
from the prefix cache with the same answer, and an FP8 block-quantized checkpoint serves too
(`--quantization fp8` names it; on a bf16 checkpoint that flag stops serve with a reason).
The fixtures have no tokenizer, so prompts go in as token ids and logprobs name tokens
"token_id:N"."""

import concurrent.futures
import json
import subprocess

import pytest

from kestrel_e2e import KESTREL_BIN, REPO, greedy_tokens, metric, scrape

FIXTURES = REPO / "tests" / "fixtures" / "models"



def prefix_hits(base_url):
    return metric(scrape(base_url), "vllm:prefix_cache_hits_total")


@pytest.mark.parametrize("fixture,parallel", [
    ("qwen3_moe_bf16", []), ("deepseek_v3_bf16", []), ("deepseek_v3_fp8", []),
    ("qwen3_moe_bf16", ["--tensor-parallel-size", "2"]),
    ("deepseek_v3_bf16", ["--tensor-parallel-size", "2"]), ("deepseek_v32_bf16", []),
    ("deepseek_v32_f32", ["--tensor-parallel-size", "2", "--enable-expert-parallel"]),
    ("deepseek_v4_window_bf16", [])])
def test_concurrent_greedy_matches_transformers_and_prefix_cache_hits(start_server, fixture,
                                                                      parallel):
    golden = json.loads((FIXTURES / fixture / "golden.json").read_text())
    flags = ["--max-model-len", "256", "--block-size", "16", *parallel]
    if golden.get("weight_format") == "fp8_block128":
        # The goldens are an f32 forward; --quantization fp8 names what the checkpoint holds.
        flags += ["--dtype", "float32", "--quantization", "fp8"]
    srv = start_server(*flags, model_path=FIXTURES / fixture)
    prompts, want = golden["prompts"], golden["greedy"]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        got = list(pool.map(lambda p: greedy_tokens(srv.base_url, srv.model, p, len(want[0])),
                            prompts))
    assert got == want

    before = prefix_hits(srv.base_url)
    again = greedy_tokens(srv.base_url, srv.model, prompts[2], len(want[2]))
    assert again == want[2]
    # The 40-token prompt's two full 16-token blocks come from the cache.
    assert prefix_hits(srv.base_url) - before >= 32


@pytest.mark.parametrize("fixture,per_token", [
    # 2 layers × (latent 32 + rope key 8) f32 values; V3.2 adds its 32-wide indexer key per row.
    ("deepseek_v3_f32", "320 B (2 latent layers: 320)"),
    ("deepseek_v32_f32", "576 B (2 latent layers: 576)"),
    # DeepSeek-V4's window layers: one 32-wide KV head, its row stored as K and as V.
    ("deepseek_v4_window_f32", "768 B (3 sliding-window layers: 768)")])
def test_start_up_prices_kv_bytes_per_token(start_server, fixture, per_token):
    srv = start_server("--max-model-len", "256", model_path=FIXTURES / fixture)
    assert f"KV bytes per token: {per_token}" in srv.log(), srv.log()[-2000:]


def test_two_data_parallel_engines_of_two_tensor_parallel_ranks_match_transformers(start_server):
    golden = json.loads((FIXTURES / "qwen3_moe_bf16" / "golden.json").read_text())
    srv = start_server("--max-model-len", "256", "--data-parallel-size", "2",
                       "--tensor-parallel-size", "2", model_path=FIXTURES / "qwen3_moe_bf16")
    prompts, want = golden["prompts"], golden["greedy"]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        got = list(pool.map(lambda p: greedy_tokens(srv.base_url, srv.model, p, len(want[0])),
                            prompts))
    assert got == want


def test_quantization_fp8_on_a_bf16_checkpoint_exits_naming_why():
    r = subprocess.run([str(KESTREL_BIN), "serve", str(FIXTURES / "deepseek_v3_bf16"),
                        "--quantization", "fp8", "--port", "0", "--threads", "1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "is not an FP8 block-quantized checkpoint" in r.stderr + r.stdout
