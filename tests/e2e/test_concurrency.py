"""Many concurrent streamed chats all finish, and greedy output does not depend on the batch."""

from concurrent.futures import ThreadPoolExecutor

from kestrel_e2e import post_json, sse_post

SUBJECTS = ["France", "Italy", "Spain", "Germany", "Japan", "Canada", "Egypt", "Peru", "Kenya", "Norway",
            "India", "Chile", "Greece", "Poland", "Cuba", "Iran", "Mexico", "Brazil", "Sweden", "Turkey",
            "Ireland", "Austria", "Portugal", "Vietnam"]
MAX_TOKENS = 8


def chat_body(model, subject, stream):
    return {"model": model, "messages": [{"role": "user", "content": f"What is the capital of {subject}?"}],
            "max_completion_tokens": MAX_TOKENS, "temperature": 0, "stream": stream}


def streamed(base_url, model, subject):
    status, _, events, done, _ = sse_post(base_url, "/v1/chat/completions", chat_body(model, subject, True))
    text = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
    finish = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
    return status, done, text, finish


def test_concurrent_streams_match_sequential(base_url, model):
    assert len(SUBJECTS) == 24
    with ThreadPoolExecutor(max_workers=len(SUBJECTS)) as pool:
        results = list(pool.map(lambda s: streamed(base_url, model, s), SUBJECTS))
    for subject, (status, done, text, finish) in zip(SUBJECTS, results):
        assert status == 200, subject
        assert done, f"{subject}: no [DONE]"
        assert text.strip(), f"{subject}: empty answer"
        assert "\ufffd" not in text and "<|im" not in text, (subject, text)
        assert len(finish) == 1 and finish[0] in ("stop", "length"), (subject, finish)
    # One by one, non-streamed: the same greedy text (batch invariance over HTTP).
    for subject, (_, _, text, _) in zip(SUBJECTS, results):
        status, resp = post_json(base_url, "/v1/chat/completions", chat_body(model, subject, False))
        assert status == 200, resp
        assert resp["choices"][0]["message"]["content"] == text, subject
