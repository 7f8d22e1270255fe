"""--tokenizer-mode deepseek_v32 / deepseek_v4 through the real binary: chat prompts come from
DeepSeek's native encoders (no chat template is read), /tokenize renders the same prompt, and the
DeepSeek reasoning parsers follow how the prompt ends. The model is the default SmolLM2, whose
tokenizer spells DeepSeek's markers as plain text and which never writes </think>."""

from kestrel_e2e import post_json

BOS = "<｜begin▁of▁sentence｜>"
HI = [{"role": "user", "content": "Hi"}]


def rendered(srv, **extra):
    """The chat prompt the server renders, read back through /tokenize and /detokenize."""
    body = {"model": srv.model, "messages": HI, **extra}
    status, ids = post_json(srv.base_url, "/tokenize", body)
    assert status == 200, ids
    status, text = post_json(srv.base_url, "/detokenize",
                             {"model": srv.model, "tokens": ids["tokens"]})
    assert status == 200, text
    return text["prompt"]


def chat(srv, **extra):
    body = {"model": srv.model, "messages": HI, "max_completion_tokens": 6, "temperature": 0}
    status, whole = post_json(srv.base_url, "/v1/chat/completions", {**body, **extra})
    assert status == 200, whole
    return whole["choices"][0]["message"]


def test_deepseek_v32_encodes_and_thinks_only_when_asked(start_server):
    srv = start_server("--tokenizer-mode", "deepseek_v32", "--reasoning-parser", "deepseek_v32")
    assert rendered(srv) == BOS + "<｜User｜>Hi<｜Assistant｜></think>"
    thinking = {"chat_template_kwargs": {"thinking": True}}
    assert rendered(srv, **thinking) == BOS + "<｜User｜>Hi<｜Assistant｜><think>"
    plain = chat(srv)
    assert plain["content"] and plain["reasoning"] is None
    thought = chat(srv, **thinking)
    assert thought["reasoning"] and thought["content"] is None


def test_deepseek_v4_thinks_by_default(start_server):
    srv = start_server("--tokenizer-mode", "deepseek_v4", "--reasoning-parser", "deepseek_v4")
    off = {"chat_template_kwargs": {"thinking": False}}
    assert rendered(srv, **off) == BOS + "<｜User｜>Hi<｜Assistant｜></think>"
    assert rendered(srv).endswith("<｜User｜>Hi<｜Assistant｜><think>")
    thought = chat(srv)
    assert thought["reasoning"] and thought["content"] is None
    plain = chat(srv, reasoning_effort="none")
    assert plain["content"] and plain["reasoning"] is None


def test_refused_conversation_is_a_400(start_server):
    srv = start_server("--tokenizer-mode", "deepseek_v32")
    body = {"model": srv.model, "max_completion_tokens": 2,
            "messages": HI + [{"role": "tool", "tool_call_id": "x", "content": "result"}]}
    status, err = post_json(srv.base_url, "/v1/chat/completions", body)
    assert status == 400, err
    assert "tool" in err["error"]["message"]
