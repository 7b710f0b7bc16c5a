"""Builds the small tokenizer Plinth ships for benchmarks (runtime/catalog/tokenizers/plinth-sim).

AIPerf needs a tokenizer to cut synthetic prompts to a length, and benchmarks never download one at
run time. This one is a byte-level BPE of 4,096 tokens trained on AIPerf's own prompt corpus, and
it splits text exactly where the simulator's tokenizer does (``runtime/sim/tokenizer.py``: leading
whitespace plus up to six visible characters), so a prompt AIPerf cuts to N tokens is close to N
tokens for the simulated engine too. Token counts in results come from the server
(``--use-server-token-count``), never from this file.

Run once with a Python that has ``tokenizers`` (the tools environment does):
``<PLINTH_TOOLS_DIR>/aiperf-0.13.0/bin/python scripts/make_bench_tokenizer.py CORPUS``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

OUT = Path(__file__).resolve().parent.parent / "runtime/catalog/tokenizers/plinth-sim"
VOCAB = 4096
SIM_PIECE = r"\s*\S{1,6}|\s+"  # runtime/sim/tokenizer.py's _PIECE


def build(corpus: Path) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SIM_PIECE), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(corpus)], trainer)
    return tok


def main() -> int:
    tok = build(Path(sys.argv[1]))
    OUT.mkdir(parents=True, exist_ok=True)
    tok.save(str(OUT / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 131072,
        "eos_token": "<|endoftext|>",
        "bos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
    }
    (OUT / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
