"""/v1/chat/completions through the openai SDK: chat template, token limits, logprobs, prefix cache."""

import math

from kestrel_e2e import post_json, sse_post

# Greedy answer "The capital city of France is Paris." with every top-2 margin above 1.
QUESTION = [{"role": "user", "content": "Name the capital city of France."}]


def test_chat_template_answers_paris(client, model):
    r = client.chat.completions.create(model=model, messages=QUESTION, max_completion_tokens=24,
                                       temperature=0)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == model
    msg = r.choices[0].message
    assert msg.role == "assistant"
    assert "Paris" in msg.content
    # The template's special tokens must not leak into the text.
    assert "<|im_start|>" not in msg.content and "<|im_end|>" not in msg.content
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_message_fields_as_vllm(base_url, model):
    # vLLM's ChatMessage always serializes tool_calls (an empty list without tool calls) and reasoning.
    status, resp = post_json(base_url, "/v1/chat/completions",
                             {"model": model, "messages": QUESTION, "max_completion_tokens": 2})
    assert status == 200, resp
    msg = resp["choices"][0]["message"]
    assert msg["role"] == "assistant"
    assert msg["tool_calls"] == []
    assert msg["reasoning"] is None
    assert resp["choices"][0]["stop_reason"] is None


def test_content_parts_equal_plain_string(client, model):
    parts = [{"role": "user", "content": [{"type": "text", "text": QUESTION[0]["content"]}]}]
    a = client.chat.completions.create(model=model, messages=QUESTION, max_completion_tokens=8, temperature=0)
    b = client.chat.completions.create(model=model, messages=parts, max_completion_tokens=8, temperature=0)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.usage.prompt_tokens == b.usage.prompt_tokens


def test_max_completion_tokens_respected(client, model):
    r = client.chat.completions.create(model=model, messages=QUESTION, max_completion_tokens=3,
                                       temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 3
    assert r.choices[0].finish_reason == "length"


def test_max_completion_tokens_wins_over_max_tokens(client, model):
    r = client.chat.completions.create(model=model, messages=QUESTION, max_completion_tokens=2,
                                       max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 2


def test_chat_logprobs_shape(client, model):
    r = client.chat.completions.create(model=model, messages=QUESTION, max_completion_tokens=5,
                                       temperature=0, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert t.logprob <= 0 and math.isfinite(t.logprob)
        assert bytes(t.bytes) == t.token.encode()
        assert len(t.top_logprobs) == 2
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob
        # Greedy: the chosen token is the first of the top list.
        assert t.top_logprobs[0].token == t.token
        assert abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4


def test_chat_without_logprobs_has_null_logprobs(client, model):
    r = client.chat.completions.create(model=model, messages=QUESTION, max_completion_tokens=2, temperature=0)
    assert r.choices[0].logprobs is None


def test_prefix_cache_reports_cached_tokens(client, model):
    # A prompt of several KV blocks that no other test sends.
    messages = [{"role": "system", "content": "You answer in one short sentence. " * 6},
                {"role": "user", "content": "Name a primary colour."}]
    first = client.chat.completions.create(model=model, messages=messages, max_completion_tokens=2,
                                           temperature=0)
    second = client.chat.completions.create(model=model, messages=messages, max_completion_tokens=2,
                                            temperature=0)
    assert first.usage.prompt_tokens == second.usage.prompt_tokens > 32
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached > 0
    # Only full blocks are shared, and at least one prompt token is always recomputed.
    assert cached < second.usage.prompt_tokens
    assert second.choices[0].message.content == first.choices[0].message.content


def test_echo_prepends_the_continued_assistant_message(base_url, model):
    msgs = [{"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "The capital of France is"}]
    body = {"model": model, "messages": msgs, "max_completion_tokens": 4, "temperature": 0,
            "continue_final_message": True, "add_generation_prompt": False}
    status, plain = post_json(base_url, "/v1/chat/completions", body)
    assert status == 200, plain
    status, echoed = post_json(base_url, "/v1/chat/completions", {**body, "echo": True})
    assert status == 200, echoed
    assert echoed["choices"][0]["message"]["content"] == \
        "The capital of France is" + plain["choices"][0]["message"]["content"]
    # Streamed: the echo is its own chunk after the role chunk.
    status, _, events, done, _ = sse_post(base_url, "/v1/chat/completions",
                                          {**body, "echo": True, "stream": True})
    assert status == 200 and done
    contents = [c["delta"].get("content") for e in events for c in e["choices"]]
    assert contents[1] == "The capital of France is"
    assert "".join(x or "" for x in contents) == echoed["choices"][0]["message"]["content"]


def test_reasoning_effort_reaches_the_template(base_url, model):
    template = ("{% for m in messages %}{{ m['content'] }}{% endfor %}"
                "[effort={{ reasoning_effort }} thinking={{ enable_thinking }}]")
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}],
            "max_completion_tokens": 1, "chat_template": template}
    for effort, rendered in (("none", "Hi[effort=none thinking=False]"),
                             ("high", "Hi[effort=high thinking=True]")):
        status, resp = post_json(base_url, "/v1/chat/completions",
                                 {**body, "reasoning_effort": effort})
        assert status == 200, resp
        status, tok = post_json(base_url, "/tokenize", {"model": model, "prompt": rendered,
                                                        "add_special_tokens": False})
        assert resp["usage"]["prompt_tokens"] == tok["count"], (effort, rendered)
    # The request's own enable_thinking wins over the one reasoning_effort implies.
    status, resp = post_json(base_url, "/v1/chat/completions",
                             {**body, "reasoning_effort": "high",
                              "chat_template_kwargs": {"enable_thinking": False}})
    status, tok = post_json(base_url, "/tokenize", {"model": model, "add_special_tokens": False,
                                                    "prompt": "Hi[effort=high thinking=False]"})
    assert resp["usage"]["prompt_tokens"] == tok["count"]
