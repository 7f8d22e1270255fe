"""Helpers for the end-to-end tests of `kestrel serve`: paths, a server process handle, raw HTTP/SSE
calls (http.client, so the tests see exactly what goes over the wire) and Prometheus text parsing."""

import fcntl
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KESTREL_BIN = Path(os.environ.get("KESTREL_BIN", REPO / "build" / "src" / "kestrel"))
KESTREL_SHARED = Path(os.environ.get("KESTREL_SHARED", REPO.parent / "shared"))
MODELS_DIR = Path(os.environ.get("KESTREL_MODELS", Path.home() / ".cache" / "kestrel" / "models"))
MODEL_PATH = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
OPENAPI_YAML = KESTREL_SHARED / "testdata" / "openai" / "openapi.yaml"


def is_test_data_required():
    """KESTREL_REQUIRE_TEST_DATA set, non-empty and not "0" (scripts/test.sh, hence CI): data from
    outside the repository (the default model, KESTREL_SHARED) must be there, so a test missing it
    fails instead of skipping."""
    return os.environ.get("KESTREL_REQUIRE_TEST_DATA", "") not in ("", "0")


# Every server in the suite: small context and KV pool, two compute threads (CI has two cores).
BASE_FLAGS = ["--max-model-len", "2048", "--kv-cache-memory", "512M", "--threads", "2"]
STARTUP_TIMEOUT_S = 60
SHUTDOWN_TIMEOUT_S = 30


def _ephemeral_range():
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


# Ports handed out by any test process on this machine: one lock file per port under the temp
# directory, held (flock) until this process exits. CTest runs the e2e files in parallel, each in
# its own pytest process, so a set in one process would not keep two files off the same port.
_PORT_LOCK_DIR = Path(tempfile.gettempdir()) / "kestrel-e2e-ports"
_PORT_LOCKS = {}  # port -> the open lock file that reserves it


def _reserve(port):
    """Takes the machine-wide reservation of `port`; False if another live process holds it."""
    if port in _PORT_LOCKS:
        return False
    _PORT_LOCK_DIR.mkdir(exist_ok=True)
    fd = os.open(_PORT_LOCK_DIR / str(port), os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _PORT_LOCKS[port] = fd
    return True


def _release(ports):
    for q in ports:
        fd = _PORT_LOCKS.pop(q, None)
        if fd is not None:
            os.close(fd)


def free_port(n=1):
    """The first of n consecutive ports free on loopback now. They lie outside the kernel's
    ephemeral range (where the machine leaves room), so no client connection can take one between
    this choice and the server's bind (a server derives ports from a base: KV port + rank, RPC
    port + DP rank), and none is handed out twice while this process lives, to it or to any other
    test process on the machine."""
    low, high = _ephemeral_range()
    # Below the ephemeral range, else above it; a machine whose range covers nearly every port
    # leaves only the bind check.
    if low - n > 20000:
        span = (20000, low - n)
    elif high + 1 < 65536 - n:
        span = (high + 1, 65536 - n)
    else:
        span = (1024, 65536 - n)
    rng = random.Random()
    for _ in range(1000):
        base = rng.randrange(*span)
        ports = range(base, base + n)
        taken = []
        for q in ports:
            if not _reserve(q):
                break
            taken.append(q)
        if len(taken) < n:
            _release(taken)
            continue
        socks = []
        try:
            for q in ports:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", q))
        except OSError:
            _release(ports)
            continue
        finally:
            for s in socks:
                s.close()
        return base
    raise RuntimeError(f"no {n} consecutive free ports")


def greedy_tokens(base_url, model, prompt, n):
    """The ids of n greedy completion tokens of prompt (token ids or text), eos ignored (the
    logprobs name tokens "token_id:N", with a tokenizer or without one)."""
    status, body = post_json(base_url, "/v1/completions", {
        "model": model, "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True,
        "logprobs": 0, "return_tokens_as_token_ids": True})
    assert status == 200, body
    tokens = body["choices"][0]["logprobs"]["tokens"]
    assert all(t.startswith("token_id:") for t in tokens), tokens
    return [int(t.split(":")[1]) for t in tokens]


class Server:
    """One `kestrel serve` process; stderr/stdout go to a temp file so a full pipe never blocks it."""

    def __init__(self, extra_args=(), model_path=MODEL_PATH, env=None, port=None,
                 host="127.0.0.1", netns=None):
        """`port`: a given one (a restart on the same address); `netns`: run inside that network
        namespace, listening on `host` there."""
        self.port = port or free_port()
        self.host = host
        self.base_url = f"http://{self.host}:{self.port}"
        self.model = str(model_path)
        self._log = tempfile.NamedTemporaryFile(prefix="kestrel-e2e-", suffix=".log", delete=False)
        cmd = [str(KESTREL_BIN), "serve", self.model, "--host", self.host, "--port",
               str(self.port), *BASE_FLAGS, *extra_args]
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        self._wait_healthy()

    def log(self):
        return Path(self._log.name).read_text(errors="replace")

    def _wait_healthy(self):
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kestrel serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                status, _, _ = request(self.base_url, "GET", "/health", timeout=2)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.proc.kill()
        self.proc.wait()
        raise RuntimeError(f"kestrel serve not healthy after {STARTUP_TIMEOUT_S} s:\n{self.log()}")

    def terminate(self):
        """SIGTERM, wait for the graceful exit; returns the exit code (kills and returns None on timeout)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        finally:
            self._log.close()

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
        os.unlink(self._log.name)


def _conn(base_url, timeout):
    u = urllib.parse.urlsplit(base_url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)


def request(base_url, method, path, body=None, headers=None, timeout=60):
    """Returns (status, headers dict with lower-case keys, body bytes). `body` may be a dict (sent as
    JSON) or raw bytes/str (sent as is, for malformed-JSON tests)."""
    conn = _conn(base_url, timeout)
    try:
        hdrs = dict(headers or {})
        if body is not None:
            hdrs.setdefault("Content-Type", "application/json")
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            if isinstance(body, str):
                body = body.encode()
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def post_json(base_url, path, body, headers=None, timeout=60):
    """POST and decode the JSON answer; returns (status, parsed body)."""
    status, _, data = request(base_url, "POST", path, body, headers, timeout)
    return status, json.loads(data) if data else None


def get_json(base_url, path, headers=None):
    status, _, data = request(base_url, "GET", path, headers=headers)
    return status, json.loads(data) if data else None


def sse_post(base_url, path, body, headers=None, timeout=120):
    """POST a streaming request; returns (status, content-type, list of decoded events, saw_done,
    raw text). Events after [DONE] would be a protocol error, so they are collected too."""
    status, hdrs, data = request(base_url, "POST", path, body, headers, timeout)
    text = data.decode()
    events, saw_done = [], False
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), f"SSE block without 'data: ': {block!r}"
        payload = block[len("data: "):]
        if payload == "[DONE]":
            assert not saw_done, "two [DONE] markers"
            saw_done = True
            continue
        assert not saw_done, f"event after [DONE]: {payload!r}"
        events.append(json.loads(payload))
    assert text.endswith("\n\n"), f"stream does not end with a blank line: {text[-40:]!r}"
    return status, hdrs.get("content-type", ""), events, saw_done, text


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Prometheus text → list of (name, labels dict, float value)."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        labels = dict(_LABEL.findall(m.group(2) or ""))
        samples.append((m.group(1), labels, float(m.group(3))))
    return samples


def metric(samples, name, **labels):
    """Sum of the samples called `name` whose labels include `labels`; None if there is none."""
    hits = [v for n, ls, v in samples if n == name and all(ls.get(k) == w for k, w in labels.items())]
    return sum(hits) if hits else None


def scrape(base_url):
    status, hdrs, data = request(base_url, "GET", "/metrics")
    assert status == 200
    return parse_metrics(data.decode())


def wait_for(predicate, timeout=10.0, interval=0.1):
    """Polls predicate() until it returns a truthy value or the timeout passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
