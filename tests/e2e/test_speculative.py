"""Speculative decoding through `kestrel serve` with the guides' `--speculative-config`: the
DeepSeek-V3 fixture drafting with its MTP layer returns transformers' greedy tokens under
concurrency while vLLM's spec-decode counters move; n-gram drafting on the default model returns
what the server without drafts returns, streamed (several tokens per delta) or not, with stop
strings inside accepted runs; configurations Kestrel cannot run stop `serve` with the reason."""

import concurrent.futures
import json
import subprocess

import pytest

from kestrel_e2e import KESTREL_BIN, REPO, greedy_tokens, metric, post_json, scrape, sse_post

FIXTURES = REPO / "tests" / "fixtures" / "models"
GUIDE_MTP = '{"num_speculative_tokens": 3, "method": "mtp"}'
NGRAM = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2}'
# Repeats itself, so the n-gram proposer has spans to copy.
COPY_PROMPT = ("Repeat the list exactly.\nred, green, blue, red, green, blue, red, green, blue, "
               "red, green, blue, red, green, blue, red, green, blue\nList:")


def spec_counters(base_url):
    s = scrape(base_url)
    return {name: metric(s, f"vllm:spec_decode_{name}_total")
            for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}


def test_guides_mtp_config_on_two_tensor_parallel_ranks_matches_transformers(start_server):
    golden = json.loads((FIXTURES / "deepseek_v3_bf16" / "golden.json").read_text())
    srv = start_server("--max-model-len", "256", "--tensor-parallel-size", "2",
                       "--speculative-config", GUIDE_MTP, model_path=FIXTURES / "deepseek_v3_bf16")
    prompts, want = golden["prompts"], golden["greedy"]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        got = list(pool.map(lambda p: greedy_tokens(srv.base_url, srv.model, p, len(want[0])),
                            prompts))
    assert got == want
    assert spec_counters(srv.base_url)["num_drafts"] > 0


def test_guides_mtp_config_on_deepseek_v3_matches_transformers_and_counts(start_server):
    golden = json.loads((FIXTURES / "deepseek_v3_bf16" / "golden.json").read_text())
    srv = start_server("--max-model-len", "256", "--block-size", "16",
                       "--speculative-config", GUIDE_MTP,
                       model_path=FIXTURES / "deepseek_v3_bf16")
    assert "method `mtp`" not in srv.log()  # the plain name is not deprecated
    before = spec_counters(srv.base_url)
    assert before == {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}
    samples = scrape(srv.base_url)
    for pos in ("0", "1", "2"):
        assert metric(samples, "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                      position=pos) == 0
    prompts, want = golden["prompts"], golden["greedy"]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        got = list(pool.map(lambda p: greedy_tokens(srv.base_url, srv.model, p, len(want[0])),
                            prompts))
    assert got == want
    after = spec_counters(srv.base_url)
    assert after["num_drafts"] > 0
    # Up to three drafts per verified step.
    assert after["num_drafts"] < after["num_draft_tokens"] <= 3 * after["num_drafts"]
    assert 0 <= after["num_accepted_tokens"] <= after["num_draft_tokens"]
    per_pos = [metric(scrape(srv.base_url), "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                      position=p) for p in ("0", "1", "2")]
    assert sum(per_pos) == after["num_accepted_tokens"]
    assert per_pos[0] >= per_pos[1] >= per_pos[2]


def test_deprecated_mtp_alias_is_logged(start_server):
    srv = start_server("--max-model-len", "256", "--speculative-config",
                       '{"method": "deepseek_mtp", "num_speculative_tokens": 1}',
                       model_path=FIXTURES / "deepseek_v3_bf16")
    assert "method `deepseek_mtp` is deprecated and replaced with mtp." in srv.log()


def completion(base_url, model, **extra):
    body = {"model": model, "prompt": COPY_PROMPT, "max_tokens": 48, "temperature": 0, **extra}
    status, resp = post_json(base_url, "/v1/completions", body)
    assert status == 200, resp
    return resp["choices"][0]


def test_ngram_on_the_default_model_returns_what_plain_decoding_does(server, start_server):
    plain = completion(server.base_url, server.model)
    plain_stopped = completion(server.base_url, server.model, stop=["blue, red"])
    srv = start_server("--speculative-config", NGRAM)
    spec = completion(srv.base_url, srv.model)
    assert spec["text"] == plain["text"]
    assert spec["finish_reason"] == plain["finish_reason"]
    accepted = spec_counters(srv.base_url)["num_accepted_tokens"]
    assert accepted > 0, "the n-gram proposer found nothing to copy"

    # A stop string met inside an accepted run ends the text where plain decoding ends it.
    stopped = completion(srv.base_url, srv.model, stop=["blue, red"])
    assert stopped["text"] == plain_stopped["text"]
    assert stopped["finish_reason"] == "stop"

    # Streamed: the same text, and accepted drafts arrive several tokens to a delta.
    status, _, events, saw_done, _ = sse_post(srv.base_url, "/v1/completions", {
        "model": srv.model, "prompt": COPY_PROMPT, "max_tokens": 48, "temperature": 0,
        "stream": True, "logprobs": 0})
    assert status == 200 and saw_done
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == plain["text"]
    per_delta = [len(e["choices"][0]["logprobs"]["tokens"]) for e in events
                 if e["choices"] and e["choices"][0].get("logprobs")]
    assert sum(per_delta) == 48
    assert max(per_delta) > 1


def test_ngram_drafts_under_a_regex_give_the_plain_constrained_text(server, start_server):
    # The list, constrained to its own shape: drafts copied from the prompt pass the grammar.
    so = {"regex": "( ?(red|green|blue),)+ ?(red|green|blue)"}
    plain = completion(server.base_url, server.model, structured_outputs=so)
    srv = start_server("--speculative-config", NGRAM)
    spec = completion(srv.base_url, srv.model, structured_outputs=so)
    assert spec["text"] == plain["text"]
    assert spec_counters(srv.base_url)["num_accepted_tokens"] > 0


@pytest.mark.parametrize("config,reason", [
    ('{"method": "dspark", "num_speculative_tokens": 5}', "DeepSeek-V4.1"),
    ('{"method": "mtp", "num_speculative_tokens": 1}', "has no MTP layers"),
    ('{"method": "ngram"}', "num_speculative_tokens"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "bogus": 1}', "bogus"),
])
def test_unusable_speculative_configs_stop_serve_with_the_reason(config, reason):
    from kestrel_e2e import MODEL_PATH
    r = subprocess.run([str(KESTREL_BIN), "serve", str(MODEL_PATH), "--port", "0", "--threads", "1",
                        "--speculative-config", config],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert reason in r.stderr + r.stdout, r.stderr + r.stdout
