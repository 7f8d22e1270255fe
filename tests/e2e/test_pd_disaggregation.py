"""Prefill/decode disaggregation as the guides run it: prefill instances (`kestrel serve
--kv-transfer-config` kv_producer), decode instances (kv_consumer) and `kestrel proxy` in front.

Through the proxy, greedy answers equal colocated serving (the same server without
kv_transfer_params) on the default model, streamed and not, completions and chat, under concurrent
load; also 2P1D, a prefill TP group of 2 feeding a TP-1 decode (and the reverse), the MoE and MLA
fixtures, the hybrid fixtures (their linear-attention state moves too, between unequal TP sizes),
a prefill instance in another network namespace, and the UCX transport. A decode-side prefix hit loads only
the blocks it lacks.

Faults, each checked for no wrong answer and no leaked block on either side (the KV usage gauges
and the lease gauge back to zero): a decode instance killed under load, a prefill instance killed
after its answer and before the pull, a decode that comes after the lease lapsed, clients that go
away at every stage, a prefill instance restarted on the same address, a decode request refused
before admission, a decode with a KV cache too small for its load (the recompute scheduler), and a
decode whose loads hang (a bounded backlog: 503)."""

import concurrent.futures
import json
import random
import signal
import socket
import subprocess
import threading
import time

import pytest

from kestrel_e2e import (KESTREL_BIN, MODEL_PATH, REPO, Server, free_port, get_json, metric,
                         post_json, request, scrape, sse_post, wait_for)

FIXTURES = REPO / "tests" / "fixtures" / "models"
PROMPTS = [
    "The capital of France is Paris. The capital of Italy is",
    "List three prime numbers:",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "def fibonacci(n):",
    "Water boils at a temperature of",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
]
STARTUP_S = 60


def kv_flags(role, kv_port=None, **extra):
    config = {"kv_connector": "MooncakeConnectorV1", "kv_role": role,
              "kv_port": str(kv_port or free_port(4))}
    policy = extra.pop("policy", None)
    if policy:
        config["kv_load_failure_policy"] = policy
    if extra:
        config["kv_connector_extra_config"] = extra
    return ["--kv-transfer-config", json.dumps(config)]


class Proxy:
    """One `kestrel proxy` process in front of the given servers."""

    def __init__(self, prefill, decode, *flags, host="127.0.0.1"):
        self.port = free_port()
        self.base_url = f"http://{host}:{self.port}"
        cmd = [str(KESTREL_BIN), "proxy", "--host", host, "--port", str(self.port),
               "--prefiller-hosts", *[s.host for s in prefill],
               "--prefiller-ports", *[str(s.port) for s in prefill],
               "--decoder-hosts", *[s.host for s in decode],
               "--decoder-ports", *[str(s.port) for s in decode], *flags]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        up = wait_for(lambda: self._healthy(), STARTUP_S)
        assert up, f"kestrel proxy did not start: {self.output()}"

    def _healthy(self):
        if self.proc.poll() is not None:
            return False
        try:
            return request(self.base_url, "GET", "/healthcheck", timeout=2)[0] == 200
        except OSError:
            return False

    def output(self):
        if self.proc.poll() is None:
            return "(running)"
        return self.proc.stdout.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        assert rc == 0, f"kestrel proxy exit code {rc}:\n{self.output()}"


@pytest.fixture
def cluster():
    """Factory for servers and proxies that are all stopped at the end (killed ones included):
    cluster.serve(*flags, **where) and cluster.proxy(prefill, decode, *flags)."""

    class Cluster:
        def __init__(self):
            self.servers, self.proxies = [], []

        def serve(self, *flags, model_path=MODEL_PATH, **where):
            srv = Server(list(flags), model_path, **where)
            self.servers.append(srv)
            return srv

        def proxy(self, prefill, decode, *flags, **where):
            p = Proxy(prefill, decode, *flags, **where)
            self.proxies.append(p)
            return p

    c = Cluster()
    yield c
    for p in c.proxies:
        p.stop()
    for srv in c.servers:
        alive = srv.proc.poll() is None
        rc = srv.terminate() if alive else srv.proc.returncode
        srv.cleanup()
        assert not alive or rc == 0, f"exit code {rc}"


def completion(base_url, prompt, n=24, model=None, **extra):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, **extra}
    if model:
        body["model"] = model
    status, answer = post_json(base_url, "/v1/completions", body, timeout=120)
    assert status == 200, answer
    return answer


def tokens_of(answer):
    return [int(t.split(":")[1]) for t in answer["choices"][0]["logprobs"]["tokens"]]


def greedy_ids(base_url, prompt, n=24, model=None):
    """Greedy token ids (so equality is exact, not through detokenized text)."""
    return tokens_of(completion(base_url, prompt, n, model, logprobs=0,
                                return_tokens_as_token_ids=True))


def chat_text(base_url, content, stream, n=20):
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": n,
            "temperature": 0, "ignore_eos": True}
    if not stream:
        status, answer = post_json(base_url, "/v1/chat/completions", body, timeout=120)
        assert status == 200, answer
        return answer["choices"][0]["message"]["content"]
    status, _, events, done, _ = sse_post(base_url, "/v1/chat/completions",
                                          {**body, "stream": True})
    assert status == 200 and done, events
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])


def drained(*servers, timeout=15):
    """Every server's KV blocks come back: no KV in use, no lease held, no load pending, no
    linear-attention state slot held for a transfer."""
    def clean():
        for s in servers:
            samples = scrape(s.base_url)
            for name in ("vllm:kv_cache_usage_perc", "kestrel:kv_transfer_leases_active",
                         "kestrel:kv_transfer_loads_pending", "vllm:num_requests_running",
                         "vllm:num_requests_waiting", "kestrel:kv_transfer_state_slots_held"):
                if metric(samples, name):
                    return False
        return True
    return wait_for(clean, timeout)


def counter(server, name):
    return metric(scrape(server.base_url), name) or 0


# ---------------------------------------------------------------------------------------------
# Topologies: answers equal colocated serving.


def test_one_prefill_one_decode_equals_colocated(cluster):
    p = cluster.serve(*kv_flags("kv_producer"))
    d = cluster.serve(*kv_flags("kv_consumer"))
    proxy = cluster.proxy([p], [d])
    want = [greedy_ids(p.base_url, q) for q in PROMPTS]  # colocated: no kv_transfer_params
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        got = list(pool.map(lambda q: greedy_ids(proxy.base_url, q), PROMPTS))
    assert got == want
    # Streamed, and chat, both ways.
    for stream in (False, True):
        assert chat_text(proxy.base_url, "Name three colors.", stream) == \
            chat_text(p.base_url, "Name three colors.", False)
    status, _, events, done, _ = sse_post(proxy.base_url, "/v1/completions", {
        "prompt": PROMPTS[0], "max_tokens": 24, "temperature": 0, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200 and done
    text = "".join(e["choices"][0]["text"] for e in events if e["choices"])
    assert text == completion(p.base_url, PROMPTS[0])["choices"][0]["text"]
    usage = events[-1]["usage"]
    assert usage["completion_tokens"] == 24
    assert "cached_tokens" in usage["prompt_tokens_details"]
    # The KV came over: the decode loaded every request's prompt, the prefill leased each.
    requests_through = len(PROMPTS) + 3
    assert counter(d, "kestrel:kv_transfer_loads_total") >= requests_through
    assert counter(d, "kestrel:kv_transfer_bytes_total") > 0
    assert counter(d, "kestrel:kv_transfer_ucx_bytes_total") == 0  # TCP unless asked for UCX
    assert counter(d, "kestrel:kv_transfer_load_failures_total") == 0
    assert counter(p, "kestrel:kv_transfer_leases_created_total") >= requests_through
    assert counter(p, "kestrel:kv_transfer_leases_released_total") >= requests_through
    assert drained(p, d)
    status, health = get_json(proxy.base_url, "/healthcheck")
    assert health == {"status": "ok", "prefill_instances": 1, "decode_instances": 1,
                      "request_num": 0}


def test_a_decode_prefix_hit_loads_only_the_missing_blocks(cluster):
    p = cluster.serve(*kv_flags("kv_producer"))
    d = cluster.serve(*kv_flags("kv_consumer"))
    proxy = cluster.proxy([p], [d])
    long_prompt = list(range(100, 200))  # 100 tokens: 7 blocks of 16
    first = greedy_ids(proxy.base_url, long_prompt)
    loaded = counter(d, "kestrel:kv_transfer_blocks_total")
    assert loaded == 7
    again = greedy_ids(proxy.base_url, long_prompt)
    assert again == first == greedy_ids(p.base_url, long_prompt)
    # The decode's own cache holds the 6 full blocks: only the last, partial one comes over.
    assert counter(d, "kestrel:kv_transfer_blocks_total") - loaded == 1
    assert drained(p, d)


def test_two_prefills_one_decode(cluster):
    kv_port = free_port(4)
    # One prefill group of two data-parallel ranks, one server each (--data-parallel-rank), as
    # launch_online_dp.py starts them: the same kv_port, each rank on its own port block.
    group = ["--data-parallel-size", "2", "--data-parallel-address", "127.0.0.1",
             "--data-parallel-rpc-port", str(free_port(2))]
    p0 = cluster.serve(*group, "--data-parallel-rank", "0", *kv_flags("kv_producer", kv_port))
    p1 = cluster.serve(*group, "--data-parallel-rank", "1", *kv_flags("kv_producer", kv_port))
    d = cluster.serve(*kv_flags("kv_consumer"))
    proxy = cluster.proxy([p0, p1], [d])
    want = [greedy_ids(d.base_url, q) for q in PROMPTS]
    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        got = list(pool.map(lambda q: greedy_ids(proxy.base_url, q), PROMPTS * 2))
    assert got == want * 2
    for p in (p0, p1):
        assert counter(p, "kestrel:kv_transfer_leases_created_total") > 0
    assert drained(p0, p1, d)


@pytest.mark.parametrize("prefill_tp,decode_tp", [(2, 1), (1, 2)])
def test_unequal_tensor_parallel_sizes(cluster, prefill_tp, decode_tp):
    def tp(n):
        return ["--tensor-parallel-size", str(n)] if n > 1 else []
    p, d = three_prompts_through_a_pair(cluster, [*tp(prefill_tp), *kv_flags("kv_producer")],
                                        [*tp(decode_tp), *kv_flags("kv_consumer")])
    assert drained(p, d)


def three_prompts_through_a_pair(cluster, prefill_flags, decode_flags):
    """1P1D through the proxy: three concurrent greedy prompts equal the prefill's colocated
    answers, and the decode loaded each one's KV. Returns the two servers."""
    p = cluster.serve(*prefill_flags)
    d = cluster.serve(*decode_flags)
    proxy = cluster.proxy([p], [d])
    want = [greedy_ids(p.base_url, q) for q in PROMPTS[:3]]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        got = list(pool.map(lambda q: greedy_ids(proxy.base_url, q), PROMPTS[:3]))
    assert got == want
    assert counter(d, "kestrel:kv_transfer_loads_total") == 3
    return p, d


@pytest.mark.parametrize("prefill_tp", [1, 2])
def test_ucx_transport_carries_the_blocks(cluster, prefill_tp):
    tp = ["--tensor-parallel-size", str(prefill_tp)] if prefill_tp > 1 else []
    p, d = three_prompts_through_a_pair(cluster,
                                        [*tp, *kv_flags("kv_producer", kv_transport="ucx")],
                                        kv_flags("kv_consumer", kv_transport="ucx"))
    assert "and over UCX" in p.log(), p.log()[-3000:]
    # Every byte came over UCX, none over the TCP fallback.
    total = counter(d, "kestrel:kv_transfer_bytes_total")
    assert total > 0
    assert counter(d, "kestrel:kv_transfer_ucx_bytes_total") == total
    assert drained(p, d)


FIXTURE_FLAGS = ["--max-model-len", "256", "--kv-cache-memory", "64M"]


def golden_through_a_pair(cluster, fixture, prefill_flags=(), decode_flags=()):
    """1P1D through the proxy on a fixture: its golden prompts, concurrently, give its greedy
    tokens, and the decode loaded each one. Returns the two servers."""
    path = FIXTURES / fixture
    golden = json.loads((path / "golden.json").read_text())
    p = cluster.serve(*FIXTURE_FLAGS, *prefill_flags, model_path=path)
    d = cluster.serve(*FIXTURE_FLAGS, *decode_flags, model_path=path)
    proxy = cluster.proxy([p], [d])
    n = len(golden["greedy"][0])
    with concurrent.futures.ThreadPoolExecutor(len(golden["prompts"])) as pool:
        got = list(pool.map(lambda q: greedy_ids(proxy.base_url, q, n, str(path)),
                            golden["prompts"]))
    assert got == golden["greedy"]
    assert counter(d, "kestrel:kv_transfer_loads_total") == len(golden["prompts"])
    assert counter(d, "kestrel:kv_transfer_load_failures_total") == 0
    return p, d


@pytest.mark.parametrize("fixture", ["qwen3_moe_f32", "deepseek_v3_f32"])
def test_moe_and_mla_fixtures(cluster, fixture):
    p, d = golden_through_a_pair(cluster, fixture, kv_flags("kv_producer"),
                                 kv_flags("kv_consumer"))
    assert drained(p, d)


@pytest.mark.parametrize("fixture,kv_dtype,prefill_tp", [
    ("qwen3_w8a8c8", "auto", 2), ("qwen3_ct_w8a8_fp8kv", "fp8", 1),
    ("qwen3_w8a8_mxfp8kv", "mxfp8", 2)])
def test_quantized_kv_caches_move_their_codes(cluster, fixture, kv_dtype, prefill_tp):
    """Blocks of int8 (C8), FP8 and MXFP8 codes move as bytes: the decode reads them with the
    same checkpoint scales (each rank's heads' channels when the TP sizes differ)."""
    kv = ["--kv-cache-dtype", kv_dtype]
    tp = ["--tensor-parallel-size", str(prefill_tp)] if prefill_tp > 1 else []
    p, d = golden_through_a_pair(cluster, fixture, [*kv, *tp, *kv_flags("kv_producer")],
                                 [*kv, *kv_flags("kv_consumer")])
    assert drained(p, d)


def test_kv_caches_of_different_dtypes_do_not_pair(cluster):
    """An fp8 decode refuses an f16 prefill's blocks by their compatibility key: the request
    falls back to computing its prompt on the decode, with the right tokens."""
    path = FIXTURES / "qwen3_f32"
    golden = json.loads((path / "golden.json").read_text())
    p = cluster.serve(*FIXTURE_FLAGS, *kv_flags("kv_producer"), model_path=path)
    d = cluster.serve(*FIXTURE_FLAGS, "--kv-cache-dtype", "fp8", *kv_flags("kv_consumer"),
                      model_path=path)
    proxy = cluster.proxy([p], [d])
    prompt = golden["prompts"][0]
    got = greedy_ids(proxy.base_url, prompt, 8, str(path))
    assert got == greedy_ids(d.base_url, prompt, 8, str(path))  # the decode's own answer
    assert counter(d, "kestrel:kv_transfer_loads_total") == 0
    assert "incompatible KV cache" in d.log(), d.log()[-3000:]
    assert drained(p, d)


def test_prefill_in_another_network_namespace(cluster, netns):
    ns, host_ip, node_ip = netns
    # The prefill instance advertises the namespace's address (its --host) to the decode.
    p = cluster.serve(*kv_flags("kv_producer"), host=node_ip, netns=ns)
    d = cluster.serve(*kv_flags("kv_consumer"), host=host_ip)
    proxy = cluster.proxy([p], [d])
    want = [greedy_ids(d.base_url, q) for q in PROMPTS[:3]]
    got = [greedy_ids(proxy.base_url, q) for q in PROMPTS[:3]]
    assert got == want
    assert counter(d, "kestrel:kv_transfer_loads_total") == 3
    assert counter(d, "kestrel:kv_transfer_load_failures_total") == 0
    assert drained(p, d)


def test_launch_starts_a_prefill_group_and_bench_serve_runs_through_the_proxy(cluster, tmp_path):
    kv_port, rpc, start = free_port(4), free_port(2), free_port(2)
    template = tmp_path / "run_dp_template.sh"
    template.write_text(f"""#!/bin/bash
exec {KESTREL_BIN} serve {MODEL_PATH} --host 127.0.0.1 --port $2 --data-parallel-size $3 \\
  --data-parallel-rank $4 --data-parallel-address $5 --data-parallel-rpc-port $6 \\
  --tensor-parallel-size $7 --max-model-len 2048 --kv-cache-memory 256M --threads 1 \\
  --kv-transfer-config '{{"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer",
    "kv_port": "{kv_port}", "kv_connector_extra_config": {{"prefill": {{"dp_size": 2, "tp_size": 1}},
    "decode": {{"dp_size": 1, "tp_size": 1}}}}}}'
""")
    template.chmod(0o755)
    launch = subprocess.Popen(
        [str(KESTREL_BIN), "launch", "--dp-size", "2", "--tp-size", "1", "--dp-address",
         "127.0.0.1", "--dp-rpc-port", str(rpc), "--vllm-start-port", str(start), "--template",
         str(template)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        class Rank:
            def __init__(self, port):
                self.host, self.port = "127.0.0.1", port
                self.base_url = f"http://127.0.0.1:{port}"
        ranks = [Rank(start), Rank(start + 1)]
        for r in ranks:
            assert wait_for(lambda: _healthy(r.base_url), STARTUP_S), "a prefill rank did not start"
        d = cluster.serve(*kv_flags("kv_consumer"))
        proxy = cluster.proxy(ranks, [d])
        assert greedy_ids(proxy.base_url, PROMPTS[0]) == greedy_ids(d.base_url, PROMPTS[0])
        bench = subprocess.run(
            [str(KESTREL_BIN), "bench", "serve", "--base-url", proxy.base_url, "--model",
             str(MODEL_PATH), "--dataset-name", "random", "--random-input-len", "64",
             "--random-output-len", "16", "--num-prompts", "8", "--max-concurrency", "4"],
            capture_output=True, text=True, timeout=300)
        assert bench.returncode == 0, bench.stdout + bench.stderr
        assert "Successful requests:                     8" in bench.stdout, bench.stdout
        for r in ranks:
            assert counter(r, "kestrel:kv_transfer_leases_created_total") > 0
        assert drained(*ranks, d)
    finally:
        launch.send_signal(signal.SIGTERM)
        try:
            assert launch.wait(timeout=60) == 0, launch.stdout.read()
        except subprocess.TimeoutExpired:
            launch.kill()
            launch.wait()
            raise


def _healthy(base_url):
    try:
        return request(base_url, "GET", "/health", timeout=2)[0] == 200
    except OSError:
        return False


@pytest.mark.parametrize("fixture,prefill_flags,decode_flags,transport", [
    ("qwen3_5_f32", [], [], "tcp"),
    ("qwen3_next_f32", ["--tensor-parallel-size", "2"], [], "tcp"),
    ("qwen3_5_moe_f32", [], ["--tensor-parallel-size", "2"], "tcp"),
    # Prefill chunks of 6 (prompts of 7, 19 and 40 tokens end in chunks of 1, 3 and 4), no
    # prefix cache on the decode side.
    ("qwen3_5_f32", ["--max-num-batched-tokens", "6"], ["--no-enable-prefix-caching"], "tcp"),
    ("qwen3_5_f32", ["--tensor-parallel-size", "2"], [], "ucx"),
])
def test_hybrid_models_move_their_linear_attention_state(cluster, fixture, prefill_flags,
                                                         decode_flags, transport):
    """Qwen3.5 / Qwen3-Next: the decode instance continues from the producer's recurrent state
    (as it stood before the prompt's last token) besides the attention layers' blocks, re-cut
    between TP sizes by key head: greedy tokens equal transformers'."""
    p, d = golden_through_a_pair(
        cluster, fixture, [*prefill_flags, *kv_flags("kv_producer", kv_transport=transport)],
        [*decode_flags, *kv_flags("kv_consumer", kv_transport=transport)])
    if transport == "ucx":  # the state slots too, not only the blocks
        assert counter(d, "kestrel:kv_transfer_ucx_bytes_total") == counter(
            d, "kestrel:kv_transfer_bytes_total")
    assert drained(p, d)


def test_a_hybrid_models_held_state_comes_back_on_every_exit(cluster):
    """The producer's state slot goes with the lease (back when it lapses); a consumer refuses
    params without one (400, the lease released); a failed load gives the consumer's slot back
    and recomputes to the right answer."""
    path = FIXTURES / "qwen3_5_f32"
    golden = json.loads((path / "golden.json").read_text())
    prompt, want = golden["prompts"][1], golden["greedy"][1]
    p = cluster.serve(*FIXTURE_FLAGS, *kv_flags("kv_producer", kv_lease_duration=1),
                      model_path=path)
    d = cluster.serve(*FIXTURE_FLAGS, *kv_flags("kv_consumer"), model_path=path)
    params = prefill_params(p, prompt)
    assert isinstance(params["remote_state_slot"], int)
    assert counter(p, "kestrel:kv_transfer_state_slots_held") == 1
    assert wait_for(lambda: counter(p, "kestrel:kv_transfer_leases_expired_total") == 1, 10)
    assert wait_for(lambda: counter(p, "kestrel:kv_transfer_state_slots_held") == 0, 5)
    # The lapsed lease: the load is refused by the producer, the decode recomputes.
    status, answer = decode_with(d, prompt, params, len(want), logprobs=0,
                                 return_tokens_as_token_ids=True)
    assert status == 200, answer
    assert tokens_of(answer) == want
    assert counter(d, "kestrel:kv_transfer_recomputes_total") == 1
    # No state slot named: refused before admission, and the producer's lease released.
    fresh = prefill_params(p, prompt)
    del fresh["remote_state_slot"]
    status, answer = decode_with(d, prompt, fresh, len(want))
    assert status == 400, answer
    assert "remote_state_slot" in answer["error"]["message"]
    assert wait_for(lambda: counter(p, "kestrel:kv_transfer_leases_released_total") == 1, 5)
    assert drained(p, d)


# ---------------------------------------------------------------------------------------------
# Faults: no wrong answer, no leaked block, a clean error or a successful retry.


def prefill_params(p, prompt):
    """The first half by hand: the prefill instance's answer to the proxy's request."""
    status, answer = post_json(p.base_url, "/v1/completions", {
        "prompt": prompt, "max_tokens": 1, "min_tokens": 1, "temperature": 0, "stream": False,
        "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False}})
    assert status == 200, answer
    params = answer["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["remote_port"] > 0
    return params


def decode_with(d, prompt, params, n=24, **extra):
    return post_json(d.base_url, "/v1/completions", {
        "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True,
        "kv_transfer_params": params, **extra}, timeout=120)


def test_killing_the_decode_under_load_leaks_nothing_on_the_prefill(cluster):
    p = cluster.serve(*kv_flags("kv_producer", kv_lease_duration=2))
    d = cluster.serve(*kv_flags("kv_consumer"))
    proxy = cluster.proxy([p], [d], "--max-retries", "2")
    want = {q: completion(p.base_url, q, 200)["choices"][0]["text"] for q in PROMPTS}
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        running = [pool.submit(post_json, proxy.base_url, "/v1/completions", {
            "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 200, "temperature": 0,
            "ignore_eos": True}, None, 120) for i in range(24)]
        assert wait_for(lambda: counter(d, "kestrel:kv_transfer_loads_total") >= 3, 30)
        d.proc.send_signal(signal.SIGKILL)
        results = [(running[i].result(timeout=120), PROMPTS[i % len(PROMPTS)]) for i in range(24)]
    failed = 0
    for (status, body), prompt in results:
        if status == 200:
            assert body["choices"][0]["text"] == want[prompt]  # never a wrong answer
        else:
            failed += 1
            assert status == 502 and "decode instance" in body["error"]["message"], body
    assert failed > 0
    # The prefill frees every block: released by the proxy, or lapsed without heartbeats.
    assert drained(p, timeout=20)


def test_killing_the_prefill_before_the_pull_recomputes_or_fails_cleanly(cluster):
    kv_port = free_port(4)
    p = cluster.serve(*kv_flags("kv_producer", kv_port))
    d = cluster.serve(*kv_flags("kv_consumer"))
    strict = cluster.serve(*kv_flags("kv_consumer", policy="fail"))
    want = completion(d.base_url, PROMPTS[2])["choices"][0]["text"]
    params = [prefill_params(p, PROMPTS[2]) for _ in range(2)]
    p.proc.send_signal(signal.SIGKILL)
    p.proc.wait()
    # recompute (the default): the decode prefills locally and answers right.
    status, answer = decode_with(d, PROMPTS[2], params[0])
    assert status == 200, answer
    assert answer["choices"][0]["text"] == want
    assert counter(d, "kestrel:kv_transfer_load_failures_total") == 1
    assert counter(d, "kestrel:kv_transfer_recomputes_total") == 1
    # fail: the client hears why.
    status, answer = decode_with(strict, PROMPTS[2], params[1])
    assert status >= 500, answer
    assert "error" in answer
    assert drained(d, strict)


def test_a_decode_after_the_lease_lapsed_never_uses_the_blocks(cluster):
    p = cluster.serve(*kv_flags("kv_producer", kv_lease_duration=1))
    d = cluster.serve(*kv_flags("kv_consumer"))
    want = completion(d.base_url, PROMPTS[3])["choices"][0]["text"]
    params = prefill_params(p, PROMPTS[3])
    assert wait_for(lambda: counter(p, "kestrel:kv_transfer_leases_expired_total") == 1, 10)
    # The lapsed lease's blocks may already hold another prompt: prefill one to make sure.
    other = prefill_params(p, PROMPTS[4] * 3)
    status, answer = decode_with(d, PROMPTS[3], params)
    assert status == 200, answer
    assert answer["choices"][0]["text"] == want
    assert counter(d, "kestrel:kv_transfer_load_failures_total") == 1
    assert counter(d, "kestrel:kv_transfer_recomputes_total") == 1
    del other  # its lease lapses too
    assert drained(p, d)


def test_clients_that_go_away_at_every_stage(cluster):
    p = cluster.serve(*kv_flags("kv_producer", kv_lease_duration=3))
    d = cluster.serve(*kv_flags("kv_consumer"))
    proxy = cluster.proxy([p], [d])
    rng = random.Random(7)
    port = proxy.port

    def hang_up(i):
        body = json.dumps({"prompt": PROMPTS[i % len(PROMPTS)] * (1 + i % 4), "max_tokens": 300,
                           "temperature": 0, "ignore_eos": True, "stream": i % 2 == 0})
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                       f"application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
            time.sleep(rng.uniform(0, 0.4) if i % 3 else 0)
            if i % 5 == 0:
                s.recv(1)  # after the first byte
    threads = [threading.Thread(target=hang_up, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert drained(p, d, timeout=30)
    assert wait_for(lambda: get_json(proxy.base_url, "/healthcheck")[1]["request_num"] == 0, 10)
    # Both still serve.
    assert greedy_ids(proxy.base_url, PROMPTS[0]) == greedy_ids(p.base_url, PROMPTS[0])


def test_a_prefill_restarted_on_the_same_address_is_a_new_peer(cluster):
    kv_port = free_port(4)
    p = cluster.serve(*kv_flags("kv_producer", kv_port))
    d = cluster.serve(*kv_flags("kv_consumer"))
    want = completion(d.base_url, PROMPTS[1])["choices"][0]["text"]
    old = prefill_params(p, PROMPTS[1])
    p.proc.send_signal(signal.SIGKILL)
    p.proc.wait()
    again = cluster.serve(*kv_flags("kv_producer", kv_port), port=p.port)
    # The same host and ports, another incarnation: the old params are not its blocks.
    status, answer = decode_with(d, PROMPTS[1], old)
    assert status == 200, answer
    assert answer["choices"][0]["text"] == want
    assert counter(d, "kestrel:kv_transfer_recomputes_total") == 1
    proxy = cluster.proxy([again], [d])
    assert completion(proxy.base_url, PROMPTS[1])["choices"][0]["text"] == want
    assert counter(d, "kestrel:kv_transfer_loads_total") == 1
    assert drained(again, d)


def test_a_decode_request_refused_before_admission_releases_the_lease(cluster):
    p = cluster.serve(*kv_flags("kv_producer"))  # a 30 s lease: only a release frees in time
    d = cluster.serve(*kv_flags("kv_consumer"))
    params = prefill_params(p, PROMPTS[0])
    assert counter(p, "kestrel:kv_transfer_leases_active") == 1
    status, answer = post_json(d.base_url, "/v1/completions", {
        "prompt": PROMPTS[0], "max_tokens": 8, "temperature": -1, "kv_transfer_params": params})
    assert status == 400, answer
    assert wait_for(lambda: counter(p, "kestrel:kv_transfer_leases_released_total") == 1, 5)
    # Another prompt than the one prefilled: refused by the engine, released too.
    params = prefill_params(p, PROMPTS[0])
    status, answer = decode_with(d, PROMPTS[1], params)
    assert status == 400 and "prompt" in answer["error"]["message"], answer
    assert wait_for(lambda: counter(p, "kestrel:kv_transfer_leases_released_total") == 2, 5)
    assert drained(p, d, timeout=5)


def test_a_decode_short_of_kv_gives_requests_back_and_the_proxy_continues_them(cluster):
    p = cluster.serve(*kv_flags("kv_producer"))
    # Room for about 3 requests of 220 tokens (21.5 KiB a token); 8 at once must give some back.
    d = cluster.serve(*kv_flags("kv_consumer"), "--max-model-len", "512", "--kv-cache-memory",
                      "15M", "--additional-config",
                      json.dumps({"scheduler_config": {"recompute_scheduler_enable": True}}))
    proxy = cluster.proxy([p], [d], "--max-retries", "8")

    def run(i):
        body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 200, "temperature": 0,
                "ignore_eos": True}
        if i % 2 == 0:
            status, answer = post_json(proxy.base_url, "/v1/completions", body, None, 300)
            assert status == 200, answer
            assert answer["choices"][0]["stop_reason"] != "recomputed"
            return answer["usage"]["completion_tokens"]
        status, _, events, done, _ = sse_post(proxy.base_url, "/v1/completions", {
            **body, "stream": True, "stream_options": {"include_usage": True}}, timeout=300)
        assert status == 200 and done, events
        errors = [e for e in events if "error" in e]
        assert not errors, errors
        assert all(e["choices"][0].get("stop_reason") != "recomputed"
                   for e in events if e["choices"])
        return events[-1]["usage"]["completion_tokens"]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(run, range(8))) == [200] * 8
    assert counter(d, "vllm:num_preemptions_total") > 0, "nothing was given back"
    assert drained(p, d)


def test_a_decode_with_hanging_loads_bounds_its_backlog(cluster):
    # A "prefill" that accepts connections and never answers: every load waits for its timeout.
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)
    try:
        d = cluster.serve(*kv_flags("kv_consumer", kv_load_timeout=4), "--max-num-seqs", "1")
        prompt = list(range(300, 340))
        params = {"do_remote_prefill": True, "do_remote_decode": False,
                  "remote_engine_id": "gone", "remote_request_id": "x",
                  "remote_host": "127.0.0.1", "remote_port": hole.getsockname()[1],
                  "remote_block_ids": [[1, 2, 3]], "remote_block_size": 16,
                  "remote_num_prompt_tokens": len(prompt), "kv_lease_id": 1,
                  "kv_lease_epoch": 1, "kv_lease_duration": 30}
        want = greedy_ids(d.base_url, prompt, 8)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            first = [pool.submit(post_json, d.base_url, "/v1/completions", {
                "prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True,
                "logprobs": 0, "return_tokens_as_token_ids": True, "kv_transfer_params": params},
                None, 60) for _ in range(2)]
            assert wait_for(lambda: counter(d, "kestrel:kv_transfer_loads_pending") == 2, 10)
            status, answer = post_json(d.base_url, "/v1/completions", {
                "prompt": prompt, "max_tokens": 8, "kv_transfer_params": params})
            assert status == 503, answer
            assert answer["error"]["type"] == "ServiceUnavailableError"
            # The two waiting ones time out and prefill locally: right answers.
            for f in first:
                status, answer = f.result(timeout=60)
                assert status == 200, answer
                assert tokens_of(answer) == want
        assert counter(d, "kestrel:kv_transfer_recomputes_total") == 2
        assert drained(d)
    finally:
        hole.close()
