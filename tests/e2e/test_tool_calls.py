"""tool_choice "required" and a named function, through the openai SDK: the grammar forces a
valid call even from a 135M model at temperature 1, arguments validate against the tool's JSON
Schema, and streamed calls assemble to the non-streamed ones. "auto" needs a tool-call parser."""

import json

import jsonschema
import openai
import pytest

WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "maxLength": 30},
                          "unit": {"enum": ["celsius", "fahrenheit"]},
                          "days": {"type": "integer"}},
           "required": ["city", "unit"]}
TIME = {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 30}},
        "required": ["timezone"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Local time",
                                           "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_required_always_yields_valid_calls(client, model):
    # One call per answer: with parallel calls a random-sampling model may keep adding calls
    # until max_tokens.
    for seed in range(20):
        r = client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS,
                                           tool_choice="required", parallel_tool_calls=False,
                                           temperature=1.0, seed=seed, max_completion_tokens=300)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        assert c.message.content is None and len(c.message.tool_calls) == 1
        for call in c.message.tool_calls:
            assert call.type == "function" and call.id.startswith("chatcmpl-tool-")
            assert call.function.name in SCHEMAS
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_named_function_and_parallel_calls(client, model):
    r = client.chat.completions.create(
        model=model, messages=MESSAGES, tools=TOOLS, temperature=1.0, seed=1,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_completion_tokens=200)
    c = r.choices[0]
    assert c.finish_reason == "stop"
    assert [t.function.name for t in c.message.tool_calls] == ["get_time"]
    jsonschema.validate(json.loads(c.message.tool_calls[0].function.arguments), TIME)
    # Parallel calls allowed: the greedy answer is a complete, valid list of calls.
    r = client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS,
                                       tool_choice="required", temperature=0,
                                       max_completion_tokens=600)
    assert r.choices[0].finish_reason == "tool_calls"
    for call in r.choices[0].message.tool_calls:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_streamed_calls_assemble_to_the_whole_ones(client, model):
    args = dict(model=model, messages=MESSAGES, tools=TOOLS, tool_choice="required",
                temperature=0, max_completion_tokens=300)
    whole = client.chat.completions.create(**args).choices[0].message.tool_calls
    calls, finish = {}, None
    for chunk in client.chat.completions.create(stream=True, **args):
        for ch in chunk.choices:
            for d in ch.delta.tool_calls or []:
                entry = calls.setdefault(d.index, {"name": "", "arguments": "", "id": None})
                if d.id:
                    entry["id"] = d.id
                if d.function and d.function.name:
                    entry["name"] += d.function.name
                if d.function and d.function.arguments:
                    entry["arguments"] += d.function.arguments
            finish = ch.finish_reason or finish
    assert finish == "tool_calls"
    streamed = [calls[i] for i in sorted(calls)]
    assert [(c["name"], json.loads(c["arguments"])) for c in streamed] == \
        [(t.function.name, json.loads(t.function.arguments)) for t in whole]
    assert all(c["id"] for c in streamed)


def test_auto_needs_a_parser(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS,
                                       tool_choice="auto", max_completion_tokens=5)
    assert "--enable-auto-tool-choice" in str(e.value)


def test_auto_with_a_parser_passes_plain_answers_through(start_server):
    # SmolLM2 does not write <tool_call> markup, so the hermes parser finds no call: the answer
    # stays content, streamed or not, and the finish reason is not "tool_calls".
    srv = start_server("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="x")
    args = dict(model=srv.model, messages=MESSAGES, tools=TOOLS, temperature=0,
                max_completion_tokens=24)
    whole = client.chat.completions.create(**args).choices[0]
    assert whole.finish_reason in ("stop", "length")
    assert not whole.message.tool_calls and whole.message.content
    text = "".join(c.choices[0].delta.content or "" for c in
                   client.chat.completions.create(stream=True, **args) if c.choices)
    assert text == whole.message.content
