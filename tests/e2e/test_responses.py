"""POST /v1/responses (and GET/cancel with the store on) through the openai SDK's
responses.create and responses.stream: string and item inputs, instructions, the event stream,
max_output_tokens, function tools with function_call_output round trips, text.format, reasoning,
logprobs, previous_response_id, background responses, and 400s for what Kestrel cannot do."""

import json
import time

import jsonschema
import openai
import pytest

from kestrel_e2e import metric, post_json, request, scrape, wait_for

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
           "required": ["city"]}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
          "parameters": WEATHER}]
STORE_ENV = {"VLLM_ENABLE_RESPONSES_API_STORE": "1"}


def sdk(srv):
    return openai.OpenAI(base_url=srv.base_url + "/v1", api_key="x", max_retries=0, timeout=120)


def test_string_input(client, model):
    r = client.responses.create(model=model, input="What is the capital of France?",
                                max_output_tokens=12, temperature=0)
    assert r.id.startswith("resp_") and r.object == "response" and r.model == model
    assert r.status in ("completed", "incomplete")
    assert [o.type for o in r.output] == ["message"]
    msg = r.output[0]
    assert msg.id.startswith("msg_") and msg.role == "assistant"
    assert msg.content[0].type == "output_text" and r.output_text == msg.content[0].text
    u = r.usage
    assert u.input_tokens > 0 and 0 < u.output_tokens <= 12
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert u.input_tokens_details.cached_tokens >= 0 and u.output_tokens_details.reasoning_tokens == 0
    assert r.max_output_tokens == 12 and r.temperature == 0 and r.tool_choice == "none"


def test_same_answer_as_chat(client, model):
    q = "Name a colour."
    chat = client.chat.completions.create(model=model, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": q}],
        max_completion_tokens=8, temperature=0)
    r = client.responses.create(model=model, instructions="Be brief.", max_output_tokens=8,
                                temperature=0,
                                input=[{"role": "user", "content": [{"type": "input_text",
                                                                     "text": q}]}])
    assert r.output_text == chat.choices[0].message.content
    assert r.usage.input_tokens == chat.usage.prompt_tokens and r.instructions == "Be brief."


def test_max_output_tokens_makes_it_incomplete(client, model):
    r = client.responses.create(model=model, input="Tell me a long story.", max_output_tokens=3,
                                temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3 and r.output[0].status == "incomplete"


def test_stream_helper_assembles_the_final_response(client, model):
    args = dict(model=model, input="What is the capital of France?", max_output_tokens=10,
                temperature=0)
    whole = client.responses.create(**args)
    with client.responses.stream(**args) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text == final.output_text
    assert final.id == events[0].response.id and final.status == whole.status
    assert final.usage.output_tokens == whole.usage.output_tokens
    for t in ("response.output_item.added", "response.content_part.added",
              "response.output_text.done", "response.content_part.done",
              "response.output_item.done"):
        assert t in types, types


def test_stream_cut_by_max_output_tokens_still_completes(client, model):
    with client.responses.stream(model=model, input="Tell me a story.", max_output_tokens=2,
                                 temperature=0) as stream:
        final = stream.get_final_response()
    assert final.status == "incomplete" and final.usage.output_tokens == 2


def test_raw_event_stream_wire_format(base_url, model):
    status, headers, data = request(base_url, "POST", "/v1/responses",
                                    {"model": model, "input": "Hi", "max_output_tokens": 3,
                                     "stream": True})
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in data.decode().split("\n\n") if b]
    for seq, block in enumerate(blocks):
        event, payload = block.split("\n")
        body = json.loads(payload[len("data: "):])
        assert event == "event: " + body["type"] and body["sequence_number"] == seq
    assert "[DONE]" not in data.decode()


def test_forced_function_call_and_its_output(client, model):
    r = client.responses.create(model=model, input="What is the weather in Paris?", tools=TOOLS,
                                tool_choice="required", temperature=0, max_output_tokens=60)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) >= 1 and calls[0].name == "get_weather" and calls[0].status == "completed"
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)
    assert calls[0].call_id and calls[0].id.startswith("fc_")
    # The SDK pattern: send the call and its output back as items.
    follow = client.responses.create(
        model=model, tools=TOOLS, max_output_tokens=8, temperature=0,
        input=[{"role": "user", "content": "What is the weather in Paris?"},
               {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
                "arguments": calls[0].arguments},
               {"type": "function_call_output", "call_id": calls[0].call_id,
                "output": "18 degrees and sunny"}])
    assert follow.status in ("completed", "incomplete") and follow.output_text


def test_named_function_streams_the_call(client, model):
    with client.responses.stream(model=model, input="Weather in Rome?", tools=TOOLS,
                                 tool_choice={"type": "function", "name": "get_weather"},
                                 temperature=0, max_output_tokens=60) as stream:
        events = list(stream)
        final = stream.get_final_response()
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    call = [o for o in final.output if o.type == "function_call"][0]
    assert json.loads(args) == json.loads(call.arguments)
    jsonschema.validate(json.loads(call.arguments), WEATHER)


def test_text_format_json_schema(client, model):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"]}
    r = client.responses.create(model=model, input="Invent a person.", temperature=1.0,
                                max_output_tokens=80, extra_body={"seed": 3},
                                text={"format": {"type": "json_schema", "name": "person",
                                                 "schema": schema, "strict": True}})
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema"


def test_logprobs_when_included(client, model):
    r = client.responses.create(model=model, input="Hi", max_output_tokens=4, temperature=0,
                                top_logprobs=2, include=["message.output_text.logprobs"])
    lps = r.output[0].content[0].logprobs
    assert len(lps) == 4 and all(len(lp.top_logprobs) == 2 for lp in lps)
    assert r.top_logprobs == 2


def test_reasoning_item_with_a_reasoning_parser(start_server):
    srv = start_server("--reasoning-parser", "deepseek_r1")
    client = sdk(srv)
    r = client.responses.create(model=srv.model, input="Think about France.", max_output_tokens=6,
                                temperature=0)
    assert r.output[0].type == "reasoning" and r.output[0].content[0].text
    assert r.usage.output_tokens_details.reasoning_tokens > 0
    with client.responses.stream(model=srv.model, input="Think about France.",
                                 max_output_tokens=6, temperature=0) as stream:
        events = list(stream)
        final = stream.get_final_response()
    text = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert text == r.output[0].content[0].text == final.output[0].content[0].text
    hidden = client.responses.create(model=srv.model, input="Think.", max_output_tokens=4,
                                     extra_body={"include_reasoning": False})
    assert all(o.type != "reasoning" for o in hidden.output)


def test_store_retrieve_and_previous_response_id(start_server):
    srv = start_server(env=STORE_ENV)
    client = sdk(srv)
    first = client.responses.create(model=srv.model, input="My name is Ada.",
                                    max_output_tokens=5, temperature=0)
    got = client.responses.retrieve(first.id)
    assert got.id == first.id and got.output_text == first.output_text
    second = client.responses.create(model=srv.model, input="What is my name?",
                                     previous_response_id=first.id, max_output_tokens=5,
                                     temperature=0)
    # The history (first input and answer) is in the prompt.
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.previous_response_id == first.id
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_0000000000000000")
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.cancel(first.id)
    assert "Cannot cancel a synchronous response." in str(e.value)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=srv.model, input="x", previous_response_id="resp_nope")
    unstored = client.responses.create(model=srv.model, input="x", max_output_tokens=1,
                                       store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_background_response_and_cancel(start_server):
    srv = start_server(env=STORE_ENV)
    client = sdk(srv)
    bg = client.responses.create(model=srv.model, input="Count to ten.", background=True,
                                 max_output_tokens=8)
    assert bg.status == "queued" and bg.output == []
    deadline = time.monotonic() + 60
    done = client.responses.retrieve(bg.id)
    while done.status == "queued" and time.monotonic() < deadline:
        time.sleep(0.1)
        done = client.responses.retrieve(bg.id)
    assert done.status in ("completed", "incomplete") and done.usage.output_tokens > 0
    generated = metric(scrape(srv.base_url), "vllm:generation_tokens_total")
    long = client.responses.create(model=srv.model, input="Write forever.", background=True,
                                   max_output_tokens=1500, extra_body={"ignore_eos": True})
    cancelled = client.responses.cancel(long.id)
    assert cancelled.status == "cancelled"
    # The engine request is gone: nothing runs any more (the gauge follows the next step), and it
    # stopped well short of its 1,500 tokens.
    def running():
        return metric(scrape(srv.base_url), "vllm:num_requests_running")

    assert wait_for(lambda: running() == 0, timeout=30), running()
    assert metric(scrape(srv.base_url), "vllm:generation_tokens_total") - generated < 1500
    assert client.responses.retrieve(long.id).status == "cancelled"


def test_without_the_store(client, model, base_url):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model, input="x", background=True)
    assert "VLLM_ENABLE_RESPONSES_API_STORE" in str(e.value)
    r = client.responses.create(model=model, input="x", max_output_tokens=1)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    status, body = post_json(base_url, f"/v1/responses/{r.id}/cancel", {})
    assert status == 404 and body["error"]["message"] == f"Response with id '{r.id}' not found."


@pytest.mark.parametrize("extra,param", [
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input"),
    ({"input": [{"type": "reasoning", "summary": [], "encrypted_content": "abc"}]}, "input"),
    ({"tools": [{"type": "web_search_preview"}]}, "tools"),
    ({"prompt": {"id": "pmpt_1"}}, "prompt"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"not": {}}}}}, "text"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"top_logprobs": 50, "include": ["message.output_text.logprobs"]}, "top_logprobs"),
])
def test_unsupported_or_invalid_requests_are_400(base_url, model, extra, param):
    body = {"model": model, "input": "Hi", "max_output_tokens": 2, **extra}
    status, resp = post_json(base_url, "/v1/responses", body)
    assert status == 400, resp
    assert resp["error"]["param"] == param, resp
