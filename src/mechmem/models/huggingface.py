"""Hugging Face causal language models as TransformerLens models, weights exactly as published
(`load_pretrained`)."""

import json
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mechmem.errors import MechmemError, one_line
from mechmem.models.backend import BACKEND, TL_VERSION, HookedTransformer, TransformerBridge, move_model
from mechmem.models.hf_folder import check_hf_folder


def load_pretrained(name_or_path: str, *, device: str | torch.device = "cpu") -> nn.Module:
    """A Hugging Face causal language model (a Hub name or a `save_pretrained` folder) as a TransformerLens
    model, weights exactly as published: under TransformerLens 3.x a `HookedTransformer` without layer-norm
    folding or centring, under 4.x `TransformerBridge.boot_transformers` in compatibility mode. Raises
    `MechmemError` with one line when the model cannot be read or converted.

    Nothing is downloaded: a Hub name is read from the local Hugging Face cache, and a name that is neither a
    folder nor in the cache is refused at once (no network retries).
    """
    local = Path(name_or_path).expanduser()
    if local.exists() and not local.is_dir():
        raise MechmemError(f"--hf {name_or_path}: not a folder (a save_pretrained folder or a Hub name)")
    if not local.exists():
        local = cached_snapshot(name_or_path)
    source = str(local.resolve())
    check_hf_folder(local, name_or_path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hf_model = _hf_weights(source, name_or_path)
            if BACKEND == "bridge":
                model = TransformerBridge.boot_transformers(
                    source,
                    device=str(device),
                    dtype=torch.float32,
                    tokenizer=_placeholder_tokenizer(local),
                    hf_model=hf_model,
                )
                model.enable_compatibility_mode(disable_warnings=True, no_processing=True)
            else:
                model = _hooked_from_pretrained(source, hf_model, device)
    except MechmemError:
        raise
    except Exception as exc:  # noqa: BLE001 - transformers / TransformerLens say why in their own words
        raise MechmemError(
            f"--hf {name_or_path}: TransformerLens {TL_VERSION} cannot load it "
            f"({type(exc).__name__}: {one_line(exc)[:200]})"
        ) from None
    return model.eval()


def cached_snapshot(name: str) -> Path:
    """The folder of Hub model `name` in the local Hugging Face cache, found without the network; a one-line
    `MechmemError` naming `name` when it is not there."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached, or not a valid Hub name: the same answer
        raise MechmemError(
            f"--hf {name}: no such folder, and no Hub model of that name in the local Hugging Face cache "
            "(mechmem downloads nothing: pass a save_pretrained folder)"
        ) from None


def _hf_weights(source: str, name: str) -> nn.Module:
    """The Hugging Face model of `source` as `transformers` loads it, from safetensors only (a pickled
    pytorch_model.bin is never read), with every weight it declares read from the files: a weight missing
    (which transformers would draw at random), one left over or one of another shape is a `MechmemError`."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a tiny model loads at once; an error must stay the one line on stderr
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            source,
            dtype=torch.float32,
            use_safetensors=True,
            attn_implementation="eager",
            output_loading_info=True,
        )
    finally:
        if shown:
            hf_logging.enable_progress_bar()
    for what in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        keys = sorted(str(k) for k in info.get(what) or ())
        if keys:
            raise MechmemError(
                f"--hf {name}: its weights do not match its config ({what.replace('_', ' ')}: "
                f"{', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
            )
    return model


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")
"""Files of which a save_pretrained folder holding a tokenizer has at least one."""


def _placeholder_tokenizer(folder: Any) -> Any:
    """For a local folder without a tokenizer (a tiny model needs none: mechmem feeds token ids), a word-level
    tokenizer naming each id of the config's vocabulary (`t0`, `t1`, ...); None otherwise (the model's own
    tokenizer is loaded)."""
    if not folder.is_dir() or any((folder / name).exists() for name in TOKENIZER_FILES):
        return None
    try:
        vocab_size = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(vocab_size, int) or not 1 <= vocab_size <= 10**7:
        return None
    from mechmem.models.tokenizer import word_tokenizer

    return word_tokenizer([f"t{i}" for i in range(vocab_size)])


def _hooked_from_pretrained(source: str, hf_model: nn.Module, device: str | torch.device) -> nn.Module:
    """`HookedTransformer.from_pretrained_no_processing` for a local folder (TransformerLens 3.9's own entry
    point looks local folders up among its official names), from TransformerLens's loading functions."""
    from transformer_lens import loading

    # TransformerLens 3.9 takes a path naming "llama" or "gemma" for that family and reads no config
    neutral = Path(tempfile.mkdtemp(prefix="mechmem-hf-config.")) / "model"
    try:
        neutral.mkdir()
        shutil.copyfile(Path(source) / "config.json", neutral / "config.json")
        cfg = loading.get_pretrained_model_config(str(neutral), device=str(device), dtype=torch.float32)
    finally:
        shutil.rmtree(neutral.parent, ignore_errors=True)
    cfg.tokenizer_name = None  # mechmem feeds token ids; a folder from save_pretrained may hold no tokenizer
    cfg.default_prepend_bos = False
    model = HookedTransformer(cfg, move_to_device=False)
    state = loading.get_pretrained_state_dict(source, cfg, hf_model=hf_model, dtype=torch.float32)
    model.load_and_process_state_dict(
        state, fold_ln=False, center_writing_weights=False, center_unembed=False, fold_value_biases=False
    )
    return move_model(model, device)
