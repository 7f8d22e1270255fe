"""Hybrid Qwen3-Next / Qwen3.5 fixtures (Gated DeltaNet + gated attention) served by `kestrel
serve` with the Qwen3.5 guide's cache flags: concurrent greedy requests reproduce transformers'
continuations, a repeated prompt resumes from a linear-attention state checkpoint (the prefix
cache's hit counter moves by the tokens it skipped) with the same answer, two data-parallel
engines serve it together, tensor-parallel ranks (with expert parallelism) each keep their key
heads' states, MTP speculative decoding rolls the state back past rejected drafts, the start-up
log states what the state slots cost, and what these models cannot do yet (a hybrid draft model,
more ranks than key heads, KV transfer) stops serve with the reason. The fixtures have no tokenizer, so prompts go in as token ids."""

import concurrent.futures
import json
import subprocess

import pytest

from kestrel_e2e import KESTREL_BIN, REPO, greedy_tokens, metric, scrape

FIXTURES = REPO / "tests" / "fixtures" / "models"



@pytest.mark.parametrize("fixture", ["qwen3_next_bf16", "qwen3_5_f32", "qwen3_5_moe_bf16"])
def test_greedy_matches_transformers_and_a_repeat_resumes_from_a_state_checkpoint(start_server,
                                                                                 fixture):
    golden = json.loads((FIXTURES / fixture / "golden.json").read_text())
    srv = start_server("--max-model-len", "256", "--block-size", "16", "--enable-prefix-caching",
                       "--no-disable-hybrid-kv-cache-manager", model_path=FIXTURES / fixture)
    assert "Linear-attention state:" in srv.log() and "prefix-cache checkpoints" in srv.log()
    prompts, want = golden["prompts"], golden["greedy"]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        got = list(pool.map(lambda p: greedy_tokens(srv.base_url, srv.model, p, len(want[0])),
                            prompts))
    assert got == want

    before = metric(scrape(srv.base_url), "vllm:prefix_cache_hits_total")
    again = greedy_tokens(srv.base_url, srv.model, prompts[2], len(want[2]))
    assert again == want[2]
    # The 40-token prompt's state was kept after its second block: 32 tokens are not recomputed.
    assert metric(scrape(srv.base_url), "vllm:prefix_cache_hits_total") - before == 32


def test_two_data_parallel_engines_each_keep_their_requests_states(start_server):
    golden = json.loads((FIXTURES / "qwen3_5_f32" / "golden.json").read_text())
    srv = start_server("--max-model-len", "256", "--data-parallel-size", "2",
                       model_path=FIXTURES / "qwen3_5_f32")
    prompts, want = golden["prompts"], golden["greedy"]
    with concurrent.futures.ThreadPoolExecutor(2 * len(prompts)) as pool:
        got = list(pool.map(lambda p: greedy_tokens(srv.base_url, srv.model, p, len(want[0])),
                            prompts * 2))
    assert got == want * 2
    # Both engines served requests, each with its own state slots.
    samples = scrape(srv.base_url)
    done = [metric(samples, "vllm:e2e_request_latency_seconds_count", engine=e) for e in "01"]
    assert all(d > 0 for d in done) and sum(done) == 2 * len(prompts), done


@pytest.mark.parametrize("fixture,method", [("qwen3_5_moe_bf16", "qwen3_5_mtp"),
                                            ("qwen3_next_f32", "qwen3_next_mtp")])
def test_mtp_drafts_keep_the_greedy_continuations(start_server, fixture, method):
    golden = json.loads((FIXTURES / fixture / "golden.json").read_text())
    srv = start_server("--max-model-len", "256", "--block-size", "16", "--enable-prefix-caching",
                       "--no-disable-hybrid-kv-cache-manager", "--speculative-config",
                       json.dumps({"method": method, "num_speculative_tokens": 3}),
                       model_path=FIXTURES / fixture)
    assert "draft snapshots" in srv.log()
    prompts, want = golden["prompts"], golden["greedy"]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        got = list(pool.map(lambda p: greedy_tokens(srv.base_url, srv.model, p, len(want[0])),
                            prompts))
    assert got == want
    samples = scrape(srv.base_url)
    drafted = metric(samples, "vllm:spec_decode_num_draft_tokens_total")
    accepted = metric(samples, "vllm:spec_decode_num_accepted_tokens_total")
    # The MTP layer's random weights get few drafts right: most were rolled back.
    assert drafted > 0 and accepted < drafted, (drafted, accepted)


@pytest.mark.parametrize("fixture,flags", [
    ("qwen3_5_moe_bf16", ["--tensor-parallel-size", "2"]),
    # The Qwen3.5 guide's single-node shape: TP with expert parallelism and MTP drafts.
    ("qwen3_5_moe_f32", ["--tensor-parallel-size", "2", "--enable-expert-parallel",
                         "--speculative-config", '{"method": "qwen3_5_mtp", "num_speculative_tokens": 3}']),
    ("qwen3_next_bf16", ["--tensor-parallel-size", "2", "--distributed-executor-backend", "mp"]),
])
def test_tensor_parallel_ranks_each_keep_their_heads_states(start_server, fixture, flags):
    golden = json.loads((FIXTURES / fixture / "golden.json").read_text())
    srv = start_server("--max-model-len", "256", "--block-size", "16", "--enable-prefix-caching",
                       "--no-disable-hybrid-kv-cache-manager", *flags,
                       model_path=FIXTURES / fixture)
    assert "per rank" in srv.log()  # the state slots are each rank's heads'
    prompts, want = golden["prompts"], golden["greedy"]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        got = list(pool.map(lambda p: greedy_tokens(srv.base_url, srv.model, p, len(want[0])),
                            prompts * 2))
    assert got == want * 2
    # A repeat resumes from the checkpoint every rank kept of its heads' state.
    before = metric(scrape(srv.base_url), "vllm:prefix_cache_hits_total")
    assert greedy_tokens(srv.base_url, srv.model, prompts[2], len(want[2])) == want[2]
    assert metric(scrape(srv.base_url), "vllm:prefix_cache_hits_total") - before == 32


@pytest.mark.parametrize("flags,reason", [
    (["--speculative-config", json.dumps({"method": "draft_model", "num_speculative_tokens": 2,
                                          "model": str(FIXTURES / "qwen3_5_bf16")})],
     "has linear-attention layers"),
    (["--tensor-parallel-size", "4"], "linear-attention layers have only 2 key heads"),
])
def test_what_hybrid_models_cannot_do_yet_stops_serve_with_the_reason(flags, reason):
    r = subprocess.run([str(KESTREL_BIN), "serve", str(FIXTURES / "qwen3_5_f32"), "--port", "0",
                        "--threads", "1", "--max-model-len", "256", "--kv-cache-memory", "64M",
                        *flags], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert reason in r.stderr + r.stdout, r.stderr + r.stdout
