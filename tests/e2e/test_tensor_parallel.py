"""Tensor parallelism through `kestrel serve --tensor-parallel-size 2` (the mp backend: a worker
process beside rank 0): the default model's greedy and seeded tokens equal the one-process
server's, alone and under concurrent load; a worker that dies turns /health to 503 within
seconds and ends in-flight requests with an error (no hang); SIGTERM drains and stops both
processes; splits that cannot work stop `serve` with the reason."""

import concurrent.futures
import os
import signal
import subprocess

from kestrel_e2e import KESTREL_BIN, REPO, metric, post_json, request, scrape, wait_for

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a forest,",
           "List three colours:", "1, 2, 3, 4,", "The quick brown fox"]


def tokens(base_url, model, prompt, n=24, **extra):
    status, body = post_json(base_url, "/v1/completions", {
        "model": model, "prompt": prompt, "max_tokens": n, "ignore_eos": True, "logprobs": 0,
        "temperature": 0, **extra})
    assert status == 200, body
    return [t for t in body["choices"][0]["logprobs"]["tokens"]]


def workers_of(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def test_tp2_tokens_equal_one_process_alone_and_concurrent(server, start_server):
    tp2 = start_server("--tensor-parallel-size", "2")
    assert len(workers_of(tp2.proc.pid)) == 1
    assert "of 2 tensor-parallel ranks (2 processes)" in tp2.log()
    for p in PROMPTS[:2]:
        assert tokens(tp2.base_url, tp2.model, p) == tokens(server.base_url, server.model, p), p
    seeded = {"temperature": 0.9, "top_p": 0.95, "seed": 7}
    assert (tokens(tp2.base_url, tp2.model, PROMPTS[2], **seeded) ==
            tokens(server.base_url, server.model, PROMPTS[2], **seeded))
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        got = list(pool.map(lambda p: tokens(tp2.base_url, tp2.model, p), PROMPTS))
        want = list(pool.map(lambda p: tokens(server.base_url, server.model, p), PROMPTS))
    assert got == want


def test_a_dead_worker_fails_the_server_fast_and_sigterm_still_stops_it(start_server):
    tp2 = start_server("--tensor-parallel-size", "2")
    [worker] = workers_of(tp2.proc.pid)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(post_json, tp2.base_url, "/v1/completions", {
            "model": tp2.model, "prompt": "Count to a million:", "max_tokens": 1500,
            "ignore_eos": True}, None, 60)
        assert wait_for(lambda: metric(scrape(tp2.base_url), "vllm:num_requests_running"), 10)
        os.kill(worker, signal.SIGKILL)
        status, body = running.result(timeout=10)
    assert status == 500, body
    assert "worker rank 1" in body["error"]["message"], body
    assert wait_for(lambda: request(tp2.base_url, "GET", "/health")[0] == 503, 5)
    status, body = post_json(tp2.base_url, "/v1/completions",
                             {"model": tp2.model, "prompt": "x", "max_tokens": 2})
    assert status == 500 and "failed" in body["error"]["message"], body


def test_sigterm_stops_rank_0_and_its_worker(start_server):
    tp2 = start_server("--tensor-parallel-size", "2")
    [worker] = workers_of(tp2.proc.pid)
    tp2.proc.send_signal(signal.SIGTERM)
    assert tp2.proc.wait(timeout=30) == 0
    assert wait_for(lambda: not os.path.exists(f"/proc/{worker}"), 5)


def test_splits_that_cannot_work_and_uni_are_refused_with_the_reason():
    moe = REPO / "tests" / "fixtures" / "models" / "qwen3_moe_bf16"
    run = subprocess.run([str(KESTREL_BIN), "serve", str(moe), "--tensor-parallel-size", "8",
                          "--port", "0"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "the model has only 4 attention heads" in run.stderr, run.stderr[-2000:]
    mla_moe = REPO / "tests" / "fixtures" / "models" / "deepseek_v3_bf16"
    run = subprocess.run([str(KESTREL_BIN), "serve", str(mla_moe), "--tensor-parallel-size", "2",
                          "--distributed-executor-backend", "uni"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2
    assert "uni runs one process; --tensor-parallel-size 2 needs mp" in run.stderr
