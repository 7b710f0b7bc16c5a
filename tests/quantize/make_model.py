"""Build the tests' small Llama-architecture checkpoint (run in the tool's virtualenv).

``python make_model.py OUT``: four decoder blocks, hidden 64, a 256-token byte-level BPE tokenizer
(the bytes themselves, so no hub download), random weights from a fixed seed, saved in BF16.

One block is given outlier activation channels, as trained LLMs grow them (LLM.int8(), SmoothQuant):
a few channels of its two RMSNorm weights are scaled up by OUTLIER and the matching input columns of
the Linear modules they feed are scaled down by the same factor. In exact arithmetic the model
computes the same function (only BF16 rounding of the rescaled weights differs); what changes is
that those Linear modules now see activations with a few huge channels, which a per-token INT8
activation scale cannot represent next to the small ones while FP8's floating point can. That
is the fair kind of per-layer difference a search should find: nothing about the model's own
output singles the block out, only quantizing it does.
"""

from __future__ import annotations

import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 0
OUTLIER_BLOCK = 2
OUTLIER_CHANNELS = (3, 17, 40)
OUTLIER = 30.0


def tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=256, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(["plinth"], trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def model() -> LlamaForCausalLM:
    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        initializer_range=0.15,  # peaked next-token distributions, so KL has something to move
    )
    net = LlamaForCausalLM(config)
    with torch.no_grad():
        block = net.model.layers[OUTLIER_BLOCK]
        channels = list(OUTLIER_CHANNELS)
        pairs = (
            (
                block.input_layernorm,
                (block.self_attn.q_proj, block.self_attn.k_proj, block.self_attn.v_proj),
            ),
            (block.post_attention_layernorm, (block.mlp.gate_proj, block.mlp.up_proj)),
        )
        for norm, linears in pairs:
            norm.weight[channels] *= OUTLIER
            for linear in linears:
                linear.weight[:, channels] /= OUTLIER
    return net.to(torch.bfloat16)


if __name__ == "__main__":
    out = sys.argv[1]
    model().save_pretrained(out)
    tokenizer().save_pretrained(out)
