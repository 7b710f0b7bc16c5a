"""Load a checkpoint the tool wrote back with transformers (run in the tool's virtualenv).

``python reload_checkpoint.py SOURCE CHECKPOINT``: prints one JSON object, the KL(source ||
checkpoint) of the next-token distributions over one text, so a test can tell the export is a
loadable HF checkpoint that still computes the quantized model.
"""

from __future__ import annotations

import json
import sys

import torch
from transformers import AutoModelForCausalLM

TEXT = b"The committee met on Tuesday to review the budget for the coming year."


@torch.no_grad()
def logprobs(path: str) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(path)
    ids = torch.tensor([list(TEXT)])  # the tests' tokenizer is the bytes themselves
    return model(ids).logits.float().log_softmax(-1)


if __name__ == "__main__":
    source, checkpoint = logprobs(sys.argv[1]), logprobs(sys.argv[2])
    kl = (source.exp() * (source - checkpoint)).sum(-1).mean().item()
    print(json.dumps({"kl": kl}))
