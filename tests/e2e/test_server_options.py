"""/v1/models, /version, --api-key and --served-model-name."""

import openai
import pytest

from kestrel_e2e import get_json, post_json, request

PROMPT = "The capital of France is"


def test_models_list(client, model):
    models = client.models.list()
    assert models.object == "list"
    assert [m.id for m in models.data] == [model]
    m = models.data[0]
    assert m.object == "model"
    assert m.owned_by
    assert isinstance(m.created, int) and m.created > 1_600_000_000
    extra = m.model_extra
    assert extra["max_model_len"] == 2048
    assert extra["root"] == model
    assert extra["permission"] == []


def test_version(base_url):
    status, body = get_json(base_url, "/version")
    assert status == 200
    assert isinstance(body["version"], str) and body["version"]


def test_health_is_empty_200(base_url):
    status, _, body = request(base_url, "GET", "/health")
    assert status == 200
    assert body == b""


def test_api_key(start_server):
    srv = start_server("--api-key", "sekret")
    url = srv.base_url
    body = {"model": srv.model, "prompt": PROMPT, "max_tokens": 3, "temperature": 0}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sekret"},
                    {"Authorization": "Bearer sekret2"}):
        status, resp = post_json(url, "/v1/completions", body, headers=headers)
        assert status == 401, (headers, resp)
        assert resp == {"error": "Unauthorized"}
        status, resp = get_json(url, "/v1/models", headers=headers)
        assert status == 401, headers
    # Routes outside /v1 stay open.
    assert request(url, "GET", "/health")[0] == 200
    assert request(url, "GET", "/metrics")[0] == 200

    bad = openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    good = openai.OpenAI(base_url=url + "/v1", api_key="sekret", max_retries=0)
    assert [m.id for m in good.models.list().data] == [srv.model]
    r = good.completions.create(model=srv.model, prompt=PROMPT, max_tokens=3, temperature=0)
    assert "Paris" in r.choices[0].text
    r = good.chat.completions.create(model=srv.model, max_completion_tokens=2,
                                     messages=[{"role": "user", "content": "Hi"}])
    assert r.choices[0].message.content


def test_served_model_names(start_server):
    srv = start_server("--served-model-name", "alpha", "beta")
    c = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="EMPTY", max_retries=0)
    assert [m.id for m in c.models.list().data] == ["alpha", "beta"]
    for name in ("alpha", "beta"):
        r = c.completions.create(model=name, prompt=PROMPT, max_tokens=3, temperature=0)
        assert r.model == name
        assert "Paris" in r.choices[0].text
        r = c.chat.completions.create(model=name, max_completion_tokens=2,
                                      messages=[{"role": "user", "content": "Hi"}])
        assert r.model == name
    # The model path is not a served name any more.
    with pytest.raises(openai.NotFoundError):
        c.completions.create(model=srv.model, prompt=PROMPT, max_tokens=2)
    # A request without a model uses the first served name (vLLM makes `model` optional).
    status, resp = post_json(srv.base_url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
    assert status == 200, resp
    assert resp["model"] == "alpha"


def _listeners(port):
    """Listening TCP sockets on `port` (this network namespace's /proc/net/tcp and tcp6)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].split(":")[1], 16) == port and fields[3] == "0A":  # LISTEN
                count += 1
    return count


def test_api_server_count_runs_that_many_front_ends_on_one_port(start_server):
    srv = start_server("--api-server-count", "3")
    assert "3 API servers share port" in srv.log()
    assert _listeners(srv.port) == 3
    # Many connections, each its own: the kernel spreads them over the listeners; all answer.
    for i in range(12):
        status, body = post_json(srv.base_url, "/v1/completions", {
            "model": srv.model, "prompt": PROMPT, "max_tokens": 2, "temperature": 0})
        assert status == 200, body
    status, _, text = request(srv.base_url, "GET", "/metrics")
    assert status == 200
    assert "vllm:request_success_total" in text.decode()
