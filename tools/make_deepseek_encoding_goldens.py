#!/usr/bin/env python3
"""Writes tests/fixtures/chat/deepseek_encoding_cases.json: chat conversations rendered by the
reference DeepSeek prompt encoders that vLLM runs for --tokenizer-mode deepseek_v32 and
deepseek_v4. tests/chat/deepseek_encoding_test.cc checks that Kestrel's native encoders
(src/chat/deepseek_*.cc) give every expected prompt byte for byte, and fail where the
reference raised.

The reference is imported from an unpacked vLLM wheel, which this script does not copy:
    pip download vllm --no-deps -d /tmp/vllm_wheel
    unzip -q /tmp/vllm_wheel/vllm-*.whl 'vllm/tokenizers/*' -d /tmp/vllm_wheel/unpacked
    python3 tools/make_deepseek_encoding_goldens.py /tmp/vllm_wheel/unpacked
(written against vllm 0.34.0). Only the standard library is needed: vLLM's tokenizer wrappers
(vllm/tokenizers/deepseek_v32.py, deepseek_v4.py), which turn chat_template_kwargs and the
request's tools into encoder options, are loaded with stand-ins for the transformers and
vLLM modules they import but do not use for rendering.

Each case holds the conversation as vLLM's chat parser hands it to the wrapper (the "string"
content format for deepseek_v32, "openai" for deepseek_v4: see `conversation` below), the
request's tools as vLLM serialises them, the chat_template_kwargs, and the prompt or the error.
"""
import argparse
import copy
import importlib
import json
import pathlib
import sys
import types


def load_reference(wheel_dir):
    """The wrappers' get_deepseek_*_tokenizer functions, loaded from `wheel_dir`."""
    tokenizers = pathlib.Path(wheel_dir) / "vllm" / "tokenizers"
    for name in ("deepseek_v32.py", "deepseek_v4.py", "deepseek_v32_encoding.py",
                 "deepseek_v4_encoding.py"):
        if not (tokenizers / name).is_file():
            sys.exit(f"{tokenizers / name}: not found (pass the unpacked wheel's root)")

    def stub(name, **attrs):
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        sys.modules[name] = module
        return module

    # A package over the wheel's tokenizers folder, so the wrappers' relative imports resolve
    # to the real encoders and to stand-ins for the tokenizer plumbing.
    stub("dsref").__path__ = [str(tokenizers)]
    stub("dsref.hf", HfTokenizer=object, get_cached_tokenizer=lambda t: t)
    stub("dsref.protocol", TokenizerLike=object)
    stub("transformers", TokenizersBackend=object)
    stub("vllm").__path__ = []
    stub("vllm.renderers").__path__ = []
    stub("vllm.renderers.chat_utils", ChatCompletionMessageParam=dict)

    class Tokenizer:
        def get_added_vocab(self):
            return {}

    v32 = importlib.import_module("dsref.deepseek_v32").get_deepseek_v32_tokenizer(Tokenizer())
    v4 = importlib.import_module("dsref.deepseek_v4").get_deepseek_v4_tokenizer(Tokenizer())
    return {"deepseek_v32": v32, "deepseek_v4": v4}


# ---------------------------------------------------------------- vLLM's request plumbing


def conversation(messages, content_format):
    """vLLM's parse_chat_messages for text-only messages (vllm/renderers/chat_utils): content
    as one string of text parts joined by newlines ("string") or as a list of text parts
    ("openai"); tool message content always as a string; assistant tool-call arguments as
    objects (a string that is not a JSON object becomes {}); reasoning under both names."""
    out = []
    for message in messages:
        role = message["role"]
        content = message.get("content")
        parts = [] if content is None else [content] if isinstance(content, str) else content
        texts = [p if isinstance(p, str) else p["text"] for p in parts]
        msg = {"role": role}
        if content_format == "openai" and role != "tool":
            msg["content"] = [{"type": "text", "text": t} for t in texts]
        else:
            msg["content"] = "\n".join(texts)
        if role == "assistant":
            calls = message.get("tool_calls")
            if calls:
                msg["tool_calls"] = []
                for call in copy.deepcopy(calls):
                    args = call["function"].get("arguments")
                    if isinstance(args, str):
                        try:
                            args = json.loads(args) if args else {}
                        except json.JSONDecodeError:
                            args = {}
                    call["function"]["arguments"] = args if isinstance(args, dict) else {}
                    msg["tool_calls"].append(call)
            if message.get("reasoning") is not None:
                msg["reasoning"] = message["reasoning"]
                msg["reasoning_content"] = message["reasoning"]
        elif role == "tool" and "tool_call_id" in message:
            msg["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            msg["name"] = message["name"]
        if role == "developer":
            msg["tools"] = message.get("tools")
        out.append(msg)
    return out


def serialised_tools(tools):
    """The request's tools as vLLM's ChatCompletionToolsParam.model_dump() gives them: the
    function's name, description and parameters (null when absent), strict only when set."""
    if tools is None:
        return None
    out = []
    for tool in tools:
        fn = tool["function"]
        function = {"name": fn["name"], "description": fn.get("description"),
                    "parameters": fn.get("parameters")}
        if fn.get("strict") is not None:
            function["strict"] = fn["strict"]
        out.append({"type": "function", "function": function})
    return out


# ---------------------------------------------------------------- the cases

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Zürich\""},
        "days": {"type": "integer"}, "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"timezone": {"type": "string"}}}}}
NO_PARAMS = {"type": "function", "function": {"name": "ping", "strict": True}}


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


SYSTEM = {"role": "system", "content": "You are a careful assistant.\nAnswer briefly."}
HELLO = {"role": "user", "content": "Hello! 你好"}
ANSWER = {"role": "assistant", "content": "Hi, how can I help?",
          "reasoning": "The user greets me; greet back."}
FOLLOW_UP = {"role": "user", "content": "What is 2 + 2?"}

ASK_WEATHER = {"role": "user", "content": "Weather in Zürich and Tokyo, and the time in UTC?"}
CALLS = {"role": "assistant", "content": "Let me check.",
         "reasoning": "Two cities and a clock: three calls.",
         "tool_calls": [
             call("call_a", "get_weather", '{"city": "Zürich", "days": 2, "unit": "c"}'),
             call("call_b", "get_weather",
                  {"city": "Tokyo", "days": 1.5, "extra": {"x": [1, None, True]},
                   "note": "quote \" and\nnewline"}),
             call("call_c", "get_time", '{"timezone": "UTC"}')]}
# The results come back out of call order; DeepSeek-V4 sorts them by the calls' ids.
RESULTS = [{"role": "tool", "tool_call_id": "call_c", "content": "12:00"},
           {"role": "tool", "tool_call_id": "call_a", "content": "Sunny, 21°C"},
           {"role": "tool", "tool_call_id": "call_b", "content": [
               {"type": "text", "text": "Rain"}, {"type": "text", "text": "12°C"}]}]
FINAL = {"role": "assistant", "content": "Zürich is sunny, Tokyo rainy; it is noon UTC.",
         "reasoning": "All results are in."}
THANKS = {"role": "user", "content": "Thanks. Any umbrella needed?"}

TOOL_TURN = [ASK_WEATHER, CALLS] + RESULTS


def cases():
    """(name, mode, messages, tools, kwargs) for both modes, then per-mode cases."""
    out = []
    for mode in ("deepseek_v32", "deepseek_v4"):
        common = [
            ("one_user_default", [HELLO], None, {}),
            ("one_user_thinking", [HELLO], None, {"thinking": True}),
            ("one_user_enable_thinking", [HELLO], None, {"enable_thinking": True}),
            ("one_user_no_thinking", [HELLO], None, {"thinking": False}),
            ("system_and_user_thinking", [SYSTEM, HELLO], None, {"thinking": True}),
            ("system_and_user_chat", [SYSTEM, HELLO], None, {"enable_thinking": False}),
            ("empty_system", [{"role": "system", "content": None}, HELLO], None,
             {"thinking": True}),
            ("multi_turn_thinking", [SYSTEM, HELLO, ANSWER, FOLLOW_UP], None,
             {"thinking": True}),
            ("multi_turn_chat", [SYSTEM, HELLO, ANSWER, FOLLOW_UP], None, {"thinking": False}),
            ("ends_with_assistant_thinking", [HELLO, ANSWER], None, {"thinking": True}),
            ("ends_with_assistant_chat", [HELLO, ANSWER], None, {"thinking": False}),
            ("tools_no_system_thinking", [HELLO], [WEATHER, CLOCK, NO_PARAMS],
             {"thinking": True}),
            ("tools_with_system_chat", [SYSTEM, HELLO], [WEATHER], {"thinking": False}),
            ("tool_calls_pending_thinking", TOOL_TURN, [WEATHER, CLOCK], {"thinking": True}),
            ("tool_calls_pending_chat", TOOL_TURN, [WEATHER, CLOCK], {"thinking": False}),
            ("tool_round_then_user_thinking", TOOL_TURN + [FINAL, THANKS], [WEATHER, CLOCK],
             {"thinking": True}),
            ("tool_round_then_user_chat", TOOL_TURN + [FINAL, THANKS], [WEATHER, CLOCK],
             {"thinking": False}),
            ("tool_history_without_tools_thinking", TOOL_TURN + [FINAL, THANKS], None,
             {"thinking": True}),
            ("calls_without_content", [ASK_WEATHER, {
                "role": "assistant", "content": None,
                "tool_calls": [call("c1", "get_time", "not json"),
                               call("c2", "get_time", "[1, 2]")]},
                {"role": "tool", "tool_call_id": "c1", "content": "?"},
                {"role": "tool", "tool_call_id": "c2", "content": ""}], [CLOCK],
             {"thinking": True}),
            ("content_parts", [{"role": "user", "content": [
                {"type": "text", "text": "first part"}, "second part"]}], None,
             {"thinking": False}),
            ("reasoning_effort_high", [HELLO], None,
             {"reasoning_effort": "high", "enable_thinking": True}),
            ("reasoning_effort_none", [HELLO], None,
             {"reasoning_effort": "none", "enable_thinking": False}),
            ("unknown_role", [HELLO, {"role": "critic", "content": "x"}], None, {}),
            ("developer_without_content", [{"role": "developer", "content": ""}, HELLO], None,
             {"thinking": False}),
            ("developer_last", [SYSTEM, {"role": "developer", "content": "Use metric units.",
                                         "tools": [WEATHER]}], None, {"thinking": True}),
            ("thinking_kwarg_is_truthy_text", [HELLO], None, {"thinking": "no"}),
        ]
        out += [(name, mode, m, t, k) for name, m, t, k in common]

    v32 = [
        ("tool_without_call", [HELLO, {"role": "tool", "content": "x"}], None, {}),
        ("tool_first", [{"role": "tool", "content": "x"}, HELLO], None, {}),
        ("too_many_results", [ASK_WEATHER, CALLS] + RESULTS + RESULTS[:1], None, {}),
        ("answer_without_reasoning_thinking", [HELLO, {"role": "assistant", "content": "Hi"}],
         None, {"thinking": True}),
        ("developer_before_last_user_thinking",
         [{"role": "developer", "content": "Be terse."}, HELLO, ANSWER, FOLLOW_UP], None,
         {"thinking": True}),
        ("developer_before_last_user_chat",
         [{"role": "developer", "content": "Be terse."}, HELLO, ANSWER, FOLLOW_UP], None,
         {"thinking": False}),
    ]
    v4 = [
        ("reasoning_effort_max", [SYSTEM, HELLO], None, {"reasoning_effort": "max"}),
        ("reasoning_effort_low", [HELLO], None, {"reasoning_effort": "low"}),
        ("reasoning_effort_medium", [HELLO], None, {"reasoning_effort": "medium"}),
        ("reasoning_effort_other_text", [HELLO], None, {"reasoning_effort": "extreme"}),
        ("reasoning_effort_not_text", [HELLO], None, {"reasoning_effort": 3}),
        ("reasoning_effort_with_thinking_off", [HELLO], None,
         {"thinking": False, "reasoning_effort": "max"}),
        ("keep_thinking", [SYSTEM, HELLO, ANSWER, FOLLOW_UP], None, {"drop_thinking": False}),
        ("consecutive_users", [HELLO, FOLLOW_UP], None, {}),
        ("user_after_tool_results", TOOL_TURN + [THANKS], [WEATHER], {}),
        ("trailing_system", [HELLO, ANSWER, SYSTEM], None, {"thinking": True}),
        ("system_before_assistant", [SYSTEM, ANSWER, FOLLOW_UP], None, {"thinking": True}),
        ("latest_reminder", [SYSTEM, HELLO, ANSWER,
                             {"role": "latest_reminder", "content": "Today is Monday."}],
         None, {"thinking": True}),
        ("developer_before_last_user", [{"role": "developer", "content": "Be terse."}, HELLO,
                                        ANSWER, FOLLOW_UP], None, {}),
        ("tools_join_first_system", [HELLO, SYSTEM, FOLLOW_UP], [CLOCK], {"thinking": True}),
        ("tool_result_first", [{"role": "tool", "tool_call_id": "z", "content": "x"}, HELLO],
         None, {}),
    ]
    out += [(name, "deepseek_v32", m, t, k) for name, m, t, k in v32]
    out += [(name, "deepseek_v4", m, t, k) for name, m, t, k in v4]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel_dir", help="root of the unpacked vLLM wheel (holds vllm/)")
    parser.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parent.parent /
                                             "tests/fixtures/chat/deepseek_encoding_cases.json"))
    args = parser.parse_args()
    reference = load_reference(args.wheel_dir)

    results = []
    for name, mode, messages, tools, kwargs in cases():
        conv = conversation(messages, "string" if mode == "deepseek_v32" else "openai")
        dumped = serialised_tools(tools)
        case = {"name": f"{mode}/{name}", "mode": mode, "conversation": conv, "tools": dumped,
                "kwargs": kwargs}
        try:
            case["prompt"] = reference[mode].apply_chat_template(
                copy.deepcopy(conv), tools=copy.deepcopy(dumped), tokenize=False,
                **copy.deepcopy(kwargs))
        except Exception as e:  # the reference refuses the conversation
            case["error"] = f"{type(e).__name__}: {e}"
        results.append(case)

    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    errors = sum("error" in c for c in results)
    print(f"wrote {len(results)} cases ({errors} errors) to {out}")


if __name__ == "__main__":
    main()
