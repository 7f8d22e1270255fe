"""llama.cpp's greedy continuations and their top-2 logit margins, via llama-cpp-python: the
goldens behind the real-weights tests (tools/make_smollm2_goldens.py, tools/make_gemma3_goldens.py).
"""

import numpy as np


def last_logits(llm):
    """The logits of the last evaluated token (logits_all=False keeps only that row)."""
    return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))


def top2_gap(logits):
    top = np.sort(np.asarray(logits, dtype=np.float64), axis=-1)
    return np.round(top[..., -1] - top[..., -2], 4).tolist()


def llamacpp_greedy(llm, text, steps):
    """Returns (prompt ids, greedy ids, top1-top2 logit gap of each greedy step): the prompt is
    tokenized as llama.cpp does (bos as the GGUF says, special tokens parsed), each greedy token
    is the argmax of the last logits, fed back one at a time with the KV cache; no stop at eos."""
    ids = llm.tokenize(text.encode(), add_bos=llm._model.add_bos_token(), special=True)
    llm.reset()
    llm.eval(ids)
    greedy, gaps = [], []
    for _ in range(steps):
        logits = last_logits(llm)
        token = int(np.argmax(logits))
        greedy.append(token)
        gaps.append(top2_gap(logits))
        llm.eval([token])
    return ids, greedy, gaps
