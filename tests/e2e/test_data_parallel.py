"""Data parallelism through `kestrel serve --data-parallel-size 2` (two engines with their own
scheduler and KV cache in one server, requests balanced by load), alone and with
`--tensor-parallel-size 2` under it (two TP groups: three processes), and a server that is one
rank behind an external load balancer (`--data-parallel-rank`, as launch_online_dp.py starts
them): greedy tokens equal the one-engine server's under concurrent load, both engines take
requests and /metrics reports each engine's series."""

import concurrent.futures

from kestrel_e2e import metric, post_json, scrape

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a forest,",
           "List three colours:", "1, 2, 3, 4,", "The quick brown fox", "Water boils at",
           "My favourite book is"]


def tokens(base_url, model, prompt, n=16):
    status, body = post_json(base_url, "/v1/completions", {
        "model": model, "prompt": prompt, "max_tokens": n, "ignore_eos": True, "logprobs": 0,
        "temperature": 0})
    assert status == 200, body
    return body["choices"][0]["logprobs"]["tokens"]


def concurrent_tokens(srv):
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        return list(pool.map(lambda p: tokens(srv.base_url, srv.model, p), PROMPTS))


def test_dp2_and_dp2_tp2_tokens_equal_one_engine_and_both_engines_serve(server, start_server):
    want = concurrent_tokens(server)
    for flags in (["--data-parallel-size", "2"],
                  ["--data-parallel-size", "2", "--tensor-parallel-size", "2"]):
        srv = start_server(*flags)
        assert "data-parallel ranks" in srv.log()
        assert concurrent_tokens(srv) == want, flags
        samples = scrape(srv.base_url)
        generated = [metric(samples, "vllm:generation_tokens_total", engine=e) for e in ("0", "1")]
        assert all(g and g > 0 for g in generated), (flags, generated)
        assert sum(generated) == 16 * len(PROMPTS)
        assert metric(samples, "vllm:num_requests_running", engine="1") == 0


def test_one_rank_behind_an_external_load_balancer(server, start_server):
    srv = start_server("--data-parallel-size", "2", "--data-parallel-rank", "1",
                       "--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", "13389")
    assert tokens(srv.base_url, srv.model, PROMPTS[0]) == tokens(server.base_url, server.model,
                                                                 PROMPTS[0])
    # Its engine is labelled with its rank, as vLLM labels it.
    samples = scrape(srv.base_url)
    assert metric(samples, "vllm:generation_tokens_total", engine="1") == 16
    assert metric(samples, "vllm:generation_tokens_total", engine="0") is None
