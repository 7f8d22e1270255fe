"""response_format json_schema / json_object: the grammar-constrained output of the default model
parses and validates, at temperature 1 over many seeds (a 135M model left alone would not write
valid JSON); schemas Kestrel cannot enforce are a 400."""

import json

import jsonschema

from kestrel_e2e import post_json, sse_post

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "city": {"enum": ["Paris", "Berlin", "Rome"]},
        "score": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3},
        "member": {"type": "boolean"},
    },
    "required": ["name", "age", "city"],
}
MESSAGES = [{"role": "user", "content": "Describe a person as JSON."}]


def schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}


def test_json_schema_output_always_validates(base_url, model):
    outputs = []
    for seed in range(5):
        status, r = post_json(base_url, "/v1/chat/completions", {
            "model": model, "messages": MESSAGES, "temperature": 1.0, "seed": seed, "n": 10,
            "max_completion_tokens": 400, "response_format": schema_format(SCHEMA)}, timeout=600)
        assert status == 200, r
        for c in r["choices"]:
            assert c["finish_reason"] == "stop", c
            outputs.append(c["message"]["content"])
    assert len(outputs) == 50
    for text in outputs:
        doc = json.loads(text)
        jsonschema.validate(doc, SCHEMA)
    assert len(set(outputs)) > 10  # sampling still varies inside the grammar


def test_json_object_and_completions(base_url, model):
    # Free-form JSON has no length bound (a model may list numbers until max_tokens), so only
    # finished outputs must parse; each is an object.
    finished = 0
    for seed in range(6):
        status, r = post_json(base_url, "/v1/completions", {
            "model": model, "prompt": "JSON:", "temperature": 0.7, "seed": seed,
            "max_tokens": 300, "response_format": {"type": "json_object"}}, timeout=600)
        assert status == 200, r
        c = r["choices"][0]
        assert c["text"].lstrip().startswith("{"), c
        if c["finish_reason"] == "stop":
            finished += 1
            assert isinstance(json.loads(c["text"]), dict)
    assert finished >= 3


def test_streamed_json_schema_matches_its_whole_form(base_url, model):
    body = {"model": model, "messages": MESSAGES, "temperature": 0, "max_completion_tokens": 400,
            "response_format": schema_format(SCHEMA)}
    status, whole = post_json(base_url, "/v1/chat/completions", body, timeout=600)
    assert status == 200, whole
    status, _, events, done, _ = sse_post(base_url, "/v1/chat/completions",
                                          {**body, "stream": True}, timeout=600)
    assert status == 200 and done
    text = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    jsonschema.validate(json.loads(text), SCHEMA)


def test_unenforceable_formats_are_400(base_url, model):
    for fmt in (schema_format({"type": "string", "pattern": "a+"}),
                {"type": "json_schema", "json_schema": {"name": "x"}},
                {"type": "structural_tag", "structures": [], "triggers": []}):
        status, r = post_json(base_url, "/v1/chat/completions", {
            "model": model, "messages": MESSAGES, "response_format": fmt})
        assert status == 400, (fmt, r)
        assert r["error"]["param"] == "response_format", r
