"""/v1/completions through the openai SDK: greedy text, usage, prompt forms, n/seed, stops, logprobs."""

import http.client
import json
import math

from kestrel_e2e import post_json

PROMPT = "The capital of France is"


def tokenize(base_url, model, text, add_special_tokens=True):
    status, body = post_json(base_url, "/tokenize",
                             {"model": model, "prompt": text, "add_special_tokens": add_special_tokens})
    assert status == 200, body
    return body["tokens"]


def greedy(client, model, prompt, max_tokens=8, **extra):
    return client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                     extra_body=extra or None)


def test_greedy_capital_of_france(client, model):
    r = greedy(client, model, PROMPT)
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    assert r.model == model
    assert len(r.choices) == 1
    assert "Paris" in r.choices[0].text


def test_usage_matches_tokenize(client, base_url, model):
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=5, temperature=0,
                                  extra_body={"ignore_eos": True})
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    assert r.usage.prompt_tokens == len(tokenize(base_url, model, PROMPT))
    assert r.usage.completion_tokens == 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_default_max_tokens_is_16(client, model):
    r = client.completions.create(model=model, prompt=PROMPT, temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 16
    assert r.choices[0].finish_reason == "length"


def test_list_of_prompts(client, base_url, model):
    prompts = [PROMPT, "1, 2, 3, 4,", "The opposite of hot is"]
    r = client.completions.create(model=model, prompt=prompts, max_tokens=4, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    by_index = {c.index: c.text for c in r.choices}
    assert "Paris" in by_index[0]
    assert "5" in by_index[1]
    # Each choice answers its own prompt: the same prompt alone gives the same greedy text.
    for i, p in enumerate(prompts):
        single = greedy(client, model, p, max_tokens=4, ignore_eos=True).choices[0].text
        assert by_index[i] == single, (i, p)
    # Usage covers all prompts.
    assert r.usage.completion_tokens == 3 * 4
    assert r.usage.prompt_tokens == sum(len(tokenize(base_url, model, p)) for p in prompts)


def test_token_id_prompt_equals_string_prompt(client, base_url, model):
    ids = tokenize(base_url, model, PROMPT)
    by_text = greedy(client, model, PROMPT)
    by_ids = greedy(client, model, ids)
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert by_ids.usage.prompt_tokens == len(ids)
    # A list of token-id lists is a batch of prompts.
    batch = greedy(client, model, [ids, ids])
    assert [c.text for c in sorted(batch.choices, key=lambda c: c.index)] == [by_text.choices[0].text] * 2


def test_n_with_seed_is_reproducible(client, model):
    def sample(seed):
        r = client.completions.create(model=model, prompt="Once upon a time", max_tokens=12, n=3,
                                      temperature=1.0, seed=seed)
        assert sorted(c.index for c in r.choices) == [0, 1, 2]
        return [c.text for c in sorted(r.choices, key=lambda c: c.index)]

    first = sample(1234)
    assert sample(1234) == first
    # Three samples of 12 tokens at temperature 1 that are all identical mean the choices share one RNG
    # stream (vLLM seeds child i with seed + i).
    assert len(set(first)) > 1, first
    assert sample(4321) != first


def test_stop_string(client, model):
    full = greedy(client, model, PROMPT).choices[0].text
    assert "." in full, full
    r = greedy(client, model, PROMPT, stop=["."])
    c = r.choices[0]
    assert c.text == full[:full.index(".")]
    assert c.finish_reason == "stop"
    assert c.model_extra["stop_reason"] == "."


def test_include_stop_str_in_output(client, model):
    full = greedy(client, model, PROMPT).choices[0].text
    r = greedy(client, model, PROMPT, stop=["."], include_stop_str_in_output=True)
    c = r.choices[0]
    assert c.text == full[:full.index(".") + 1]
    assert c.finish_reason == "stop"
    assert c.model_extra["stop_reason"] == "."


def test_stop_token_ids(client, base_url, model):
    full = greedy(client, model, PROMPT, logprobs=1)
    first_token = full.choices[0].logprobs.tokens[0]
    # The id of the second generated token: tokenize the first two tokens' text and take the last id.
    second_text = full.choices[0].logprobs.tokens[1]
    ids = tokenize(base_url, model, first_token + second_text, add_special_tokens=False)
    stop_id = ids[-1]
    r = greedy(client, model, PROMPT, stop_token_ids=[stop_id])
    c = r.choices[0]
    assert c.finish_reason == "stop"
    assert c.model_extra["stop_reason"] == stop_id
    assert c.text == first_token  # the stop token itself is not in the text
    assert r.usage.completion_tokens == 2


def test_logprobs(client, model):
    r = greedy(client, model, PROMPT, max_tokens=6, logprobs=3)
    c = r.choices[0]
    lp = c.logprobs
    n = r.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert "".join(lp.tokens) == c.text
    for tok, chosen, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert chosen <= 0.0 and math.isfinite(chosen)
        assert 1 <= len(top) <= 4  # top 3, plus the sampled token if it is not among them
        best = max(top.values())
        assert best >= chosen - 1e-4
        # Greedy: the chosen token is the most likely one.
        assert abs(best - chosen) < 1e-3, (tok, chosen, top)
        assert top.get(tok) is not None and abs(top[tok] - chosen) < 1e-4
        assert sum(math.exp(v) for v in top.values()) <= 1.0 + 1e-3
    # text_offset: positions of each token in the returned text (the prompt is not echoed).
    assert lp.text_offset[0] == 0
    for i in range(1, n):
        assert lp.text_offset[i] == lp.text_offset[i - 1] + len(lp.tokens[i - 1])


def test_echo_prepends_prompt(client, model):
    plain = greedy(client, model, PROMPT, max_tokens=4).choices[0].text
    r = greedy(client, model, PROMPT, max_tokens=4, echo=True)
    assert r.choices[0].text == PROMPT + plain
    assert r.usage.completion_tokens == 4 or r.choices[0].finish_reason == "stop"


def test_unknown_fields_are_ignored(client, model):
    r = greedy(client, model, PROMPT, max_tokens=4, some_future_field={"x": 1})
    assert "Paris" in r.choices[0].text


def test_eos_stop_has_null_stop_reason(client, model):
    r = client.completions.create(model=model, prompt="<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
                                  max_tokens=48, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "stop", c
    assert c.model_extra["stop_reason"] is None  # stopped by the EOS token, not a stop string or id
    assert "4" in c.text
    assert r.usage.completion_tokens < 48


def test_null_max_tokens_means_rest_of_context(base_url, model):
    # vLLM: an explicit null max_tokens is "up to the context length", not the default 16. The
    # greedy answer to this question ends with EOS some 60 tokens in.
    prompt = "<|im_start|>user\nName the four seasons of the year.<|im_end|>\n<|im_start|>assistant\n"
    status, resp = post_json(base_url, "/v1/completions",
                             {"model": model, "prompt": prompt, "max_tokens": None, "temperature": 0})
    assert status == 200, resp
    c = resp["choices"][0]
    assert c["finish_reason"] == "stop", resp
    assert c["stop_reason"] is None  # EOS
    assert resp["usage"]["completion_tokens"] > 16


def test_chunked_request_body(base_url, model):
    port = int(base_url.rsplit(":", 1)[1])
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": 4, "temperature": 0}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/v1/completions", body=iter([body[:7], body[7:30], body[30:]]),
                     headers={"Content-Type": "application/json"}, encode_chunked=True)
        resp = conn.getresponse()
        data = json.loads(resp.read())
    finally:
        conn.close()
    assert resp.status == 200, data
    assert "Paris" in data["choices"][0]["text"]


def test_echo_with_logprobs_scores_the_prompt(base_url, model):
    # lm-eval's loglikelihood request: echo + logprobs with one generated token.
    status, resp = post_json(base_url, "/v1/completions",
                             {"model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 0,
                              "echo": True, "logprobs": 1})
    assert status == 200, resp
    c = resp["choices"][0]
    lp = c["logprobs"]
    n_prompt = resp["usage"]["prompt_tokens"]
    assert len(lp["tokens"]) == n_prompt + 1
    assert "".join(lp["tokens"][:n_prompt]) == PROMPT
    assert c["text"] == "".join(lp["tokens"])
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(x <= 0 for x in lp["token_logprobs"][1:])
    # Each prompt position's alternatives include the prompt token itself.
    for tok, top in zip(lp["tokens"][1:n_prompt], lp["top_logprobs"][1:n_prompt]):
        assert tok in top
    # Scoring the generated token as part of a longer prompt gives the same logprob.
    generated = lp["tokens"][-1]
    status, again = post_json(base_url, "/v1/completions",
                              {"model": model, "prompt": PROMPT + generated, "max_tokens": 0,
                               "echo": True, "logprobs": 0})
    assert status == 200, again
    assert again["choices"][0]["logprobs"]["tokens"][-1] == generated
    assert abs(again["choices"][0]["logprobs"]["token_logprobs"][-1]
               - lp["token_logprobs"][-1]) < 1e-3


def test_echo_with_max_tokens_zero_returns_the_prompt_only(base_url, model):
    status, resp = post_json(base_url, "/v1/completions",
                             {"model": model, "prompt": PROMPT, "max_tokens": 0, "echo": True})
    assert status == 200, resp
    c = resp["choices"][0]
    assert c["text"] == PROMPT
    assert c["finish_reason"] == "length"
    assert resp["usage"]["completion_tokens"] == 0


def test_prompt_logprobs_field(base_url, model):
    status, resp = post_json(base_url, "/v1/completions",
                             {"model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 0,
                              "prompt_logprobs": 2})
    assert status == 200, resp
    positions = resp["choices"][0]["prompt_logprobs"]
    assert len(positions) == resp["usage"]["prompt_tokens"]
    assert positions[0] is None
    for entry in positions[1:]:
        assert 1 <= len(entry) <= 3  # the prompt token, plus the top 2 when it is not among them
        ranks = sorted(v["rank"] for v in entry.values())
        assert ranks[0] >= 1
        assert all(v["logprob"] <= 0 for v in entry.values())
