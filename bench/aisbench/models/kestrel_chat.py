# AISBench model config: `kestrel serve` through /v1/chat/completions, not streaming, greedy
# (accuracy runs). A template: bench/aisbench.sh fills in the @NAME@ fields; see bench/README.md.
from ais_bench.benchmark.models import VLLMCustomAPIChat
from ais_bench.benchmark.utils.postprocess.model_postprocessors import extract_non_reasoning_content

models = [
    dict(
        attr="service",
        type=VLLMCustomAPIChat,
        abbr="kestrel-chat",
        path="@TOKENIZER@",
        model="@MODEL@",
        stream=False,
        request_rate=0,
        use_timestamp=False,
        retry=2,
        api_key="",
        url="@BASE_URL@",  # http://HOST:PORT of the server (host_ip/host_port are then unused)
        max_out_len=int("@ACC_OUTPUT_LEN@"),
        batch_size=int("@CONCURRENCY@"),
        trust_remote_code=False,
        generation_kwargs=dict(
            temperature=0.0,
        ),
        pred_postprocessor=dict(type=extract_non_reasoning_content),
    )
]
