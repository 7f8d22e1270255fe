"""Data parallelism through `kestrel serve --data-parallel-size 2` (two engines with their own
scheduler and KV cache in one server, requests balanced by load), alone and with
`--tensor-parallel-size 2` under it (two TP groups: three processes), and a server that is one
rank behind an external load balancer (`--data-parallel-rank`, as launch_online_dp.py starts
them): greedy tokens equal the one-engine server's under concurrent load, both engines take
requests and /metrics reports each engine's series. With `--enable-expert-parallel` on a MoE
fixture the routed experts spread over every rank of both engines (DP2, DP2 x TP2), the engines
step in lockstep, and the greedy tokens are transformers' — under load, and one request at a
time (the other engine idle, stepping empty batches). Two nodes' servers under hybrid load
balancing share their experts and each answers transformers' tokens. Two servers that share their
experts behind an external load balancer fail fast when one dies: the other's in-flight requests
end with an error within seconds and its /health turns 503."""

import concurrent.futures
import http.client
import json
import signal
import time

from kestrel_e2e import REPO, Server, free_port, metric, post_json, request, scrape, wait_for

MOE = REPO / "tests" / "fixtures" / "models" / "qwen3_moe_bf16"

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
        # Each request's latencies under the engine that ran it.
        done = [metric(samples, "vllm:e2e_request_latency_seconds_count", engine=e)
                for e in ("0", "1")]
        assert all(d > 0 for d in done) and sum(done) == len(PROMPTS), (flags, done)


def test_one_rank_behind_an_external_load_balancer(server, start_server):
    srv = start_server("--data-parallel-size", "2", "--data-parallel-rank", "1",
                       "--data-parallel-address", "127.0.0.1",
                       "--data-parallel-rpc-port", str(free_port(2)))
    assert tokens(srv.base_url, srv.model, PROMPTS[0]) == tokens(server.base_url, server.model,
                                                                 PROMPTS[0])
    # Its engine is labelled with its rank, as vLLM labels it.
    samples = scrape(srv.base_url)
    assert metric(samples, "vllm:generation_tokens_total", engine="1") == 16
    assert metric(samples, "vllm:generation_tokens_total", engine="0") is None


def test_expert_parallel_across_two_engines_gives_transformers_tokens(start_server):
    golden = json.loads((MOE / "golden.json").read_text())
    prompts, want = golden["prompts"], golden["greedy"]

    def greedy(srv, prompt):
        status, body = post_json(srv.base_url, "/v1/completions", {
            "model": str(MOE), "prompt": prompt, "max_tokens": len(want[0]), "temperature": 0,
            "ignore_eos": True, "logprobs": 0})
        assert status == 200, body
        return [int(t.split(":")[1]) for t in body["choices"][0]["logprobs"]["tokens"]]

    for flags in (["--data-parallel-size", "2"],
                  ["--data-parallel-size", "2", "--tensor-parallel-size", "2"]):
        srv = start_server(*flags, "--enable-expert-parallel", "--max-model-len", "256",
                           "--kv-cache-memory", "64M", model_path=MOE)
        assert "expert parallelism across 2 data-parallel ranks" in srv.log(), flags
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            assert list(pool.map(lambda p: greedy(srv, p), prompts)) == want, flags
        for prompt, tokens in zip(prompts, want):  # alone: one engine busy, one idle
            assert greedy(srv, prompt) == tokens, flags
        samples = scrape(srv.base_url)
        generated = [metric(samples, "vllm:generation_tokens_total", engine=e) for e in ("0", "1")]
        assert all(g and g > 0 for g in generated), (flags, generated)


def start_together(per_rank_flags):
    """Servers that wait for each other at start-up (they share experts), started at once."""
    rpc = free_port(2)
    flags = ["--data-parallel-size", "2", "--data-parallel-address", "127.0.0.1",
             "--data-parallel-rpc-port", str(rpc), "--enable-expert-parallel",
             "--max-model-len", "256", "--kv-cache-memory", "64M"]
    with concurrent.futures.ThreadPoolExecutor(len(per_rank_flags)) as pool:
        starting = [pool.submit(Server, [*flags, *f], MOE) for f in per_rank_flags]
        return [s.result() for s in starting]


def test_hybrid_load_balancing_nodes_share_their_experts():
    """--data-parallel-hybrid-lb: each node's server balances its own rank; the experts are
    spread over both nodes' ranks."""
    golden = json.loads((MOE / "golden.json").read_text())
    servers = start_together([["--data-parallel-size-local", "1", "--data-parallel-start-rank",
                               str(r), "--data-parallel-hybrid-lb"] for r in (0, 1)])
    try:
        for srv in servers:
            with concurrent.futures.ThreadPoolExecutor(len(golden["prompts"])) as pool:
                got = list(pool.map(lambda p: tokens_of(srv, p, len(golden["greedy"][0])),
                                    golden["prompts"]))
            assert got == golden["greedy"]
    finally:
        for srv in servers:
            assert srv.terminate() == 0
            srv.cleanup()


def tokens_of(srv, prompt, n):
    status, body = post_json(srv.base_url, "/v1/completions", {
        "model": str(MOE), "prompt": prompt, "max_tokens": n, "temperature": 0,
        "ignore_eos": True, "logprobs": 0})
    assert status == 200, body
    return [int(t.split(":")[1]) for t in body["choices"][0]["logprobs"]["tokens"]]


def test_a_server_whose_expert_peer_dies_fails_fast_instead_of_hanging():
    servers = start_together([["--data-parallel-rank", str(r)] for r in (0, 1)])
    zero, one = servers
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            running = [pool.submit(post_json, zero.base_url, "/v1/completions", {
                "model": str(MOE), "prompt": [1, 2, 3, i], "max_tokens": 250, "ignore_eos": True,
                "temperature": 0}, None, 60) for i in range(8)]
            assert wait_for(lambda: metric(scrape(zero.base_url), "vllm:num_requests_running",
                                           engine="0"), 10)
            killed = time.monotonic()
            one.proc.send_signal(signal.SIGKILL)
            results = [r.result(timeout=30) for r in running]
        errors = [body for status, body in results if status != 200]
        assert errors, "every request finished although the peer holding half the experts died"
        assert wait_for(lambda: request(zero.base_url, "GET", "/health")[0] == 503, 10)
        assert time.monotonic() - killed < 10
    finally:
        for srv in servers:
            if srv.proc.poll() is None:
                srv.proc.kill()
            srv.proc.wait()
            srv.cleanup()


def test_servers_sharing_experts_drain_together_on_sigterm():
    """SIGTERM to both (as kestrel launch forwards it) while rank 1 still has a queue of streams
    (one at a time: --max-num-seqs 1): the rank with nothing left keeps stepping with its peer
    until the peer's requests have all finished, then both exit 0."""
    servers = start_together([["--data-parallel-rank", "0"],
                              ["--data-parallel-rank", "1", "--max-num-seqs", "1"]])
    zero, one = servers
    try:
        streams = []
        for i in range(6):
            conn = http.client.HTTPConnection(one.host, one.port, timeout=60)
            conn.request("POST", "/v1/completions", json.dumps({
                "model": str(MOE), "prompt": [1, 2, 3 + i], "max_tokens": 240, "ignore_eos": True,
                "temperature": 0, "stream": True}), {"Content-Type": "application/json"})
            streams.append(conn)
        responses = [c.getresponse() for c in streams]
        first = responses[0].readline()  # the first request runs, the others queue
        assert first.startswith(b"data: "), first
        zero.proc.send_signal(signal.SIGTERM)
        one.proc.send_signal(signal.SIGTERM)
        for k, resp in enumerate(responses):
            assert resp.status == 200
            body = ((first if k == 0 else b"") + resp.read()).decode()
            chunks = [json.loads(line[6:]) for line in body.splitlines()
                      if line.startswith("data: ") and line != "data: [DONE]"]
            assert "data: [DONE]" in body, (k, body[-500:])
            assert chunks[-1]["choices"][0]["finish_reason"] == "length", (k, chunks[-1])
        for c in streams:
            c.close()
        assert zero.proc.wait(timeout=30) == 0
        assert one.proc.wait(timeout=30) == 0
    finally:
        for srv in servers:
            srv.cleanup()
