"""Server-sent events for completions and chat, checked on the raw wire and through the SDK."""

from kestrel_e2e import post_json, sse_post

PROMPT = "The capital of France is"
# Greedy answer "The capital city of France is Paris." with every top-2 margin above 1.
QUESTION = [{"role": "user", "content": "Name the capital city of France."}]


def test_completion_stream_matches_non_streamed(base_url, model):
    body = {"model": model, "prompt": PROMPT, "max_tokens": 10, "temperature": 0}
    status, whole = post_json(base_url, "/v1/completions", body)
    assert status == 200, whole
    status, ctype, events, done, _ = sse_post(base_url, "/v1/completions", {**body, "stream": True})
    assert status == 200
    assert ctype.startswith("text/event-stream")
    assert done, "stream did not end with data: [DONE]"
    assert all(e["object"] == "text_completion" for e in events)
    assert len({e["id"] for e in events}) == 1
    text = "".join(c["text"] for e in events for c in e["choices"])
    assert text == whole["choices"][0]["text"]
    finishes = [c["finish_reason"] for e in events for c in e["choices"] if c.get("finish_reason")]
    assert finishes == [whole["choices"][0]["finish_reason"]]
    last_choice_event = [e for e in events if e["choices"]][-1]
    assert last_choice_event["choices"][0]["finish_reason"] is not None
    # Without include_usage no chunk carries usage.
    assert all(not e.get("usage") for e in events)


def test_completion_stream_include_usage(base_url, model):
    body = {"model": model, "prompt": PROMPT, "max_tokens": 5, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    status, _, events, done, _ = sse_post(base_url, "/v1/completions", body)
    assert status == 200 and done
    final = events[-1]
    assert final["choices"] == []
    assert final["usage"]["completion_tokens"] == 5
    assert final["usage"]["total_tokens"] == final["usage"]["prompt_tokens"] + 5
    assert all(e["choices"] for e in events[:-1])


def test_completion_stream_prompt_list_indexes(base_url, model):
    body = {"model": model, "prompt": ["Hello", "1, 2, 3,"], "max_tokens": 3, "temperature": 0,
            "ignore_eos": True, "stream": True}
    status, _, events, done, _ = sse_post(base_url, "/v1/completions", body)
    assert status == 200 and done
    per_index = {}
    for e in events:
        for c in e["choices"]:
            per_index.setdefault(c["index"], []).append(c)
    assert sorted(per_index) == [0, 1]
    for chunks in per_index.values():
        assert chunks[-1]["finish_reason"] == "length"


def test_chat_stream_matches_non_streamed(base_url, model):
    body = {"model": model, "messages": QUESTION, "max_completion_tokens": 12, "temperature": 0}
    status, whole = post_json(base_url, "/v1/chat/completions", body)
    assert status == 200, whole
    status, ctype, events, done, _ = sse_post(
        base_url, "/v1/chat/completions",
        {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200 and ctype.startswith("text/event-stream")
    assert done
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    assert len({e["id"] for e in events}) == 1
    assert events[0]["id"].startswith("chatcmpl-")
    first = events[0]["choices"][0]
    assert first["delta"]["role"] == "assistant"
    assert first["delta"]["content"] == ""
    assert all("role" not in c["delta"] for e in events[1:] for c in e["choices"])
    text = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    choice_events = [e for e in events if e["choices"]]
    assert choice_events[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert all(c["finish_reason"] is None for e in choice_events[:-1] for c in e["choices"])
    final = events[-1]
    assert final["choices"] == []
    assert final["usage"]["prompt_tokens"] == whole["usage"]["prompt_tokens"]
    assert final["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]


def test_chat_stream_via_sdk(client, model):
    stream = client.chat.completions.create(model=model, messages=QUESTION, max_completion_tokens=12,
                                            temperature=0, stream=True)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_completion_stream_stop_string_matches_non_streamed(base_url, model):
    # The stop string may arrive split over tokens: held-back text must never be streamed.
    # " seasons" and " of" are separate tokens of the greedy answer's first line.
    prompt = "<|im_start|>user\nName the four seasons of the year.<|im_end|>\n<|im_start|>assistant\n"
    body = {"model": model, "prompt": prompt, "max_tokens": 12, "temperature": 0, "stop": ["seasons of"]}
    status, whole = post_json(base_url, "/v1/completions", body)
    assert status == 200, whole
    assert whole["choices"][0]["finish_reason"] == "stop", whole
    status, _, events, done, _ = sse_post(base_url, "/v1/completions", {**body, "stream": True})
    assert status == 200 and done
    text = "".join(c["text"] for e in events for c in e["choices"])
    assert text == whole["choices"][0]["text"]
    assert "answer" not in text
    last = [c for e in events for c in e["choices"]][-1]
    assert last["finish_reason"] == "stop" and last["stop_reason"] == "seasons of"


def test_completion_stream_logprobs(base_url, model):
    body = {"model": model, "prompt": PROMPT, "max_tokens": 6, "temperature": 0, "logprobs": 2,
            "ignore_eos": True}
    status, whole = post_json(base_url, "/v1/completions", body)
    assert status == 200, whole
    status, _, events, done, _ = sse_post(base_url, "/v1/completions", {**body, "stream": True})
    assert status == 200 and done
    tokens, offsets, chosen = [], [], []
    for e in events:
        for c in e["choices"]:
            lp = c["logprobs"]
            assert "".join(lp["tokens"]) == c["text"]
            tokens += lp["tokens"]
            offsets += lp["text_offset"]
            chosen += lp["token_logprobs"]
    ref = whole["choices"][0]["logprobs"]
    assert tokens == ref["tokens"]
    assert offsets == ref["text_offset"]  # offsets count from the start of the whole text, not the chunk
    assert chosen == ref["token_logprobs"]


def test_multibyte_characters_stream_intact(base_url, model):
    # Byte-level BPE splits emoji over several tokens; no chunk may carry a partial UTF-8 sequence.
    body = {"model": model, "prompt": "List of emojis: \U0001F600, \U0001F602, \U0001F389,", "max_tokens": 8,
            "temperature": 0, "ignore_eos": True}
    status, whole = post_json(base_url, "/v1/completions", body)
    assert status == 200, whole
    expected = whole["choices"][0]["text"]
    assert any(ord(ch) > 0xFFFF for ch in expected), expected  # the prompt leads to more emoji
    assert "\ufffd" not in expected
    status, _, events, done, raw = sse_post(base_url, "/v1/completions", {**body, "stream": True})
    assert status == 200 and done
    pieces = [c["text"] for e in events for c in e["choices"]]
    assert all("\ufffd" not in p for p in pieces), pieces
    assert "".join(pieces) == expected
