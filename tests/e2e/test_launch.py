"""`kestrel launch` as the guides run launch_online_dp.py: one server per local data-parallel rank
through a run_dp_template.sh that receives the 7 positional arguments (devices, port, dp size,
dp rank, dp address, dp rpc port, tp size); each rank gets its share of the cores (here: one of
two), serves as that rank behind an external load balancer, and SIGTERM to the launcher stops
every rank and the launcher with status 0; a rank that fails stops the others and the launcher
exits non-zero. The same across a network namespace, each rank a TP group of two. With
`--enable-expert-parallel` on a MoE fixture (the guides' PD groups) the two servers share their
experts — rank 0's server hosts the group at --dp-address:--dp-rpc-port — and each answers
transformers' greedy tokens."""

import concurrent.futures
import json
import os
import signal
import subprocess
import time

from kestrel_e2e import (KESTREL_BIN, MODEL_PATH, REPO, free_port, metric, post_json, request,
                         scrape, wait_for)

TEMPLATE = """#!/bin/bash
# As the guides' run_dp_template.sh, with kestrel serve; ASCEND_RT_VISIBLE_DEVICES=$1 there.
echo "$@" > "{dir}/args-$4.txt"
grep Cpus_allowed_list /proc/self/status > "{dir}/cpus-$4.txt"
{fail}
"{kestrel}" serve "{model}" --host {host} --port $2 --data-parallel-size $3 \\
  --data-parallel-rank $4 --data-parallel-address $5 --data-parallel-rpc-port $6 \\
  --tensor-parallel-size $7 --max-model-len {max_len} --kv-cache-memory 128M {extra}
"""
MOE = REPO / "tests" / "fixtures" / "models" / "qwen3_moe_bf16"


def start_launch(tmp_path, fail="", host="127.0.0.1", tp=1, netns=None, port=None,
                 model=MODEL_PATH, extra="", rpc_port=None):
    template = tmp_path / "run_dp_template.sh"
    template.write_text(TEMPLATE.format(dir=tmp_path, fail=fail, kestrel=KESTREL_BIN, model=model,
                                        host=host, extra=extra,
                                        max_len=256 if model != MODEL_PATH else 1024))
    port = port or free_port(2)
    rpc_port = rpc_port or free_port(2)
    log = open(tmp_path / "launch.log", "w")
    cmd = [str(KESTREL_BIN), "launch", "--dp-size", "2", "--tp-size", str(tp),
           "--dp-address", host, "--dp-rpc-port", str(rpc_port), "--vllm-start-port", str(port),
           "--template", str(template)]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    return proc, port


def healthy(port, host="127.0.0.1"):
    try:
        return request(f"http://{host}:{port}", "GET", "/health", timeout=2)[0] == 200
    except OSError:
        return False


def test_one_server_per_rank_on_its_cores_and_sigterm_stops_all(tmp_path):
    rpc = free_port(2)
    proc, port = start_launch(tmp_path, rpc_port=rpc)
    try:
        assert wait_for(lambda: healthy(port) and healthy(port + 1), 60), \
            (tmp_path / "launch.log").read_text()
        for rank in (0, 1):
            args = (tmp_path / f"args-{rank}.txt").read_text().split()
            assert args[1:] == [str(port + rank), "2", str(rank), "127.0.0.1", str(rpc), "1"]
            cpus = (tmp_path / f"cpus-{rank}.txt").read_text().split()[-1]
            assert cpus == args[0], (cpus, args)  # its share: one CPU each on two
        assert (tmp_path / "args-0.txt").read_text().split()[0] != \
            (tmp_path / "args-1.txt").read_text().split()[0] or os.cpu_count() == 1
        base = f"http://127.0.0.1:{port + 1}"
        status, body = post_json(base, "/v1/completions", {
            "model": str(MODEL_PATH), "prompt": "Hello", "max_tokens": 4, "temperature": 0})
        assert status == 200, body
        assert metric(scrape(base), "vllm:generation_tokens_total", engine="1") == 4
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (tmp_path / "launch.log").read_text()
        assert not healthy(port) and not healthy(port + 1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_rank_that_fails_stops_the_others_and_the_launcher_fails(tmp_path):
    proc, port = start_launch(tmp_path, fail='[ "$4" = 1 ] && { sleep 3; exit 3; }')
    try:
        assert wait_for(lambda: healthy(port), 60), (tmp_path / "launch.log").read_text()
        start = time.monotonic()
        rc = proc.wait(timeout=60)
        assert rc == 1
        log = (tmp_path / "launch.log").read_text()
        assert "data-parallel rank 1" in log and "exited with status 3" in log, log
        assert time.monotonic() - start < 40
        assert wait_for(lambda: not healthy(port), 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_launch_in_another_network_namespace_two_tp_ranks_each(tmp_path, netns):
    """External load balancing across a veth pair: the launcher and its ranks (each a TP group
    of 2) in the namespace, the client here."""
    ns, _, node_ip = netns
    proc, port = start_launch(tmp_path, host=node_ip, tp=2, netns=ns, port=9000)
    try:
        assert wait_for(lambda: healthy(port, node_ip) and healthy(port + 1, node_ip), 60), \
            (tmp_path / "launch.log").read_text()
        for rank in (0, 1):
            base = f"http://{node_ip}:{port + rank}"
            status, body = post_json(base, "/v1/completions", {
                "model": str(MODEL_PATH), "prompt": "Hello", "max_tokens": 4, "temperature": 0})
            assert status == 200, body
            assert metric(scrape(base), "vllm:generation_tokens_total", engine=str(rank)) == 4
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (tmp_path / "launch.log").read_text()
        assert not healthy(port, node_ip) and not healthy(port + 1, node_ip)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_launch_with_expert_parallelism_shares_the_experts_between_the_servers(tmp_path):
    golden = json.loads((MOE / "golden.json").read_text())
    prompts, want = golden["prompts"], golden["greedy"]
    proc, port = start_launch(tmp_path, model=MOE, extra="--enable-expert-parallel",
                              rpc_port=free_port(2))
    try:
        assert wait_for(lambda: healthy(port) and healthy(port + 1), 60), \
            (tmp_path / "launch.log").read_text()
        assert "the group meets at tcp://127.0.0.1:" in (tmp_path / "launch.log").read_text()

        def greedy(job):
            rank, prompt = job
            status, body = post_json(f"http://127.0.0.1:{port + rank}", "/v1/completions", {
                "model": str(MOE), "prompt": prompt, "max_tokens": len(want[0]),
                "temperature": 0, "ignore_eos": True, "logprobs": 0})
            assert status == 200, body
            return [int(t.split(":")[1]) for t in body["choices"][0]["logprobs"]["tokens"]]

        # Both servers at once, and each alone (the other stepping empty batches).
        jobs = [(rank, p) for rank in (0, 1) for p in prompts]
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            assert list(pool.map(greedy, jobs)) == want + want
        for rank in (0, 1):
            assert greedy((rank, prompts[0])) == want[0]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (tmp_path / "launch.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
