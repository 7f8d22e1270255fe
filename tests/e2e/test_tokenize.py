"""/tokenize and /detokenize."""

from kestrel_e2e import post_json

TEXT = "Kestrels hover while hunting: 42 voles, déjà vu!"


def test_tokenize_detokenize_round_trip(base_url, model):
    status, tok = post_json(base_url, "/tokenize", {"model": model, "prompt": TEXT, "add_special_tokens": False})
    assert status == 200, tok
    assert tok["count"] == len(tok["tokens"]) > 5
    assert tok["max_model_len"] == 2048
    assert all(isinstance(t, int) and t >= 0 for t in tok["tokens"])
    status, detok = post_json(base_url, "/detokenize", {"model": model, "tokens": tok["tokens"]})
    assert status == 200, detok
    assert detok["prompt"] == TEXT


def test_tokenize_model_is_optional(base_url, model):
    a = post_json(base_url, "/tokenize", {"prompt": TEXT})
    b = post_json(base_url, "/tokenize", {"model": model, "prompt": TEXT})
    assert a[0] == b[0] == 200
    assert a[1]["tokens"] == b[1]["tokens"]


def test_tokenize_messages_applies_chat_template(base_url, model):
    question = "What is the capital of France?"
    _, raw = post_json(base_url, "/tokenize", {"model": model, "prompt": question, "add_special_tokens": False})
    status, chat = post_json(base_url, "/tokenize",
                             {"model": model, "messages": [{"role": "user", "content": question}]})
    assert status == 200, chat
    assert chat["count"] == len(chat["tokens"]) > raw["count"] + 4
    # The question's tokens appear inside the templated prompt.
    n = len(raw["tokens"])
    windows = [chat["tokens"][i:i + n] for i in range(len(chat["tokens"]) - n + 1)]
    assert raw["tokens"] in windows
    # add_generation_prompt (default true) adds the assistant header at the end.
    _, no_gen = post_json(base_url, "/tokenize",
                          {"model": model, "messages": [{"role": "user", "content": question}],
                           "add_generation_prompt": False})
    assert no_gen["count"] < chat["count"]
    assert chat["tokens"][:no_gen["count"]] == no_gen["tokens"]
    status, text = post_json(base_url, "/detokenize", {"model": model, "tokens": chat["tokens"]})
    assert status == 200
    assert question in text["prompt"] and "assistant" in text["prompt"]


def test_tokenize_count_matches_chat_usage(client, base_url, model):
    messages = [{"role": "user", "content": "Say hi."}]
    _, tok = post_json(base_url, "/tokenize", {"model": model, "messages": messages})
    r = client.chat.completions.create(model=model, messages=messages, max_completion_tokens=1)
    assert r.usage.prompt_tokens == tok["count"]


def test_detokenize_bad_ids_400(base_url, model):
    status, resp = post_json(base_url, "/detokenize", {"model": model, "tokens": [1, "two"]})
    assert status == 400, resp
    assert resp["error"]["code"] == 400
    status, resp = post_json(base_url, "/detokenize", {"model": model, "tokens": [10 ** 9]})
    assert status == 400, resp
