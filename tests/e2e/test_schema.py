"""Responses validate against the OpenAI OpenAPI document's schemas (KESTREL_SHARED/testdata/openai).

The document is OpenAPI 3.1 but still carries 3.0-style `nullable: true` in places; those are rewritten
to JSON-Schema null unions before validating, so the check is exact. Extra fields (vLLM's stop_reason,
kv_transfer_params, ...) are allowed by the schemas (no additionalProperties: false on these objects).
One deliberate difference: vLLM's ChatMessage serializes `annotations: null` and `function_call: null`,
which the OpenAI schema (not nullable there) rejects; Kestrel copies vLLM, so those two nulls are dropped
before validating."""

import copy
import functools

import jsonschema
import pytest
import yaml

from kestrel_e2e import OPENAPI_YAML, is_test_data_required, post_json, sse_post


def _nullable_to_json_schema(node):
    if isinstance(node, list):
        return [_nullable_to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: _nullable_to_json_schema(v) for k, v in node.items()}
    if node.pop("nullable", False):
        if isinstance(node.get("type"), str) and "$ref" not in node:
            node["type"] = [node["type"], "null"]
            if "enum" in node:
                node["enum"] = [*node["enum"], None]
        else:
            node = {"anyOf": [node, {"type": "null"}]}
    return node


@functools.cache
def _document():
    if not OPENAPI_YAML.is_file():
        if is_test_data_required():
            pytest.fail(f"{OPENAPI_YAML} is missing and KESTREL_REQUIRE_TEST_DATA is set")
        pytest.skip(f"{OPENAPI_YAML} is missing")
    with open(OPENAPI_YAML) as f:
        return _nullable_to_json_schema(yaml.safe_load(f))


def validate(instance, schema_name):
    # The whole document is the root so that "#/components/schemas/..." references resolve.
    root = copy.copy(_document())
    root["$ref"] = f"#/components/schemas/{schema_name}"
    jsonschema.Draft202012Validator(root).validate(instance)


VLLM_NULL_MESSAGE_FIELDS = ("annotations", "function_call")
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def test_schema_rewrite_rejects_bad_documents():
    # The validator itself must be able to fail.
    with pytest.raises(jsonschema.ValidationError):
        validate({"id": "x", "object": "text_completion", "created": "yesterday", "model": "m", "choices": []},
                 "CreateCompletionResponse")


def test_completion_response_schema(base_url, model):
    status, resp = post_json(base_url, "/v1/completions",
                             {"model": model, "prompt": "The capital of France is", "max_tokens": 4,
                              "temperature": 0, "logprobs": 2})
    assert status == 200, resp
    validate(resp, "CreateCompletionResponse")


def test_chat_response_schema(base_url, model):
    status, resp = post_json(base_url, "/v1/chat/completions",
                             {"model": model, "messages": QUESTION, "max_completion_tokens": 4, "temperature": 0,
                              "logprobs": True, "top_logprobs": 2})
    assert status == 200, resp
    for choice in resp["choices"]:
        for field in VLLM_NULL_MESSAGE_FIELDS:
            if field in choice["message"] and choice["message"][field] is None:
                del choice["message"][field]
    validate(resp, "CreateChatCompletionResponse")


def test_chat_stream_chunk_schema(base_url, model):
    status, _, events, done, _ = sse_post(base_url, "/v1/chat/completions",
                                          {"model": model, "messages": QUESTION, "max_completion_tokens": 4,
                                           "temperature": 0, "stream": True,
                                           "stream_options": {"include_usage": True}})
    assert status == 200 and done
    assert len(events) >= 3
    for event in events:
        validate(event, "CreateChatCompletionStreamResponse")


def test_completion_stream_chunk_schema(base_url, model):
    # OpenAI streams completions as CreateCompletionResponse objects.
    status, _, events, done, _ = sse_post(base_url, "/v1/completions",
                                          {"model": model, "prompt": "The capital of France is",
                                           "max_tokens": 4, "temperature": 0, "stream": True,
                                           "logprobs": 1})
    assert status == 200 and done
    assert len(events) >= 2
    for event in events:
        # Chunks before the last carry finish_reason null (as vLLM and OpenAI's own API stream
        # them); the schema, written for whole responses, wants a string.
        for choice in event["choices"]:
            if choice["finish_reason"] is None:
                choice["finish_reason"] = "stop"
        # vLLM serialises completion chunks with every field, so usage is null until the end.
        if event.get("usage", 0) is None:
            del event["usage"]
        validate(event, "CreateCompletionResponse")


def test_models_list_schema(base_url):
    from kestrel_e2e import get_json
    status, resp = get_json(base_url, "/v1/models")
    assert status == 200, resp
    validate(resp, "ListModelsResponse")


@pytest.mark.parametrize("body", [
    "{not json",
    {"model": "no-such-model", "prompt": "x"},
    {"prompt": "x", "temperature": -1},
])
def test_error_body_schema(base_url, body):
    status, resp = post_json(base_url, "/v1/completions", body)
    assert status in (400, 404), resp
    # vLLM sends the HTTP status as an integer `code`; the OpenAI schema types it as a string.
    # Kestrel keeps vLLM's integer (clients of vllm serve read it), so it is checked, then mapped.
    assert resp["error"]["code"] == status
    resp["error"]["code"] = str(resp["error"]["code"])
    validate(resp, "ErrorResponse")
