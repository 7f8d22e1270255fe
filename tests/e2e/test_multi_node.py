"""Data parallelism over nodes as the guides run it: a head (`kestrel serve` with
--data-parallel-size 2 --data-parallel-size-local 1 --data-parallel-address A) and a `--headless`
node running rank 1 (--data-parallel-start-rank 1), each rank a TP group of 2 (DP2 x TP2), on
the Qwen3-MoE fixture, with and without `--enable-expert-parallel` (the routed experts spread
over all four ranks of both nodes, exchanged through shared memory over loopback and through
Gloo across the namespace, the two engines stepping in lockstep). Over loopback and across a
network namespace (a veth pair the test creates): the head's concurrent greedy answers equal
transformers', both ranks serve, and killing the headless node makes the head answer errors
within seconds (in-flight requests end with an error, /health turns 503), never hang."""

import concurrent.futures
import json
import signal
import subprocess
import time

import pytest

from kestrel_e2e import (KESTREL_BIN, REPO, free_port, metric, post_json, request, scrape,
                         wait_for)

FIXTURE = REPO / "tests" / "fixtures" / "models" / "qwen3_moe_bf16"
COMMON = ["--data-parallel-size", "2", "--data-parallel-size-local", "1", "--tensor-parallel-size",
          "2", "--max-model-len", "256", "--kv-cache-memory", "64M", "--threads", "2"]


def greedy_tokens(base_url, prompt, n):
    status, body = post_json(base_url, "/v1/completions", {
        "model": str(FIXTURE), "prompt": prompt, "max_tokens": n, "temperature": 0,
        "ignore_eos": True, "logprobs": 0})
    assert status == 200, body
    return [int(t.split(":")[1]) for t in body["choices"][0]["logprobs"]["tokens"]]


def start_headless(address, rpc_port, tmp_path, ep, netns=None):
    cmd = [str(KESTREL_BIN), "serve", str(FIXTURE), "--headless", "--data-parallel-start-rank",
           "1", "--data-parallel-address", address, "--data-parallel-rpc-port", str(rpc_port),
           *COMMON, *ep]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    log = open(tmp_path / "headless.log", "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def check_serves_then_fails_fast(head, headless, ep):
    golden = json.loads((FIXTURE / "golden.json").read_text())
    prompts, want = golden["prompts"], golden["greedy"]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        got = list(pool.map(lambda p: greedy_tokens(head.base_url, p, len(want[0])), prompts))
    assert got == want
    samples = scrape(head.base_url)
    for engine in ("0", "1"):
        assert metric(samples, "vllm:generation_tokens_total", engine=engine) > 0, engine

    # Requests on both ranks (waves of them, so some are still running), when the node dies.
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        running = [pool.submit(post_json, head.base_url, "/v1/completions", {
            "model": str(FIXTURE), "prompt": [1, 2, 3, i % 50], "max_tokens": 250,
            "ignore_eos": True, "temperature": 0}, None, 60) for i in range(200)]
        assert wait_for(lambda: metric(scrape(head.base_url), "vllm:num_requests_running",
                                       engine="1"), 10)
        killed = time.monotonic()
        headless.send_signal(signal.SIGKILL)
        results = [r.result(timeout=30) for r in running]
    errors = [body for status, body in results if status != 200]
    assert errors, "every request finished although rank 1 died"
    # Without shared experts rank 1's requests fail naming it; with them both ranks' do.
    if not ep:
        assert any("data-parallel rank 1" in e["error"]["message"] for e in errors), errors
    assert wait_for(lambda: request(head.base_url, "GET", "/health")[0] == 503, 10)
    assert time.monotonic() - killed < 10


EXPERT_PARALLEL = pytest.mark.parametrize("ep", [[], ["--enable-expert-parallel"]],
                                         ids=["tp-experts", "expert-parallel"])


@EXPERT_PARALLEL
def test_headless_rank_over_loopback(start_server, tmp_path, ep):
    rpc = free_port(2)
    headless = start_headless("127.0.0.1", rpc, tmp_path, ep)
    try:
        head = start_server("--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port",
                            str(rpc), *COMMON, *ep, model_path=FIXTURE)
        waiting = f"waiting for data-parallel rank 1 (a --headless node) at tcp://127.0.0.1:{rpc + 1}"
        assert waiting in head.log()
        if ep:
            assert f"the group meets at tcp://127.0.0.1:{rpc}" in head.log()
        check_serves_then_fails_fast(head, headless, ep)
    finally:
        if headless.poll() is None:
            headless.kill()
        headless.wait()


@EXPERT_PARALLEL
def test_headless_rank_in_another_network_namespace(start_server, netns, tmp_path, ep):
    ns, head_ip, node_ip = netns
    rpc = free_port(2)
    headless = start_headless(head_ip, rpc, tmp_path, ep, netns=ns)
    try:
        head = start_server("--data-parallel-address", head_ip, "--data-parallel-rpc-port",
                            str(rpc), *COMMON, *ep, model_path=FIXTURE)
        assert f"tcp://{head_ip}:{rpc + 1}" in head.log()
        if ep:  # the two hosts' members of each expert group reach each other over TCP
            assert f"over Gloo (TCP) from {head_ip}" in head.log()
            assert f"over Gloo (TCP) from {node_ip}" in (tmp_path / "headless.log").read_text()
        check_serves_then_fails_fast(head, headless, ep)
    finally:
        if headless.poll() is None:
            headless.kill()
        headless.wait()
