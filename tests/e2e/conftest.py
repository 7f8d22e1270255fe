"""Fixtures for the `kestrel serve` end-to-end tests.

Run: KESTREL_BIN=/path/to/kestrel python3 -m pytest -q tests/e2e
Env: KESTREL_BIN (default <repo>/build/src/kestrel), KESTREL_SHARED (default <repo>/../shared),
KESTREL_MODELS (directory holding SmolLM2-135M-Instruct.Q4_1.gguf; default ~/.cache/kestrel/models),
KESTREL_REQUIRE_TEST_DATA.
Every test is skipped when the model file is missing, and the session fails instead when
KESTREL_REQUIRE_TEST_DATA is set (to anything but "" or "0"), as scripts/test.sh does.
"""

import os
import subprocess

import openai
import pytest

from kestrel_e2e import KESTREL_BIN, MODEL_PATH, Server, is_test_data_required


def pytest_collection_modifyitems(config, items):
    if MODEL_PATH.is_file():
        return
    if is_test_data_required():
        pytest.exit(f"model file {MODEL_PATH} is missing and KESTREL_REQUIRE_TEST_DATA is set: "
                    "no e2e test can run (scripts/fetch-default-model.sh)", returncode=1)
    skip = pytest.mark.skip(reason=f"model file {MODEL_PATH} is missing")
    for item in items:
        item.add_marker(skip)


def _start(extra_args, model_path=MODEL_PATH, env=None, **where):
    assert KESTREL_BIN.is_file(), f"kestrel binary not found at {KESTREL_BIN} (set KESTREL_BIN)"
    return Server(extra_args, model_path, env, **where)


def _stop(server):
    try:
        rc = server.terminate()
        assert rc == 0, f"kestrel serve exit code {rc} after SIGTERM:\n{server.log()[-4000:]}"
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def server():
    """The shared server (served under the model path, as `vllm serve MODEL` does)."""
    srv = _start([])
    yield srv
    _stop(srv)


@pytest.fixture(scope="session")
def base_url(server):
    return server.base_url


@pytest.fixture(scope="session")
def model(server):
    return server.model


@pytest.fixture(scope="session")
def client(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key="EMPTY", max_retries=0, timeout=120)


@pytest.fixture
def start_server():
    """Factory: start_server(*flags, model_path=..., env=..., port=..., host=..., netns=...) starts
    another server with extra flags (on the default model unless told) and environment variables
    (where: kestrel_e2e.Server); each is stopped (SIGTERM, exit code 0 asserted) when the test
    ends."""
    started = []

    def start(*flags, model_path=MODEL_PATH, env=None, **where):
        srv = _start(list(flags), model_path, env, **where)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        _stop(srv)


@pytest.fixture
def netns():
    """A network namespace joined to this one by a veth pair: (namespace, this side's address,
    the namespace's address)."""
    tag = f"k{os.getpid() % 100000}"
    ns, host_if, ns_if = f"kestrel-{tag}", f"kh{tag}", f"kn{tag}"
    octet = 16 + os.getpid() % 200
    head_ip, node_ip = f"10.251.{octet}.1", f"10.251.{octet}.2"
    made = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot create a network namespace here: {made.stderr.strip()}")
    try:
        for cmd in (["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if],
                    ["ip", "link", "set", ns_if, "netns", ns],
                    ["ip", "addr", "add", f"{head_ip}/30", "dev", host_if],
                    ["ip", "link", "set", host_if, "up"],
                    ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{node_ip}/30", "dev", ns_if],
                    ["ip", "netns", "exec", ns, "ip", "link", "set", ns_if, "up"],
                    ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"]):
            subprocess.run(cmd, check=True, capture_output=True)
        yield ns, head_ip, node_ip
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
