"""What a local Hugging Face folder may hold before `transformers` or TransformerLens reads any of it.

`check_hf_folder` reads only bounded headers and refuses, each in one line: special files or dangling links;
a missing, oversized, non-object or too deeply nested config.json; pickled weights only; safetensors files
that are cut, malformed or not floating point; config sizes larger than the numbers the weights store.
"""

import json
import math
import stat
import struct
from pathlib import Path
from typing import Any

from mechmem.errors import MechmemError
from mechmem.io import nesting_depth

MAX_CONFIG_BYTES = 2**20
"""Largest config.json read (1 MiB; published ones are a few kB)."""
MAX_CONFIG_DEPTH = 16
"""Deepest nesting of objects and lists in config.json."""
MAX_HEADER_BYTES = 100 * 2**20
"""Largest safetensors header read (the format's own limit)."""
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
"""Safetensors dtypes a weight may have; integer, bool or 8-bit weights are refused, never cast."""
PICKLES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
"""Weight files that are pickles (`torch.save`), which mechmem never loads."""
SIZE_KEYS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "max_position_embeddings", "head_dim", "n_embd", "n_layer", "n_head", "n_inner",
    "n_positions", "n_ctx", "d_model", "ffn_dim", "num_layers", "num_heads",
)  # fmt: skip
"""config.json sizes that no model can hold more of than its weights store numbers."""


def check_hf_folder(folder: Path, name: str) -> None:
    """Raise `MechmemError` (one line, naming `--hf name`) unless `transformers` may read `folder`."""
    for path in sorted(folder.rglob("*")):
        try:
            mode = path.stat().st_mode
        except OSError:
            raise MechmemError(f"--hf {name}: {path.name} is a dangling link or unreadable") from None
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise MechmemError(f"--hf {name}: {path.name} is not a plain file (a FIFO, device or socket)")
    config = _read_config(folder / "config.json", name)
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLES)
        if pickles:
            raise MechmemError(
                f"--hf {name}: its weights are pickles ({', '.join(pickles[:3])}), which mechmem never loads "
                "(unpickling can run code); save the model with safetensors"
            )
        raise MechmemError(f"--hf {name}: no *.safetensors weights in the folder")
    stored = sum(_stored_numbers(path, name) for path in weights)
    for key in SIZE_KEYS:
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, type(None))):
            raise MechmemError(f"--hf {name}: config.json {key} is {value!r}, not an integer")
        if isinstance(value, int) and not 1 <= value <= stored:
            raise MechmemError(
                f"--hf {name}: config.json declares {key} {value}, outside [1, {stored}] (the numbers its "
                "weights store)"
            )


def _read_config(path: Path, name: str) -> dict[str, Any]:
    if not path.is_file():
        raise MechmemError(f"--hf {name}: a folder without config.json (not a save_pretrained folder)")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise MechmemError(f"--hf {name}: config.json is larger than {MAX_CONFIG_BYTES} bytes")
    text = path.read_bytes()
    if nesting_depth(text) > MAX_CONFIG_DEPTH:
        raise MechmemError(f"--hf {name}: config.json nests deeper than {MAX_CONFIG_DEPTH} levels")
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise MechmemError(f"--hf {name}: config.json is not JSON ({type(exc).__name__})") from None
    if not isinstance(config, dict):
        raise MechmemError(f"--hf {name}: config.json is a JSON {type(config).__name__}, not an object")
    return config


def _stored_numbers(path: Path, name: str) -> int:
    """How many numbers a safetensors file stores, after checking its header against its size."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        (length,) = struct.unpack("<Q", head) if len(head) == 8 else (None,)
        if length is None or length > min(MAX_HEADER_BYTES, size - 8):
            raise MechmemError(f"--hf {name}: {path.name} is not a safetensors file (its header is cut)")
        raw = fh.read(length)
    try:
        header = json.loads(raw)
    except ValueError:
        raise MechmemError(f"--hf {name}: {path.name} has a header that is not JSON") from None
    if not isinstance(header, dict):
        raise MechmemError(f"--hf {name}: {path.name} has a header that is not a JSON object")
    data = size - 8 - length
    total = 0
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        if not isinstance(entry, dict) or entry.get("dtype") not in FLOAT_DTYPES:
            dtype = entry.get("dtype") if isinstance(entry, dict) else entry
            raise MechmemError(
                f"--hf {name}: {path.name}: tensor {key} is {dtype!r}, not floating point (refused, not cast)"
            )
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not (
            _ints(shape) and _ints(offsets) and len(offsets) == 2 and 0 <= offsets[0] <= offsets[1] <= data
        ):
            raise MechmemError(
                f"--hf {name}: {path.name}: tensor {key} runs past the end of the file (truncated?)"
            )
        total += math.prod(shape)
    return total


def _ints(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    )
