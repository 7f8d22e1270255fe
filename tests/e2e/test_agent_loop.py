"""A tool-calling agent loop through the openai SDK, as agents run it: the model calls a tool, the
client sends the call back with the tool's result, and the model answers. The second request
carries the assistant message with `tool_calls` and `content: null` (the SDK echoing its own
message object, as LangChain does) or without a `content` key (litellm's form); every tool-call
parser is served with its model family's chat template (sent per request), so each template
renders the round trip."""

import json

import openai
import pytest

from kestrel_e2e import KESTREL_SHARED, post_json

TEMPLATES = KESTREL_SHARED / "testdata" / "chat_templates"
# --tool-call-parser → the chat template of the models that parser is for, and whether that
# template writes the assistant's calls back into the prompt (DeepSeek-V3's original template
# does so only for content None, which vLLM's normalisation turns into ""; the plain Llama 3.1
# template renders no tools at all).
PARSERS = [("hermes", "qwen3.jinja", True), ("qwen3_coder", "qwen3-coder.jinja", True),
           ("qwen3_coder", "qwen3.5-community.jinja", True),
           ("deepseek_v3", "deepseek-v3.jinja", False),
           ("deepseek_v31", "deepseek-v3.1.jinja", True),
           ("llama3_json", "llama3.1.jinja", False)]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"]}}}]
RESULT = "18 degrees and sunny"


def first_turn(client, model, template):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, tool_choice="required", temperature=0,
        parallel_tool_calls=False, max_completion_tokens=64, extra_body={"chat_template": template})
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and msg.content is None
    assert len(msg.tool_calls) == 1 and msg.tool_calls[0].function.name == "get_weather"
    return messages, msg


@pytest.mark.parametrize("parser,template_file,renders_calls", PARSERS)
def test_tool_result_round_trip(start_server, parser, template_file, renders_calls):
    template = (TEMPLATES / template_file).read_text()
    srv = start_server("--enable-auto-tool-choice", "--tool-call-parser", parser)
    client = openai.OpenAI(base_url=srv.base_url + "/v1", api_key="x", max_retries=0)
    messages, msg = first_turn(client, srv.model, template)
    call = msg.tool_calls[0]
    tool_msg = {"role": "tool", "tool_call_id": call.id, "content": RESULT}
    args = dict(model=srv.model, tools=TOOLS, temperature=0, max_completion_tokens=16,
                extra_body={"chat_template": template})

    # The SDK's own message object (serialised with content: null).
    sdk_loop = messages + [msg, tool_msg]
    final = client.chat.completions.create(messages=sdk_loop, **args).choices[0]
    assert final.finish_reason in ("stop", "length", "tool_calls")
    assert final.message.content is not None or final.message.tool_calls

    # litellm's form: no content key at all; and a streamed answer.
    litellm_loop = messages + [
        {"role": "assistant", "tool_calls": [{"id": call.id, "type": "function", "function": {
            "name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id,
         "content": [{"type": "text", "text": RESULT}]}]
    chunks = list(client.chat.completions.create(messages=litellm_loop, stream=True, **args))
    assert chunks and any(c.choices and c.choices[0].finish_reason for c in chunks)

    # The template really rendered the call and its result.
    status, tok = post_json(srv.base_url, "/tokenize",
                            {"model": srv.model, "messages": json.loads(json.dumps(
                                [m if isinstance(m, dict) else m.model_dump() for m in sdk_loop])),
                             "tools": TOOLS, "chat_template": template})
    assert status == 200, tok
    status, text = post_json(srv.base_url, "/detokenize", {"model": srv.model, "tokens": tok["tokens"]})
    assert status == 200
    question = messages[0]["content"]
    after = text["prompt"][text["prompt"].index(question) + len(question):]
    assert RESULT in after
    if renders_calls:  # the call (name and argument value) sits between question and result
        city = json.loads(call.function.arguments)["city"]
        call_part = after[:after.index(RESULT)]
        assert "get_weather" in call_part and city in call_part, text["prompt"]


def test_null_content_was_a_400_before(base_url, model):
    # Regression: the model's own template used to fail on content null ("can only concatenate
    # str (not "NoneType") to str").
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
    for assistant in ({"role": "assistant", "content": None, "tool_calls": [call]},
                      {"role": "assistant", "tool_calls": [call]}):
        body = {"model": model, "max_tokens": 4, "messages": [
            {"role": "user", "content": "Weather?"}, assistant,
            {"role": "tool", "tool_call_id": "call_1", "content": RESULT}]}
        status, resp = post_json(base_url, "/v1/chat/completions", body)
        assert status == 200, resp
