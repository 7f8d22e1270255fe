# AISBench dataset config: AISBench's own GSM8K task (0-shot chat prompt, GSM8KDataset loader,
# gsm8k postprocessors, Gsm8kEvaluator) over a local directory in GSM8K's layout
# (test.jsonl + train.jsonl, lines {"question": ..., "answer": "... #### N"}).
# Default: bench/aisbench/gsm8k_mini (questions written for Kestrel, not the real GSM8K);
# GSM8K_DIR=DIR (bench/aisbench.sh) points it at a real gsm8k/ directory instead.
from ais_bench.benchmark.openicl.icl_prompt_template import PromptTemplate
from ais_bench.benchmark.openicl.icl_retriever import ZeroRetriever
from ais_bench.benchmark.openicl.icl_inferencer import GenInferencer
from ais_bench.benchmark.datasets import GSM8KDataset, gsm8k_postprocess, gsm8k_dataset_postprocess, Gsm8kEvaluator

gsm8k_reader_cfg = dict(input_columns=["question"], output_column="answer")

gsm8k_infer_cfg = dict(
    prompt_template=dict(
        type=PromptTemplate,
        template=dict(
            round=[
                dict(
                    role="HUMAN",
                    prompt='Answer the following question.The last line of the response should follow this format: "answer:$ANSWER" (without quotes), where ANSWER is a number. Let\'s think step by step.\n\nQuestion: {question}',
                ),
            ],
        ),
    ),
    retriever=dict(type=ZeroRetriever),
    inferencer=dict(type=GenInferencer, stopping_criteria=["Question"]),
)

gsm8k_eval_cfg = dict(
    evaluator=dict(type=Gsm8kEvaluator),
    pred_postprocessor=dict(type=gsm8k_postprocess),
    dataset_postprocessor=dict(type=gsm8k_dataset_postprocess),
)

kestrel_gsm8k_mini_datasets = [
    dict(
        abbr="gsm8k-mini",
        type=GSM8KDataset,
        path="@GSM8K_DIR@",
        reader_cfg=gsm8k_reader_cfg,
        infer_cfg=gsm8k_infer_cfg,
        eval_cfg=gsm8k_eval_cfg,
    )
]
