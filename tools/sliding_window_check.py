"""Checks for tools/make_fixtures.py that a sliding-window fixture's goldens really use its
window (Mistral's sliding_window, Qwen2's use_sliding_window / max_window_layers / layer_types):
the masks transformers builds, cached against cache-free decoding, and the logits against the
same weights without a window. load_checkpoint(path, dtype, **config_changes) and new_tokens come
from make_fixtures.py."""
import functools
import json

import torch


def sliding_layers(config):
    """Indices of the layers transformers runs with a sliding window (Mistral has no
    layer_types: its window, when set, applies to every layer)."""
    types = getattr(config, "layer_types", None)
    if types is None:
        kind = "full_attention" if config.sliding_window is None else "sliding_attention"
        types = [kind] * config.num_hidden_layers
    return [i for i, kind in enumerate(types) if kind == "sliding_attention"]


def prefill_masks(model, ids):
    """The [q, kv] bool "may attend" mask each decoder layer's attention gets in a cache-free
    forward of ids (eager attention: additive, 0 where allowed)."""
    masks = {}

    def record(index, _module, _args, kwargs):
        mask = kwargs["attention_mask"][0, 0]
        masks[index] = mask if mask.dtype == torch.bool else mask == 0

    hooks = [layer.self_attn.register_forward_pre_hook(functools.partial(record, i),
                                                        with_kwargs=True)
             for i, layer in enumerate(model.model.layers)]
    with torch.no_grad():
        model(ids, use_cache=False)
    for hook in hooks:
        hook.remove()
    return masks


def check(name, path, model, prompts, greedy, step_logits, load_checkpoint, new_tokens):
    """For sliding-window fixtures, checks that the goldens really use the window:

    - config.json carries it, and each layer's prefill mask is exactly transformers' sliding
      mask (query i attends key j iff i - W < j <= i: the last W tokens, itself included) or
      the causal one (j <= i), as the layer's type says;
    - generate with the KV cache (sliding cache layers) decodes what repeated cache-free full
      forwards decode;
    - on the longest prompt, the same weights without a window give the same logits at
      positions 0..W-1 (whose windows hold the whole prefix) and different ones from
      position W on (the first whose window drops token 0), by a clear margin."""
    config = model.config
    window, layers = config.sliding_window, sliding_layers(config)
    assert window is not None and layers, name
    if config.model_type == "qwen2":
        assert config.use_sliding_window, name
        assert layers == list(range(config.max_window_layers, config.num_hidden_layers)), name
    ids = torch.tensor([prompts[-1]])
    n = ids.shape[1]
    q, k = torch.arange(n).unsqueeze(1), torch.arange(n).unsqueeze(0)
    for i, mask in prefill_masks(model, ids).items():
        expected = (k <= q) & ((k > q - window) if i in layers else True)
        assert torch.equal(mask, expected), (name, i)

    step_diff = 0.0
    with torch.no_grad():
        for prompt, new_ids, steps in zip(prompts, greedy, step_logits):
            seq = list(prompt)
            for step in range(new_tokens):
                last = model(torch.tensor([seq]), use_cache=False).logits[0, -1].float()
                step_diff = max(step_diff, (last - steps[step]).abs().max().item())
                seq.append(int(last.argmax()))
            assert seq[len(prompt):] == new_ids, (name, prompt)

    saved = json.loads((path / "config.json").read_text())
    assert saved["sliding_window"] == window, (name, saved)
    no_window = {"sliding_window": None}
    gemma = config.model_type == "gemma3_text"
    if gemma:
        # Gemma3 always has a window, and its sliding layers their own RoPE base: the same layer
        # types with a window longer than the prompt attend as full layers.
        no_window = {"sliding_window": 4 * n}
    elif "layer_types" in saved:
        no_window["layer_types"] = ["full_attention"] * config.num_hidden_layers
        assert saved["layer_types"] == config.layer_types, (name, saved)
    if "use_sliding_window" in saved:
        no_window["use_sliding_window"] = False
    full = load_checkpoint(path, model.dtype, **no_window)
    assert gemma or (full.config.sliding_window is None and not sliding_layers(full.config)), name
    assert all(torch.equal(mask, k <= q) for mask in prefill_masks(full, ids).values()), name
    with torch.no_grad():
        diff = (model(ids, use_cache=False).logits[0].float()
                - full(ids, use_cache=False).logits[0].float()).abs().amax(-1)
    inside, first, rest = diff[:window].max().item(), diff[window].item(), diff.max().item()
    assert inside == 0.0, (name, diff.tolist())
    assert first > 0.01 and rest > 0.5, (name, diff.tolist())
    print(f"{name}: sliding layers {layers}, window {window}; generate vs cache-free greedy "
          f"identical (max step logit diff {step_diff:.2e}); without the window, prompt "
          f"{n} max |logit diff| {rest:.4f} (positions 0..{window - 1}: {inside:.1e}, "
          f"position {window}: {first:.4f})", flush=True)
