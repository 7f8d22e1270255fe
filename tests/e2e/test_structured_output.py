"""response_format json_schema / json_object: the grammar-constrained output of the default model
parses and validates, at temperature 1 over many seeds (a 135M model left alone would not write
valid JSON); schemas Kestrel cannot enforce are a 400."""

import json
import re

import jsonschema
import pytest

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
    # finished outputs must parse; each is an object. How many finish depends on the sampled
    # paths, hence on the last bits of the logits: twelve samples, of which three must finish.
    finished = 0
    for seed in range(12):
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


# --- structured_outputs (vLLM's field): choice, regex, EBNF grammar, json, json_object ---------

def so_chat(base_url, model, so, **extra):
    body = {"model": model, "messages": MESSAGES, "temperature": 1.0,
            "max_completion_tokens": 60, "structured_outputs": so, **extra}
    status, r = post_json(base_url, "/v1/chat/completions", body, timeout=600)
    assert status == 200, r
    return r["choices"]


def test_choice_is_one_of_the_strings(base_url, model):
    choices = ["yes", "no", "maybe not"]
    for seed in range(4):
        for c in so_chat(base_url, model, {"choice": choices}, n=4, seed=seed):
            assert c["message"]["content"] in choices and c["finish_reason"] == "stop", c


def test_regex_output_matches(base_url, model):
    pattern = r"\(\d{3}\) \d{3}-\d{4}"
    for c in so_chat(base_url, model, {"regex": pattern}, n=6, seed=1):
        assert re.fullmatch(pattern, c["message"]["content"]), c
    # Completions too, with a nullable-looking pattern and UTF-8 classes.
    status, r = post_json(base_url, "/v1/completions", {
        "model": model, "prompt": "Word:", "max_tokens": 30, "temperature": 1.0, "seed": 2, "n": 4,
        "structured_outputs": {"regex": "[a-zé]{2,8}( [a-zé]{2,8})?"}})
    assert status == 200, r
    for c in r["choices"]:
        assert re.fullmatch("[a-zé]{2,8}( [a-zé]{2,8})?", c["text"]), c


def test_ebnf_grammar_output_parses(base_url, model):
    grammar = '''
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= [0-9]{1,3} | "(" expr ")"
'''
    finished = 0
    for c in so_chat(base_url, model, {"grammar": grammar}, n=8, seed=5, max_completion_tokens=40,
                     messages=[{"role": "user", "content": "Write an arithmetic expression."}]):
        text = c["message"]["content"]
        if c["finish_reason"] == "stop":
            finished += 1
            # Reduce innermost parentheses until a flat sum remains: the grammar's language.
            flat = text
            while "(" in flat:
                reduced = re.sub(r"\([0-9]{1,3}([+-][0-9]{1,3})*\)", "0", flat)
                assert reduced != flat, text
                flat = reduced
            assert re.fullmatch(r"[0-9]{1,3}([+-][0-9]{1,3})*", flat), text
    assert finished >= 2


def test_json_schema_and_compact_json(base_url, model):
    schema = {"type": "object", "properties": {"a": {"type": "integer"},
                                               "b": {"type": "array", "items": {"type": "integer"},
                                                     "maxItems": 3}},
              "required": ["a", "b"]}
    finished = 0
    for c in so_chat(base_url, model, {"json": schema, "disable_any_whitespace": True}, n=4,
                     seed=7):
        if c["finish_reason"] == "stop":
            finished += 1
            text = c["message"]["content"]
            jsonschema.validate(json.loads(text), schema)
            assert not any(ch.isspace() for ch in text), text
    assert finished >= 2
    for c in so_chat(base_url, model, {"json_object": True}, n=2, seed=3):
        assert c["message"]["content"].lstrip().startswith("{")


@pytest.mark.parametrize("so,words", [
    ({"regex": "(a)\\1"}, "backreference"),
    ({"regex": "(?=a)b"}, "look"),
    ({"grammar": "start: \"a\""}, "Lark"),
    ({"grammar": "root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\""}, "left"),
    ({"grammar": "root ::= missing"}, "missing"),
    ({"regex": "a", "choice": ["a"]}, "multiple"),
])
def test_refused_constraints_are_400(base_url, model, so, words):
    status, r = post_json(base_url, "/v1/chat/completions", {
        "model": model, "messages": MESSAGES, "max_completion_tokens": 4,
        "structured_outputs": so})
    assert status == 400, r
    assert r["error"]["param"] == "structured_outputs", r
    assert words.lower() in r["error"]["message"].lower(), r


def test_complete_document_ends_even_with_ignore_eos(base_url, model):
    # Regression: once the JSON was complete every token was masked (EOS too, under ignore_eos or
    # min_tokens), the sampler returned token 0 and the output was garbage up to max_tokens.
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    for extra in ({"ignore_eos": True}, {"min_tokens": 150}):
        status, r = post_json(base_url, "/v1/chat/completions", {
            "model": model, "messages": MESSAGES, "max_completion_tokens": 200, "temperature": 0,
            "response_format": schema_format(schema), **extra})
        assert status == 200, r
        c = r["choices"][0]
        assert c["finish_reason"] == "stop", c
        assert json.loads(c["message"]["content"]) in ({"ok": True}, {"ok": False}), c
        assert r["usage"]["completion_tokens"] < 20, r["usage"]


def test_contradictory_constraints_fail_cleanly(base_url, model):
    # The grammar allows only "yes"/"no"; allowed_token_ids allows neither start.
    status, tok = post_json(base_url, "/tokenize", {"model": model, "prompt": "Paris",
                                                    "add_special_tokens": False})
    status, r = post_json(base_url, "/v1/chat/completions", {
        "model": model, "messages": MESSAGES, "max_completion_tokens": 5,
        "structured_outputs": {"choice": ["yes", "no"]}, "allowed_token_ids": tok["tokens"][:1]})
    assert status == 400, r
    assert "no token is allowed" in r["error"]["message"], r
    status, _ = post_json(base_url, "/v1/chat/completions", {
        "model": model, "messages": MESSAGES, "max_completion_tokens": 2})
    assert status == 200  # the server keeps serving
