#!/usr/bin/env python3
"""Runs the clients people point at a vLLM server — LangChain (chat completions and
use_responses_api=True) and litellm — through a tool-calling agent loop against a running
`kestrel serve`, and prints one line per check. Not part of CI (the openai SDK's loops are in
tests/e2e); needs `pip install langchain-openai litellm` in the interpreter that runs it.

  python3 bench/client_compat.py --base-url http://127.0.0.1:8000 --model NAME
The server needs --enable-auto-tool-choice --tool-call-parser hermes for the auto turns.
"""
import argparse
import json
import sys


def weather(city: str) -> str:
    """Current weather in a city."""
    return f"18 degrees and sunny in {city}"


TOOL = {"type": "function", "function": {
    "name": "weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"]}}}


def langchain_loop(base_url, model, responses_api):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=base_url + "/v1", api_key="x", model=model, temperature=0,
                     max_tokens=48, use_responses_api=responses_api)
    # Forced call (the model is too small to choose one itself), then the tool result back.
    forced = llm.bind_tools([TOOL], tool_choice="weather")
    history = [HumanMessage("What is the weather in Paris?")]
    ai = forced.invoke(history)
    assert ai.tool_calls, ai
    call = ai.tool_calls[0]
    history += [ai, ToolMessage(weather(**call["args"]), tool_call_id=call["id"])]
    final = llm.bind_tools([TOOL]).invoke(history)
    text = "".join(chunk.text if hasattr(chunk, "text") and isinstance(chunk.text, str)
                   else str(chunk.content) for chunk in llm.stream(history))
    return f"call {call['name']}({json.dumps(call['args'])}), answer {final.text!r:.40}, " \
           f"streamed {len(text)} chars"


def litellm_loop(base_url, model):
    import litellm

    args = dict(model="openai/" + model, api_base=base_url + "/v1", api_key="x",
                temperature=0, max_tokens=48)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = litellm.completion(messages=messages, tools=[TOOL],
                           tool_choice={"type": "function", "function": {"name": "weather"}},
                           **args)
    msg = r.choices[0].message
    call = msg.tool_calls[0]
    messages += [msg.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id,
                  "content": weather(**json.loads(call.function.arguments))}]
    final = litellm.completion(messages=messages, tools=[TOOL], **args)
    return f"call {call.function.name}({call.function.arguments}), answer " \
           f"{final.choices[0].message.content!r:.40}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    failed = 0
    checks = [("langchain chat completions", lambda: langchain_loop(a.base_url, a.model, False)),
              ("langchain responses api", lambda: langchain_loop(a.base_url, a.model, True)),
              ("litellm chat completions", lambda: litellm_loop(a.base_url, a.model))]
    for name, check in checks:
        try:
            print(f"ok   {name}: {check()}")
        except Exception as e:  # report every client, not only the first failure
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
