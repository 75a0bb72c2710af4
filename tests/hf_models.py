"""Tiny random Hugging Face models (GPT-2, GPT-NeoX, Llama) and a word-level tokenizer, built from
`transformers` configs without a network. Not a test module."""

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

VOCAB, CTX = 40, 24
"""The tiny models' vocabulary and context."""


def tiny_hf_model(kind: str) -> torch.nn.Module:
    """A random model of `kind` ("gpt2", "neox" or anything else: Llama), in eval mode."""
    torch.manual_seed(0)  # transformers initialises from the global RNG; tests only
    if kind == "gpt2":
        config = GPT2Config(vocab_size=VOCAB, n_positions=CTX, n_embd=32, n_layer=2, n_head=4)
        return GPT2LMHeadModel(config).eval()
    if kind == "neox":
        config = GPTNeoXConfig(
            vocab_size=VOCAB,
            max_position_embeddings=CTX,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            rotary_pct=0.5,
        )
        return GPTNeoXForCausalLM(config).eval()
    config = LlamaConfig(
        vocab_size=VOCAB,
        max_position_embeddings=CTX,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
    )
    return LlamaForCausalLM(config).eval()


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over the tiny vocabulary, saved beside the weights as a published model's is."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    vocab = {f"t{i}": i for i in range(VOCAB)}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="t0")), unk_token="t0"
    )
