"""Writing JSON: strict (NaN and +-inf become null, so every file is valid RFC 8259 JSON) and atomic.

The lowest layer of mechmem with `errors` and `config`: checkpoints, training histories, run records, reports
and scripts all write JSON through these functions (`mechmem.cli` re-exports them for the scripts).
"""

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def strict_json(obj: Any) -> Any:
    """`obj` with every NaN or infinite float replaced by None, so it serialises as strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """`json.dumps` of `strict_json(obj)`; never writes NaN or Infinity."""
    return json.dumps(strict_json(obj), allow_nan=False, **kwargs)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write strict JSON (NaN/inf -> null) atomically (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = dumps(obj, indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
