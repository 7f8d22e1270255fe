"""The curl commands of the deployment guides' service and functional verification sections
(../shared/seeds/*.md), sent as written to Kestrel serving the default model under the guides'
model names. Each must answer 200 with the documented shape; the one image request gets a clear
400, since the default model is text-only."""

import json
import re

import pytest

from kestrel_e2e import KESTREL_SHARED, Server, request

SEEDS = sorted((KESTREL_SHARED / "seeds").glob("*.md"))


def curl_commands():
    """(seed file, method, path, body or None) for every curl command in the guides."""
    found = []
    for seed in SEEDS:
        lines = seed.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].lstrip().startswith("curl "):
                i += 1
                continue
            cmd = lines[i]
            while cmd.rstrip().endswith("\\") or cmd.count("'") % 2 or _open_double(cmd):
                i += 1
                if i >= len(lines):
                    break
                cmd = cmd.rstrip().rstrip("\\") + "\n" + lines[i]
            i += 1
            url = re.search(r"(?:https?://([^/\s\"']+)|\$SERVICE_URL)(/[\w/.-]*)", cmd)
            if not url or "proxy" in (url.group(1) or ""):
                continue  # the PD proxy's own endpoints are not the server's
            body = None
            single = re.search(r"-d\s+'(.*?)'", cmd, re.S)
            double = re.search(r'-d\s+"(.*?)"\s*(?:\||$)', cmd, re.S)
            if single:
                body = single.group(1)
            elif double:
                body = double.group(1).replace('\\"', '"').replace("${IMAGE_URL}", "http://x/y.png")
            method = "POST" if body is not None else "GET"
            found.append((seed.name, method, url.group(2), body))
    return found


def _open_double(cmd):
    """True while a -d "..." body has not been closed yet."""
    m = re.search(r'-d\s+"', cmd)
    return bool(m) and cmd[m.end():].replace('\\"', "").count('"') == 0


COMMANDS = curl_commands()
MODEL_NAMES = sorted(
    {json.loads(b)["model"] for _, _, _, b in COMMANDS if b and '"model"' in b and json.loads(b)}
)


def test_the_guides_have_curl_commands():
    paths = {path for _, _, path, _ in COMMANDS}
    assert {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health"} <= paths
    assert MODEL_NAMES, "the guides' requests name their models"


@pytest.fixture(scope="module")
def seed_server():
    srv = Server(["--served-model-name", *MODEL_NAMES])
    yield srv
    try:
        assert srv.terminate() == 0, srv.log()[-4000:]
    finally:
        srv.cleanup()


def unique_commands():
    seen, out = set(), []
    for seed, method, path, body in COMMANDS:
        key = (method, path, json.dumps(json.loads(body), sort_keys=True) if body else None)
        if key not in seen:
            seen.add(key)
            out.append((seed, method, path, body))
    return out


@pytest.mark.parametrize("seed,method,path,body", unique_commands())
def test_seed_curl(seed_server, seed, method, path, body):
    payload = json.loads(body) if body else None
    status, _, data = request(seed_server.base_url, method, path, payload, timeout=180)
    has_image = payload is not None and "image_url" in json.dumps(payload)
    if has_image:
        assert status == 400, data
        err = json.loads(data)["error"]
        assert err["code"] == 400 and "image" in err["message"].lower()
        return
    if payload is not None and payload.get("tools"):
        # Automatic tool choice needs --enable-auto-tool-choice and a --tool-call-parser (issue 8);
        # without them vLLM also answers 400.
        assert status == 400, data
        err = json.loads(data)["error"]
        assert err["param"] == "tool_choice" and "tool" in err["message"]
        return
    assert status == 200, (seed, path, data[:500])
    if path == "/health":
        return
    j = json.loads(data)
    if path == "/v1/models":
        assert {m["id"] for m in j["data"]} == set(MODEL_NAMES)
        assert all(m["object"] == "model" for m in j["data"])
    elif path == "/v1/chat/completions":
        msg = j["choices"][0]["message"]
        assert j["object"] == "chat.completion" and j["model"] == payload["model"]
        assert msg["role"] == "assistant" and isinstance(msg["content"], str)
        assert len(msg["content"]) > 0  # the guides check `.content | length > 0` with jq
        assert j["usage"]["completion_tokens"] <= payload.get(
            "max_completion_tokens", payload.get("max_tokens", 10**9))
    elif path == "/v1/completions":
        assert j["object"] == "text_completion" and j["model"] == payload["model"]
        assert isinstance(j["choices"][0]["text"], str) and j["choices"][0]["text"]
        assert j["choices"][0]["finish_reason"] in ("stop", "length")
    else:
        pytest.fail(f"no shape check for {path}")
