"""Token names as a tokenizer: what TransformerLens's `to_str_tokens`, `to_string`, `to_tokens` and
`head_detector.detect_head` call, for a model of a task whose tokens are symbols rather than text.

A task names each token id (`Task.token_names`: "pad", "1", "2", ... for the permutation task; "t", "␣", ...
for a character corpus). `word_tokenizer` turns those names into a Hugging Face word-level tokenizer (ids
joined by spaces when decoded, a string split on whitespace when encoded), the kind of tokenizer both
`HookedTransformer` (TransformerLens 3.9) and `TransformerBridge` (TransformerLens 4) read, so

    model.to_str_tokens(tokens)          # ['3', '1', '2', ...]
    model.to_tokens("3 1 2")             # tensor([[3, 1, 2]])

work under either backend. No BOS token is defined or prepended: mechmem's tasks have none.
"""

from collections.abc import Sequence
from typing import Any

import torch

from mechmem.errors import MechmemError


def vocabulary_names(names: Sequence[str] | None, d_vocab: int) -> list[str]:
    """One distinct, whitespace-free name per token id `0..d_vocab-1`: `names` (a task's), extended with the
    ids as strings (`#id` where that string is taken) for ids the task does not name; None: the ids.

    Example:
        >>> vocabulary_names(["pad", "1", "2"], 5)
        ['pad', '1', '2', '3', '4']
    """
    given = list(names or [])
    if len(given) > d_vocab:
        raise ValueError(f"{len(given)} token names for a vocabulary of {d_vocab}")
    for name in given:
        if not isinstance(name, str) or not name or any(c.isspace() for c in name):
            raise ValueError(f"token name {name!r} is not a non-empty string without whitespace")
    if len(set(given)) != len(given):
        raise ValueError("token names repeat a name; each token id needs its own")
    taken = set(given)
    for i in range(len(given), d_vocab):
        name = str(i) if str(i) not in taken else f"#{i}"
        if name in taken:
            raise ValueError(f"token id {i} has no free name ({str(i)!r} and {name!r} are taken)")
        given.append(name)
        taken.add(name)
    return given


def word_tokenizer(names: Sequence[str]) -> Any:
    """A Hugging Face `PreTrainedTokenizerFast` whose token id i is `names[i]` (distinct names without
    whitespace): a string is split on whitespace and each word looked up (an unknown word is an error at
    `encode`), ids decode to their names joined by single spaces; right padding with id 0.

    Example:
        >>> tok = word_tokenizer(["pad", "1", "2"])
        >>> tok.decode([2, 1]), tok("2 1")["input_ids"]
        ('2 1', [2, 1])
    """
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    names = vocabulary_names(names, len(names))
    core = Tokenizer(WordLevel({name: i for i, name in enumerate(names)}, unk_token=names[0]))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token=names[0], pad_token=names[0], padding_side="right"
    )


def attach_tokenizer(model: torch.nn.Module, names: Sequence[str] | None) -> torch.nn.Module:
    """Give a TransformerLens model (either backend) a word-level tokenizer over its vocabulary
    (`vocabulary_names(names, cfg.d_vocab)`), so `to_str_tokens`, `to_string` and `to_tokens` work; no BOS
    is prepended. Returns the model.

    Example:
        >>> import mechmem, torch
        >>> model = attach_tokenizer(mechmem.planted_induction_model(), None)
        >>> model.to_str_tokens(torch.tensor([3, 1, 4])), model.to_string(torch.tensor([3, 1, 4]))
        (['3', '1', '4'], '3 1 4')
    """
    cfg = getattr(model, "cfg", None)
    d_vocab = getattr(cfg, "d_vocab", None)
    if not isinstance(d_vocab, int) or d_vocab < 1:
        raise MechmemError(f"a {type(model).__name__} has no TransformerLens cfg.d_vocab to name tokens for")
    tokenizer = word_tokenizer(vocabulary_names(names, d_vocab))
    model.tokenizer = tokenizer
    cfg.default_prepend_bos = False
    cfg.tokenizer_prepends_bos = False
    return model
