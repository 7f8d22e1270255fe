# AISBench model config: `kestrel serve` through /v1/chat/completions, streaming (perf runs).
# A template: bench/aisbench.sh copies it with the @NAME@ fields filled in; see bench/README.md.
from ais_bench.benchmark.models import VLLMCustomAPIChat
from ais_bench.benchmark.utils.postprocess.model_postprocessors import extract_non_reasoning_content

models = [
    dict(
        attr="service",
        type=VLLMCustomAPIChat,
        abbr="kestrel-stream-chat",
        # A tokenizer directory: AISBench's perf summarizer and the tokenid synthetic dataset load it.
        path="@TOKENIZER@",
        model="@MODEL@",
        stream=True,
        request_rate=float("@REQUEST_RATE@"),  # 0: no pacing
        use_timestamp=False,
        retry=2,
        api_key="",
        url="@BASE_URL@",  # http://HOST:PORT of the server (host_ip/host_port are then unused)
        max_out_len=int("@OUTPUT_LEN@"),
        batch_size=int("@CONCURRENCY@"),  # concurrent requests
        trust_remote_code=False,
        generation_kwargs=dict(
            temperature=0.01,
            ignore_eos=True,  # every request decodes max_out_len tokens
        ),
        pred_postprocessor=dict(type=extract_non_reasoning_content),
    )
]
