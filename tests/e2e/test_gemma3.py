"""Gemma3-270M on its real Q4_K_M GGUF (scripts/fetch-gemma3.sh), served with the Gemma3 chat
template from ../shared: the chat prompt renders to the ids llama.cpp was given for the same
conversation (tests/fixtures/gemma3_270m/llamacpp_greedy.json), and the greedy answer is
llama.cpp's up to the first step where llama.cpp's own top-2 margin is a near-tie."""

import json

import pytest

from kestrel_e2e import KESTREL_SHARED, MODELS_DIR, REPO, is_test_data_required, post_json

GEMMA3 = MODELS_DIR / "gemma-3-270m-q4_k_m.gguf"
TEMPLATE = KESTREL_SHARED / "testdata" / "chat_templates" / "gemma3.jinja"
GOLDEN = REPO / "tests" / "fixtures" / "gemma3_270m" / "llamacpp_greedy.json"
NEAR_TIE = 0.5  # as tests/model/gemma3_gguf_test.cc: below it llama.cpp's choice is noise


@pytest.fixture
def gemma3(start_server):
    for path in (GEMMA3, TEMPLATE):
        if not path.is_file():
            if is_test_data_required():
                pytest.fail(f"{path} is missing and KESTREL_REQUIRE_TEST_DATA is set")
            pytest.skip(f"{path} is missing")
    return start_server("--chat-template", str(TEMPLATE), "--max-model-len", "2048",
                        model_path=GEMMA3)


def golden_for(text):
    prompts = json.loads(GOLDEN.read_text())["prompts"]
    return next(p for p in prompts if p["text"] == text)


@pytest.mark.parametrize("question", ["What is the capital of France? Answer in one sentence.",
                                      "Write a haiku about autumn leaves."])
def test_chat_answers_with_the_gemma3_template_as_llama_cpp(gemma3, question):
    want = golden_for(f"<start_of_turn>user\n{question}<end_of_turn>\n<start_of_turn>model\n")
    decisive = next((i for i, m in enumerate(want["margins"]) if m < NEAR_TIE),
                    len(want["margins"]))
    assert decisive > 0
    status, body = post_json(gemma3.base_url, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": question}], "max_tokens": decisive,
        "temperature": 0, "logprobs": True, "return_tokens_as_token_ids": True})
    assert status == 200, body
    assert body["usage"]["prompt_tokens"] == len(want["ids"])
    ids = [int(t["token"].split(":")[1]) for t in body["choices"][0]["logprobs"]["content"]]
    assert ids == want["greedy"][:decisive]
    assert body["choices"][0]["finish_reason"] == "length"


def test_completions_past_the_sliding_window_match_llama_cpp(gemma3):
    want = max(json.loads(GOLDEN.read_text())["prompts"], key=lambda p: len(p["ids"]))
    assert len(want["ids"]) > 512  # longer than the sliding layers' window
    decisive = next((i for i, m in enumerate(want["margins"]) if m < NEAR_TIE),
                    len(want["margins"]))
    status, body = post_json(gemma3.base_url, "/v1/completions", {
        "prompt": want["ids"], "max_tokens": decisive, "temperature": 0, "logprobs": 0,
        "return_tokens_as_token_ids": True})
    assert status == 200, body
    ids = [int(t.split(":")[1]) for t in body["choices"][0]["logprobs"]["tokens"]]
    assert ids == want["greedy"][:decisive]
