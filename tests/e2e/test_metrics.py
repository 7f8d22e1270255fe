"""/metrics counters move with requests, and a client that disconnects mid-stream frees its request."""

import json
import socket

from kestrel_e2e import metric, post_json, request, scrape, wait_for

PROMPT = "The capital of France is"


def test_metrics_format_and_names(base_url):
    status, hdrs, data = request(base_url, "GET", "/metrics")
    assert status == 200
    assert hdrs["content-type"].startswith("text/plain")
    text = data.decode()
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
                 "vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"):
        assert f"# TYPE {name}" in text or f"# TYPE {name.removesuffix('_total')}" in text, name
    samples = scrape(base_url)
    assert metric(samples, "vllm:num_requests_running") is not None
    assert metric(samples, "vllm:time_to_first_token_seconds_count") is not None
    assert all("model_name" in labels for n, labels, _ in samples if n.startswith("vllm:"))


def test_counters_increase(base_url, model):
    before = scrape(base_url)
    body = {"model": model, "prompt": PROMPT, "max_tokens": 4, "temperature": 0, "ignore_eos": True}
    status, resp = post_json(base_url, "/v1/completions", body)
    assert status == 200 and resp["choices"][0]["finish_reason"] == "length"
    usage = resp["usage"]

    def delta(name, **labels):
        return (metric(scrape(base_url), name, **labels) or 0) - (metric(before, name, **labels) or 0)

    # The counters are updated when the request finishes; allow the scrape a moment to see it.
    assert wait_for(lambda: delta("vllm:request_success_total", finished_reason="length") == 1, 2)
    assert delta("vllm:prompt_tokens_total") == usage["prompt_tokens"]
    assert delta("vllm:generation_tokens_total") == usage["completion_tokens"]
    assert delta("vllm:e2e_request_latency_seconds_count") == 1
    assert delta("vllm:request_success_total", finished_reason="stop") == 0
    assert metric(scrape(base_url), "vllm:num_requests_running") == 0


def test_client_disconnect_aborts_request(base_url, model):
    before = scrape(base_url)
    aborts_before = metric(before, "vllm:request_success_total", finished_reason="abort") or 0
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": 2000, "ignore_eos": True,
                       "temperature": 0, "stream": True}).encode()
    port = int(base_url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    received = b""
    while received.count(b"data: ") < 2:
        chunk = sock.recv(4096)
        assert chunk, f"server closed the stream early: {received!r}"
        received += chunk
    assert received.startswith(b"HTTP/1.1 200")
    running = metric(scrape(base_url), "vllm:num_requests_running")
    assert running == 1
    assert metric(scrape(base_url), "vllm:kv_cache_usage_perc") > 0
    sock.close()

    def settled():
        s = scrape(base_url)
        return (metric(s, "vllm:num_requests_running") == 0 and metric(s, "vllm:kv_cache_usage_perc") == 0
                and (metric(s, "vllm:request_success_total", finished_reason="abort") or 0) == aborts_before + 1)

    assert wait_for(settled, 5), scrape(base_url)
    # Far fewer than 2000 tokens were generated.
    generated = metric(scrape(base_url), "vllm:generation_tokens_total") - metric(before,
                                                                                   "vllm:generation_tokens_total")
    assert generated < 500
