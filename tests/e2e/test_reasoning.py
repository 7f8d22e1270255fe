"""--reasoning-parser: chat output split into message.reasoning (and reasoning_content) and
content, non-streamed and streamed (delta.reasoning). SmolLM2 never writes </think>, so with the
deepseek_r1 parser (output starts inside reasoning) everything it says is reasoning; with qwen3
and a template that does not open <think>, everything stays content."""

from kestrel_e2e import post_json, sse_post

QUESTION = [{"role": "user", "content": "Name the capital city of France."}]


def chat(model, **extra):
    body = {"model": model, "messages": QUESTION, "max_completion_tokens": 8, "temperature": 0}
    body.update(extra)
    return body


def test_deepseek_r1_parser_puts_unterminated_thinking_in_reasoning(start_server):
    srv = start_server("--reasoning-parser", "deepseek_r1")
    status, whole = post_json(srv.base_url, "/v1/chat/completions", chat(srv.model))
    assert status == 200, whole
    msg = whole["choices"][0]["message"]
    assert msg["reasoning"] and msg["reasoning"] == msg["reasoning_content"]
    assert msg["content"] is None
    assert whole["usage"]["completion_tokens"] == 8

    status, _, events, done, _ = sse_post(srv.base_url, "/v1/chat/completions",
                                          chat(srv.model, stream=True))
    assert status == 200 and done
    deltas = [c["delta"] for e in events for c in e["choices"]]
    assert "".join(d.get("reasoning", "") for d in deltas) == msg["reasoning"]
    assert all(d.get("reasoning") == d.get("reasoning_content") for d in deltas)
    # Only the role chunk carries content (""), as without a parser it would carry the text.
    assert "".join(d.get("content") or "" for d in deltas) == ""


def test_include_reasoning_false_drops_reasoning(start_server):
    srv = start_server("--reasoning-parser", "deepseek_r1")
    status, whole = post_json(srv.base_url, "/v1/chat/completions",
                              chat(srv.model, include_reasoning=False))
    assert status == 200, whole
    msg = whole["choices"][0]["message"]
    assert not msg.get("reasoning") and not msg.get("reasoning_content")
    status, _, events, done, _ = sse_post(srv.base_url, "/v1/chat/completions",
                                          chat(srv.model, stream=True, include_reasoning=False))
    assert status == 200 and done
    assert not any(c["delta"].get("reasoning") for e in events for c in e["choices"])


def test_qwen3_parser_leaves_plain_answers_in_content(start_server):
    srv = start_server("--reasoning-parser", "qwen3")
    status, whole = post_json(srv.base_url, "/v1/chat/completions",
                              chat(srv.model, max_completion_tokens=12))
    assert status == 200, whole
    msg = whole["choices"][0]["message"]
    assert msg["reasoning"] is None and "Paris" in msg["content"]
