"""Many concurrent streamed chats all finish, and greedy output does not depend on the batch."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kestrel_e2e import post_json, request, sse_post

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


def test_slow_request_preparation_does_not_block_the_io_threads(base_url, model):
    # Chat templates, tokenizing and grammar compilation run on the request workers: while
    # several requests with a slow template are being prepared, the HTTP I/O threads (two) still
    # answer at once. Each slow request takes about 2 s to render.
    slow = "{% for i in range(2000000) %}{% endfor %}{{ messages[0]['content'] }}"
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            "chat_template": slow}
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        post_json(base_url, "/v1/chat/completions", body, timeout=120)[0])) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.3)  # the slow requests are in their handlers now
    t0 = time.monotonic()
    status, _, _ = request(base_url, "GET", "/health", timeout=30)
    health_s = time.monotonic() - t0
    t0 = time.monotonic()
    status_models, _, _ = request(base_url, "GET", "/v1/models", timeout=30)
    for t in threads:
        t.join()
    assert status == 200 and status_models == 200
    assert health_s < 1.0, f"/health took {health_s:.2f} s behind slow chat templates"
    assert results == [200, 200, 200]
