"""Request fields beyond the basics, through the openai SDK and raw HTTP: logit_bias,
allowed_token_ids and bad_words change what is sampled; fields Kestrel does not implement that
would change the output are a 400 naming them; fields that change nothing are accepted."""

import openai
import pytest

from kestrel_e2e import get_json, post_json

PROMPT = "The capital of France is"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def token_ids(base_url, model, text):
    status, resp = post_json(base_url, "/tokenize",
                             {"model": model, "prompt": text, "add_special_tokens": False})
    assert status == 200
    return resp["tokens"]


def greedy(client, model, **extra):
    return client.completions.create(model=model, prompt=PROMPT, max_tokens=6, temperature=0,
                                     logprobs=1, extra_body=extra or None).choices[0]


def test_logit_bias_changes_greedy_choice_and_logprobs(client, model, base_url):
    plain = greedy(client, model)
    first = token_ids(base_url, model, plain.text)[0]
    # -100 bans the greedy token; +100 forces another one everywhere.
    banned = client.completions.create(model=model, prompt=PROMPT, max_tokens=6, temperature=0,
                                       logit_bias={str(first): -100}).choices[0]
    assert token_ids(base_url, model, banned.text)[0] != first
    forced_id = token_ids(base_url, model, " banana")[0]
    forced = client.completions.create(model=model, prompt=PROMPT, max_tokens=3, temperature=0,
                                       logprobs=1, logit_bias={str(forced_id): 100}).choices[0]
    assert token_ids(base_url, model, forced.text) == [forced_id] * 3
    # Logprobs are those of the biased distribution: a +100 token is (almost) certain.
    assert all(lp > -1e-3 for lp in forced.logprobs.token_logprobs)


def test_logit_bias_out_of_vocab_is_400(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model, prompt=PROMPT, max_tokens=2,
                                  logit_bias={"99999999": 5})
    assert "out-of-vocab" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=QUESTION, max_tokens=2,
                                       logit_bias={"-1": 5})


def test_allowed_token_ids_restrict_sampling(client, model, base_url):
    allowed = token_ids(base_url, model, " yes no maybe")
    for seed in range(3):
        r = client.chat.completions.create(model=model, messages=QUESTION, max_tokens=5, seed=seed,
                                           extra_body={"allowed_token_ids": allowed,
                                                       "ignore_eos": True})
        assert set(token_ids(base_url, model, r.choices[0].message.content)) <= set(allowed)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model, prompt=PROMPT, max_tokens=2,
                                  extra_body={"allowed_token_ids": [10 ** 9]})
    assert "allowed_token_ids" in str(e.value)


def test_bad_words_are_never_generated(client, model):
    plain = greedy(client, model).text
    word = plain.split()[0]
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=6, temperature=0,
                                  extra_body={"bad_words": [word]}).choices[0]
    assert word not in r.text.split(), (plain, r.text)


def test_cache_salt_keeps_prefix_hits_apart(client, model):
    prompt = "Salted prompt. " * 30
    args = dict(model=model, prompt=prompt, max_tokens=1, temperature=0)
    client.completions.create(extra_body={"cache_salt": "alpha"}, **args)
    other = client.completions.create(extra_body={"cache_salt": "beta"}, **args)
    same = client.completions.create(extra_body={"cache_salt": "alpha"}, **args)
    assert (other.usage.prompt_tokens_details is None or
            not other.usage.prompt_tokens_details.cached_tokens)
    assert same.usage.prompt_tokens_details.cached_tokens > 0


def test_truncate_prompt_tokens_keeps_the_end(client, model):
    long = "one two three four five six seven eight nine ten " * 10
    # echo with max_tokens 0 returns exactly the prompt the model saw.
    r = client.completions.create(model=model, prompt=long, max_tokens=0, echo=True,
                                  extra_body={"truncate_prompt_tokens": 8})
    assert r.usage.prompt_tokens == 8
    assert r.choices[0].text and long.endswith(r.choices[0].text), r.choices[0].text
    right = client.completions.create(model=model, prompt=long, max_tokens=0, echo=True,
                                      extra_body={"truncate_prompt_tokens": 8,
                                                  "truncation_side": "right"})
    assert long.startswith(right.choices[0].text), right.choices[0].text
    # A prompt longer than the context is fine with truncate_prompt_tokens=-1.
    huge = list(range(100, 2600))
    r = client.completions.create(model=model, prompt=huge, max_tokens=2,
                                  extra_body={"truncate_prompt_tokens": -1})
    assert r.usage.prompt_tokens == 2048 - 2


@pytest.mark.parametrize("field,value", [
    ("use_beam_search", True), ("logprob_token_ids", [1]), ("thinking_token_budget", 10),
    ("repetition_detection", {"max_pattern_size": 4}), ("guided_json", {"type": "object"}),
    ("guided_choice", ["a"]), ("return_token_ids", True), ("watermarking", True)])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_unimplemented_output_changing_fields_are_400(base_url, model, path, field, value):
    body = {"model": model, "max_tokens": 2, field: value}
    body.update({"prompt": PROMPT} if path == "/v1/completions" else {"messages": QUESTION})
    status, resp = post_json(base_url, path, body)
    assert status == 400, resp
    assert resp["error"]["param"] == field and field in resp["error"]["message"]


@pytest.mark.parametrize("field,value", [
    ("functions", [{"name": "f", "parameters": {}}]), ("function_call", "auto"),
    ("modalities", ["text", "audio"]), ("web_search_options", {}), ("return_prompt_text", True)])
def test_chat_only_refused_fields(base_url, model, field, value):
    status, resp = post_json(base_url, "/v1/chat/completions",
                             {"model": model, "messages": QUESTION, "max_tokens": 2, field: value})
    assert status == 400 and resp["error"]["param"] == field, resp


def test_fields_that_change_nothing_are_accepted(client, model):
    r = client.chat.completions.create(
        model=model, messages=QUESTION, max_tokens=3, temperature=0, user="u-1",
        metadata={"k": "v"}, store=False, service_tier="auto",
        extra_body={"use_beam_search": False, "session_id": "s", "stream_interval": 2,
                    "some_unknown_field": 1, "modalities": ["text"]})
    assert r.choices[0].message.content is not None


def test_priority_needs_priority_scheduling(base_url, model):
    status, resp = post_json(base_url, "/v1/completions",
                             {"model": model, "prompt": PROMPT, "max_tokens": 2, "priority": 1})
    assert status == 400 and "Priority scheduling is not enabled" in resp["error"]["message"]


def test_huge_max_tokens_error_is_worded_as_vllm(base_url, model):
    # Regression: this used to report "a maximum input length of -9991808 tokens".
    status, resp = post_json(base_url, "/v1/chat/completions",
                             {"model": model, "messages": QUESTION, "max_tokens": 9993856})
    assert status == 400 and resp["error"]["param"] == "input_tokens"
    msg = resp["error"]["message"]
    assert msg.startswith("This model's maximum context length is 2048 tokens. However, you "
                          "requested 9993856 output tokens"), msg
    assert "-" not in msg


def test_model_retrieve(client, model, base_url):
    card = client.models.retrieve(model)
    assert card.id == model and card.object == "model"
    status, body = get_json(base_url, "/v1/models/nope")
    assert status == 404 and body["error"]["message"] == "The model `nope` does not exist."
