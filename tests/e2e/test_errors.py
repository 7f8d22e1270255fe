"""Invalid requests get vLLM's OpenAI error bodies and status codes, and leave the server healthy."""

import json

import openai
import pytest

from kestrel_e2e import post_json, request

PROMPT = "The capital of France is"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def assert_error(status, body, code, param=None, contains=()):
    assert status == code, body
    err = body["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"]
    assert err["code"] == code
    assert err["type"] == {400: "BadRequestError", 404: "NotFoundError"}[code]
    if param is not None:
        assert err["param"] == param, err
    for word in contains:
        assert word in err["message"], err
    return err


def names_param(err, name):
    return err["param"] == name or name in err["message"]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_malformed_json(base_url, path):
    status, _, data = request(base_url, "POST", path, b'{"model": "x", "prompt": ')
    assert_error(status, json.loads(data), 400)


def test_body_not_an_object(base_url):
    status, body = post_json(base_url, "/v1/completions", [1, 2, 3])
    assert_error(status, body, 400)


@pytest.mark.parametrize("field,value", [("max_tokens", "ten"), ("temperature", "hot"), ("n", 1.5),
                                         ("prompt", 42), ("stop", 7), ("logprobs", "yes")])
def test_wrong_type_names_param(base_url, model, field, value):
    body = {"model": model, "prompt": PROMPT, "max_tokens": 2, field: value}
    status, resp = post_json(base_url, "/v1/completions", body)
    err = assert_error(status, resp, 400)
    assert names_param(err, field), err


def test_chat_messages_wrong_type(base_url, model):
    status, resp = post_json(base_url, "/v1/chat/completions", {"model": model, "messages": "hi"})
    err = assert_error(status, resp, 400)
    assert names_param(err, "messages"), err


def test_missing_prompt(base_url, model):
    status, resp = post_json(base_url, "/v1/completions", {"model": model, "max_tokens": 2})
    err = assert_error(status, resp, 400)
    assert names_param(err, "prompt"), err


@pytest.mark.parametrize("field,value", [("temperature", -1), ("top_p", 0), ("top_p", 1.5), ("n", 0),
                                         ("max_tokens", -3)])
def test_out_of_range_values(base_url, model, field, value):
    status, resp = post_json(base_url, "/v1/completions",
                             {"model": model, "prompt": PROMPT, "max_tokens": 2, field: value})
    err = assert_error(status, resp, 400)
    assert names_param(err, field), err


def test_unknown_model_404(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="x", prompt=PROMPT, max_tokens=2)
    err = info.value.body
    assert err["message"] == "The model `x` does not exist."
    assert err["type"] == "NotFoundError"
    assert err["code"] == 404


def test_unknown_model_404_chat(base_url):
    status, resp = post_json(base_url, "/v1/chat/completions", {"model": "nope", "messages": QUESTION})
    assert_error(status, resp, 404, contains=["The model `nope` does not exist."])


def test_prompt_longer_than_context(base_url, model):
    ids = [(i * 37) % 10000 + 100 for i in range(3000)]
    status, resp = post_json(base_url, "/v1/completions", {"model": model, "prompt": ids, "max_tokens": 4})
    err = assert_error(status, resp, 400, param="input_tokens",
                       contains=["3000", "2048", "Please reduce the length"])
    assert "context length" in err["message"]


def test_prompt_plus_max_tokens_over_context(base_url, model):
    ids = [(i * 37) % 10000 + 100 for i in range(2000)]
    status, resp = post_json(base_url, "/v1/completions", {"model": model, "prompt": ids, "max_tokens": 100})
    assert_error(status, resp, 400, contains=["2000", "100", "2048", "Please reduce the length"])


@pytest.mark.parametrize("path,extra,param", [
    ("/v1/completions", {"prompt": ""}, "prompt"),
    ("/v1/completions", {"prompt": []}, "prompt"),
    ("/v1/completions", {"prompt": PROMPT, "logprobs": 25}, "logprobs"),  # vLLM's --max-logprobs is 20
    ("/v1/chat/completions", {"messages": []}, "messages"),
    ("/v1/chat/completions", {"messages": QUESTION, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
])
def test_empty_inputs_and_logprob_limits(base_url, model, path, extra, param):
    status, resp = post_json(base_url, path, {"model": model, "max_tokens": 2, **extra})
    err = assert_error(status, resp, 400)
    assert names_param(err, param), err


def test_stream_options_without_stream(base_url, model):
    status, resp = post_json(base_url, "/v1/completions",
                             {"model": model, "prompt": PROMPT, "max_tokens": 2,
                              "stream_options": {"include_usage": True}})
    err = assert_error(status, resp, 400)
    assert names_param(err, "stream_options") or "stream" in err["message"], err


def test_top_logprobs_without_logprobs(base_url, model):
    status, resp = post_json(base_url, "/v1/chat/completions",
                             {"model": model, "messages": QUESTION, "max_completion_tokens": 2,
                              "top_logprobs": 2})
    err = assert_error(status, resp, 400)
    assert "logprobs" in (err["param"] or "") + err["message"], err


def test_continue_final_message_with_generation_prompt(base_url, model):
    msgs = QUESTION + [{"role": "assistant", "content": "The capital"}]
    status, resp = post_json(base_url, "/v1/chat/completions",
                             {"model": model, "messages": msgs, "max_completion_tokens": 2,
                              "continue_final_message": True, "add_generation_prompt": True})
    assert_error(status, resp, 400)


def test_continue_final_message_works(base_url, model):
    msgs = QUESTION + [{"role": "assistant", "content": "The capital of France is"}]
    status, resp = post_json(base_url, "/v1/chat/completions",
                             {"model": model, "messages": msgs, "max_completion_tokens": 4, "temperature": 0,
                              "continue_final_message": True, "add_generation_prompt": False})
    assert status == 200, resp
    assert "Paris" in resp["choices"][0]["message"]["content"]


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]


@pytest.mark.parametrize("path,extra", [
    ("/v1/chat/completions", {"tools": TOOLS, "tool_choice": "auto"}),
    ("/v1/chat/completions", {"tools": TOOLS}),  # tool_choice defaults to "auto" when tools are given
    ("/v1/chat/completions", {"response_format": {"type": "structural_tag"}}),
    ("/v1/chat/completions", {"response_format": {"type": "json_schema",
                                                  "json_schema": {"name": "x", "schema": {"not": {}}}}}),
    ("/v1/chat/completions", {"prompt_logprobs": 1}),
    ("/v1/completions", {"max_tokens": 0}),  # without echo there is nothing to return
    ("/v1/chat/completions", {"max_completion_tokens": 0}),
])
def test_unsupported_features_400(base_url, model, path, extra):
    body = {"model": model, "max_tokens": 2, **extra}
    body.update({"prompt": PROMPT} if path == "/v1/completions" else {"messages": QUESTION})
    status, resp = post_json(base_url, path, body)
    assert_error(status, resp, 400)


def test_tools_with_tool_choice_none_are_accepted(base_url, model):
    status, resp = post_json(base_url, "/v1/chat/completions",
                             {"model": model, "messages": QUESTION, "max_completion_tokens": 2,
                              "tools": TOOLS, "tool_choice": "none"})
    assert status == 200, resp
    assert resp["choices"][0]["finish_reason"] == "length"
    assert not resp["choices"][0]["message"].get("tool_calls")


def test_tool_choice_names_unknown_function(base_url, model):
    status, resp = post_json(base_url, "/v1/chat/completions",
                             {"model": model, "messages": QUESTION, "max_completion_tokens": 2, "tools": TOOLS,
                              "tool_choice": {"type": "function", "function": {"name": "not_there"}}})
    assert_error(status, resp, 400)


def test_unknown_route_404(base_url):
    status, _, _ = request(base_url, "GET", "/v1/nothing-here")
    assert status == 404


def test_still_healthy_after_errors(client, base_url, model):
    status, _, body = request(base_url, "GET", "/health")
    assert status == 200 and body == b""
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=4, temperature=0)
    assert "Paris" in r.choices[0].text
