"""Shared test helpers: the repository root, the one script loader, small model builders with overridable
defaults, the one brief training loop, the one wait on a child process, the one hook-leak check and the one
tolerant comparison of records."""

import importlib.util
import math
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
"""The repository root. Tests reach data, docs and scripts from here, never from the working directory."""


def load_script(script: str) -> ModuleType:
    """The module of a script (scripts are not a package), to call its `main` in-process.

    `script` is a name in analyses/ ("report" is analyses/report.py) or a path relative to the repository root
    ("benchmarks/patching.py"). Each call executes the file afresh; the module is not added to `sys.modules`.
    """
    path = ROOT / script if script.endswith(".py") else ROOT / "analyses" / f"{script}.py"
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    assert spec is not None and spec.loader is not None, f"{path} is not a Python file"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_transformer_cfg(**overrides: Any) -> Any:
    """A small TransformerConfig; pass keyword arguments to change any field."""
    from mechmem.models.transformer_config import TransformerConfig

    defaults = {"n_layers": 2, "d_model": 16, "n_heads": 2, "d_vocab": 6, "n_ctx": 9, "d_mlp": 32}
    defaults.update(overrides)
    return TransformerConfig(**defaults)


def build_model(seed: int = 0, **overrides: Any) -> Any:
    """A random HookedTransformer from `build_transformer_cfg(**overrides)`, weights drawn from `seed`, in
    eval mode."""
    from mechmem.models.transformer import build_transformer

    cfg = build_transformer_cfg(**overrides)
    return build_transformer(cfg, generator=torch.Generator().manual_seed(seed)).eval()


def trained_induction_model() -> Any:
    """A 2-layer attention-only model trained briefly (300 steps, ~3 s) on the generic repeats task [r, r],
    |r| from 4 to 12 (n_ctx 24, 16 tokens): an induction circuit with real spread over prompts, unlike the
    planted model's. The one definition is benchmarks/decisions.py's `trained`."""
    return load_script("benchmarks/decisions.py").trained()


def train_briefly(
    model: torch.nn.Module,
    task: Any,
    steps: int,
    *,
    batch_size: int,
    lr: float,
    seed: int,
    optimizer: type[torch.optim.Optimizer] = torch.optim.Adam,
    **optimizer_kwargs: Any,
) -> torch.nn.Module:
    """Train `model` in place for `steps` steps on `task`'s masked next-token loss, with batches of
    `batch_size` drawn from a generator seeded with `seed` and `optimizer(params, lr=lr, **optimizer_kwargs)`;
    return it in eval mode. The tests' one hand-written training loop, for a briefly trained model; training
    itself is tested through mechmem's trainer."""
    opt = optimizer(model.parameters(), lr=lr, **optimizer_kwargs)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        batch = task.train_batch(batch_size, generator=gen)
        loss = task.loss(model(batch.tokens), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def random_tokens(model: Any, batch: int = 8, pos: int | None = None, seed: int = 0) -> torch.Tensor:
    """Uniform random tokens for `model`, [batch pos] (pos defaults to the model's context)."""
    pos = model.cfg.n_ctx if pos is None else pos
    return torch.randint(model.cfg.d_vocab, (batch, pos), generator=torch.Generator().manual_seed(seed))


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen, *, timeout_s: float) -> bool:
    """Wait until `condition()` holds while `proc` runs: True once it does, False when `proc` ended first or
    `timeout_s` passed. Between looks it waits on the process itself (at most 50 ms), so its end stops the
    wait at once; there is no fixed sleep."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        try:
            proc.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            continue
        return condition()
    return True


def assert_no_hooks(model: torch.nn.Module) -> None:
    """No hook is left anywhere: neither TransformerLens hook points nor plain torch module hooks.

    Hooks the model's own libraries install on it as part of the model (a TransformerLens 4 bridge's capture
    hooks, `transformers`' output capturing) are not counted.
    """
    for name, module in model.named_modules():
        for kind in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
            hooks = [fn for fn in (getattr(module, kind, None) or {}).values() if not _models_own(fn)]
            assert not hooks, f"{kind} left on {name or 'the model'}"
        assert not getattr(module, "fwd_hooks", None), f"TransformerLens forward hooks left on {name}"
        assert not getattr(module, "bwd_hooks", None), f"TransformerLens backward hooks left on {name}"
    assert not getattr(model, "context_level", 0), "the model is still inside a hooks() context"


def _models_own(fn: Any) -> bool:
    """A hook function TransformerLens 4's bridge or `transformers` defines for the model's own working."""
    return (getattr(fn, "__module__", None) or "").startswith(
        ("transformer_lens.model_bridge.", "transformers.")
    )


def assert_records_close(
    actual: Any, expected: Any, *, rel: float, abs: float = 0.0, path: str = "record"
) -> None:
    """`actual` equals `expected` (nested dicts, lists and tuples of JSON-like values) with floats compared by
    `math.isclose(rel_tol=rel, abs_tol=abs)`; ints, strings, bools and None must be exactly equal.

    For records computed by numerical libraries (polyfit, lstsq, BLAS sums): their last digits differ between
    machines, so each test names the tolerance it allows. Two NaNs count as equal.
    """
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: a {type(actual).__name__}, expected a dict"
        assert actual.keys() == expected.keys(), f"{path}: keys {sorted(actual)} != {sorted(expected)}"
        for key in expected:
            assert_records_close(actual[key], expected[key], rel=rel, abs=abs, path=f"{path}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)), f"{path}: a {type(actual).__name__}, expected a sequence"
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_records_close(a, e, rel=rel, abs=abs, path=f"{path}[{i}]")
    elif isinstance(expected, float) or isinstance(actual, float):
        numbers = [isinstance(x, (int, float)) and not isinstance(x, bool) for x in (actual, expected)]
        assert all(numbers), f"{path}: {actual!r} != {expected!r}"
        both_nan = math.isnan(actual) and math.isnan(expected)
        assert both_nan or math.isclose(actual, expected, rel_tol=rel, abs_tol=abs), (
            f"{path}: {actual!r} != {expected!r} (rel {rel:g}, abs {abs:g})"
        )
    else:
        assert type(actual) is type(expected) and actual == expected, f"{path}: {actual!r} != {expected!r}"


# -- a synthetic run of step checkpoints (training dynamics) ------------------------------------------------
SAVE_EVERY = 10
"""The save interval of `write_series`."""


def ramp(step: int, at: int) -> float:
    """A logistic blend from 0 to 1 centred on step `at` (width 3 steps)."""
    return 1.0 / (1.0 + math.exp(-(step - at) / 3.0))


def write_series(out: Path, prev_at: int, induction_at: int, last: int = 200) -> None:
    """Checkpoints of the planted induction model whose previous-token head (L0H2) and induction head (L1H1)
    are blended in from a random init around `prev_at` and `induction_at`, saved every `SAVE_EVERY` steps up
    to `last` (unpadded names: step_10.pt, ...)."""
    from mechmem.analysis import planted
    from mechmem.checkpoint import save_checkpoint
    from mechmem.models import build_model
    from mechmem.models.weights import canonical_state_dict, load_canonical_state_dict
    from mechmem.tasks.generic import RepeatsConfig

    target, config = planted.planted_induction_model(), planted.planted_config()
    start = canonical_state_dict(build_model(config, generator=torch.Generator().manual_seed(1)))
    heads = {planted.PREVIOUS_TOKEN_HEAD: prev_at, planted.INDUCTION_HEAD: induction_at}
    for step in range(SAVE_EVERY, last + 1, SAVE_EVERY):
        state = {k: v.clone() for k, v in canonical_state_dict(target).items()}
        for (layer, head), at in heads.items():
            a = ramp(step, at)
            for w in ("W_Q", "W_K", "W_V", "W_O"):
                name = f"blocks.{layer}.attn.{w}"
                state[name][head] = (1 - a) * start[name][head] + a * state[name][head]
        model = planted.planted_induction_model()
        load_canonical_state_dict(model, state)
        save_checkpoint(
            out / "checkpoints" / f"step_{step}.pt",
            model=model,
            model_config=config,
            task_name="repeats",
            task_config=RepeatsConfig(d_vocab=12, half=11),
        )
