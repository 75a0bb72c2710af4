"""Every public name of `mechmem` against wrong inputs, as a notebook user calls it.

Each case calls one public name with one bad argument and expects a one-line `TypeError` (a wrong kind of
value) or `ValueError` / `MechmemError` (a wrong value) whose message names the bad argument, raised before
any work is done. A second round calls a few names with good but unusual inputs (integer tokens of another
dtype, a float64 model, TransformerLens's own buffers) and expects no refusal. Tiny models are built once per
module; nothing trains.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from helpers import build_model

import mechmem
from mechmem.errors import MechmemError

pytestmark = pytest.mark.usefixtures("one_thread")

TYPE = (TypeError,)
"""A value of the wrong kind."""
VALUE = (ValueError, MechmemError)
"""A value of the right kind that is out of range, of the wrong shape, or does not fit the model or task."""
NAN, INF = float("nan"), float("inf")


@dataclass(frozen=True)
class World:
    """The inputs the cases draw on: the planted induction model with its repeats task, a permutation-sized
    model, other tasks, good tokens, pairs and a saved checkpoint."""

    model: Any
    task: Any
    perm_model: Any
    facts: Any
    tokens: torch.Tensor
    pair: Any
    facts_pair: Any
    checkpoint: Any
    run_dir: Any
    tmp: Any

    def ints(self, *shape: int, high: int = 12, dtype: torch.dtype = torch.long) -> torch.Tensor:
        return torch.randint(high, shape, generator=torch.Generator().manual_seed(0)).to(dtype)

    def head(self, hook: str = "blocks.1.attn.hook_z", index: tuple = (slice(None), 1), setter: Any = None):
        return mechmem.Intervention(hook, index, setter or mechmem.zero())


@pytest.fixture(scope="module")
def w(tmp_path_factory) -> World:
    model = mechmem.planted_induction_model()
    task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    gen = torch.Generator().manual_seed(0)
    facts = mechmem.build_task("facts")
    tmp = tmp_path_factory.mktemp("api_inputs")
    path = mechmem.save_model(model, tmp / "planted.pt", task_name="repeats", task_config=task.config)
    run_dir = tmp / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    return World(
        model=model,
        task=task,
        perm_model=build_model(),
        facts=facts,
        tokens=task.eval_batch(4, generator=gen).tokens,
        pair=task.patching_pair(4, generator=gen),
        facts_pair=facts.patching_pair(4, generator=gen),
        checkpoint=mechmem.load_checkpoint(path),
        run_dir=run_dir,
        tmp=tmp,
    )


def loss_of(w: World) -> Callable[[torch.Tensor], torch.Tensor]:
    """The task's next-token loss on `w.tokens`' batch (a good metric)."""
    batch = w.task.eval_batch(4, generator=torch.Generator().manual_seed(0))
    return lambda logits: w.task.loss(logits, batch)


def nan_metric(logits: torch.Tensor) -> torch.Tensor:
    return logits.sum() * NAN


def inf_metric(logits: torch.Tensor) -> torch.Tensor:
    return logits[:, -1, 0].sum() + INF


def logits_metric(logits: torch.Tensor) -> torch.Tensor:
    return logits[:, -1]


def string_metric(logits: torch.Tensor) -> str:
    return "high"


def fake_pair(w: World, **change: Any) -> Any:
    """`w.pair` with some fields replaced (built without its own checks, as a user's edited copy would be)."""
    from mechmem.tasks.base import PatchingPair

    fields = {k: getattr(w.pair, k) for k in ("clean", "corrupted", "answer_pos", "correct", "incorrect")}
    return PatchingPair(**(fields | change))


def dynamics_result() -> Any:
    from mechmem.analysis.dynamics.measure import Dynamics

    return Dynamics([1, 2], {"loss": [1.0, 0.5]}, {"loss": ["loss"]}, {})


# Each case: (id, call on the world, expected exception kinds, a word the message must contain).
CASES: list[tuple[str, Callable[[World], Any], tuple, str]] = []


def case(name: str, kinds: tuple, word: str) -> Callable[[Callable[[World], Any]], None]:
    def add(fn: Callable[[World], Any]) -> None:
        CASES.append((name, fn, kinds, word))

    return add


def cases(prefix: str, kinds: tuple, word: str, table: dict[str, Callable[[World], Any]]) -> None:
    for name, fn in table.items():
        CASES.append((f"{prefix}-{name}", fn, kinds, word))


BAD_MODELS = {
    "none": lambda w: None,
    "linear": lambda w: torch.nn.Linear(3, 3),
    "string": lambda w: "gpt2",
    "dict": lambda w: w.model.state_dict(),
}
"""Things passed where a model belongs."""


def bad_tokens(w: World) -> dict[str, tuple[tuple, torch.Tensor | Any]]:
    """Wrong tokens for the planted model (d_vocab 12, n_ctx 24), each with the exception kinds it needs."""
    return {
        "float": (TYPE, w.tokens.float()),
        "bool": (TYPE, w.tokens > 3),
        "list": (TYPE, w.tokens.tolist()),
        "none": (TYPE, None),
        "one-d": (VALUE, w.tokens[0]),
        "three-d": (VALUE, w.tokens[None]),
        "no-rows": (VALUE, w.tokens[:0]),
        "no-positions": (VALUE, w.tokens[:, :0]),
        "too-long": (VALUE, w.ints(4, 25)),
        "above-vocab": (VALUE, torch.full((4, 9), 99)),
        "negative": (VALUE, torch.full((4, 9), -1)),
    }


TOKEN_KINDS = ["float", "bool", "list", "none", "one-d", "three-d", "no-rows", "no-positions", "too-long"]
TOKEN_KINDS += ["above-vocab", "negative"]


def token_cases(prefix: str, call: Callable[[World, Any], Any], word: str = "tokens") -> None:
    for kind in TOKEN_KINDS:
        CASES.append(
            (
                f"{prefix}-tokens-{kind}",
                lambda w, kind=kind: call(w, bad_tokens(w)[kind][1]),
                TYPE if kind in ("float", "bool", "list", "none") else VALUE,
                word,
            )
        )


def model_cases(prefix: str, call: Callable[[World, Any], Any]) -> None:
    for kind, make in BAD_MODELS.items():
        CASES.append((f"{prefix}-model-{kind}", lambda w, make=make: call(w, make(w)), TYPE, "model"))


# -- intervene and the intervention spec ----------------------------------------------------------------
model_cases("intervene", lambda w, m: mechmem.intervene(m, w.tokens, [w.head()], loss_of(w)))
token_cases("intervene", lambda w, t: mechmem.intervene(w.model, t, [w.head()], lambda x: x[:, -1, 0].mean()))
cases(
    "intervene",
    VALUE,
    "index",
    {
        "head-999": lambda w: mechmem.intervene(
            w.model, w.tokens, [w.head(index=(slice(None), 999))], loss_of(w)
        ),
        "head--99": lambda w: mechmem.intervene(
            w.model, w.tokens, [w.head(index=(slice(None), -99))], loss_of(w)
        ),
        "pos-999": lambda w: mechmem.intervene(
            w.model, w.tokens, [w.head("blocks.0.hook_resid_pre", (999,))], loss_of(w)
        ),
        "too-many-axes": lambda w: mechmem.intervene(
            w.model, w.tokens, [w.head("blocks.0.hook_resid_pre", (0, 0, 0, 0))], loss_of(w)
        ),
        "from-run-999": lambda w: mechmem.intervene(
            w.model,
            w.tokens,
            [w.head(index=(slice(None), 999), setter=mechmem.from_run(w.tokens))],
            loss_of(w),
        ),
    },
)
cases(
    "intervene",
    VALUE,
    "hook",
    {
        "layer-9": lambda w: mechmem.intervene(
            w.model, w.tokens, [w.head("blocks.9.attn.hook_z")], loss_of(w)
        ),
        "unknown-hook": lambda w: mechmem.intervene(w.model, w.tokens, [w.head("nonsense")], loss_of(w)),
    },
)
cases(
    "intervene",
    VALUE,
    "metric",
    {
        "nan": lambda w: mechmem.intervene(w.model, w.tokens, [w.head()], nan_metric),
        "inf": lambda w: mechmem.intervene(w.model, w.tokens, [w.head()], inf_metric),
    },
)
cases(
    "intervene",
    TYPE,
    "metric",
    {
        "none": lambda w: mechmem.intervene(w.model, w.tokens, [w.head()], None),
        "number": lambda w: mechmem.intervene(w.model, w.tokens, [w.head()], 3),
        "returns-string": lambda w: mechmem.intervene(w.model, w.tokens, [w.head()], string_metric),
    },
)
cases(
    "intervene",
    TYPE,
    "variants",
    {
        "one-intervention": lambda w: mechmem.intervene(w.model, w.tokens, w.head(), loss_of(w)),
        "string-variant": lambda w: mechmem.intervene(
            w.model, w.tokens, ["blocks.0.attn.hook_z"], loss_of(w)
        ),
        "none": lambda w: mechmem.intervene(w.model, w.tokens, None, loss_of(w)),
    },
)
cases(
    "intervene",
    VALUE,
    "memory_mb",
    {
        f"memory-{v}": lambda w, v=v: mechmem.intervene(
            w.model, w.tokens, [w.head()], loss_of(w), memory_mb=v
        )
        for v in (0, -1, NAN, INF)
    },
)
cases(
    "intervene",
    TYPE,
    "memory_mb",
    {
        f"memory-{v!r}": lambda w, v=v: mechmem.intervene(
            w.model, w.tokens, [w.head()], loss_of(w), memory_mb=v
        )
        for v in ("big", True, None)
    },
)
cases(
    "Intervention",
    TYPE,
    "hook",
    {"hook-number": lambda w: mechmem.Intervention(3), "hook-none": lambda w: mechmem.Intervention(None)},
)
cases(
    "Intervention",
    TYPE,
    "index",
    {
        "index-int": lambda w: mechmem.Intervention("blocks.0.attn.hook_z", 1),
        "index-string": lambda w: mechmem.Intervention("blocks.0.attn.hook_z", "L0H1"),
    },
)
cases(
    "Intervention",
    TYPE,
    "setter",
    {
        "setter-string": lambda w: mechmem.Intervention("blocks.0.attn.hook_z", (), "zero"),
        "setter-function": lambda w: mechmem.Intervention("blocks.0.attn.hook_z", (), mechmem.zero),
    },
)
cases(
    "setter",
    TYPE,
    "tokens",
    {
        "mean-float": lambda w: mechmem.mean(w.tokens.float()),
        "mean-none": lambda w: mechmem.mean(None),
        "resample-list": lambda w: mechmem.resample(w.tokens.tolist()),
        "from-run-float": lambda w: mechmem.from_run(w.tokens.float()),
    },
)
cases(
    "setter",
    VALUE,
    "tokens",
    {
        "mean-1d": lambda w: mechmem.mean(w.tokens[0]),
        "mean-empty": lambda w: mechmem.mean(w.tokens[:0]),
        "mean-above-vocab": lambda w: mechmem.intervene(
            w.model, w.tokens, [w.head(setter=mechmem.mean(torch.full((4, 24), 99)))], loss_of(w)
        ),
        "from-run-negative": lambda w: mechmem.intervene(
            w.model, w.tokens, [w.head(setter=mechmem.from_run(torch.full((4, 24), -1)))], loss_of(w)
        ),
    },
)
cases(
    "setter",
    TYPE,
    "generator",
    {
        "resample-seed": lambda w: mechmem.resample(w.tokens, 0),
        "resample-string": lambda w: mechmem.resample(w.tokens, "seed"),
    },
)
cases(
    "setter", TYPE, "fn", {"apply-none": lambda w: mechmem.apply(None), "apply-3": lambda w: mechmem.apply(3)}
)

# -- detect_heads, logit_lens, composition, probes --------------------------------------------------------
model_cases("detect_heads", lambda w, m: mechmem.detect_heads(m, w.tokens))
token_cases("detect_heads", lambda w, t: mechmem.detect_heads(w.model, t))
cases(
    "detect_heads",
    VALUE,
    "chunk",
    {f"chunk-{v}": lambda w, v=v: mechmem.detect_heads(w.model, w.tokens, chunk=v) for v in (0, -1)},
)
cases(
    "detect_heads",
    TYPE,
    "chunk",
    {f"chunk-{v!r}": lambda w, v=v: mechmem.detect_heads(w.model, w.tokens, chunk=v) for v in (True, 2.5)},
)
cases(
    "detect_heads",
    VALUE,
    "resamples",
    {"resamples--1": lambda w: mechmem.detect_heads(w.model, w.tokens, resamples=-1)},
)
cases(
    "detect_heads",
    TYPE,
    "generator",
    {"generator-int": lambda w: mechmem.detect_heads(w.model, w.tokens, generator=1)},
)
cases(
    "detect_heads",
    TYPE,
    "pattern",
    {
        "pattern-number": lambda w: mechmem.detect_heads(w.model, w.tokens, {"mine": 3}),
        "patterns-list": lambda w: mechmem.detect_heads(w.model, w.tokens, ["previous_token"]),
    },
)
cases(
    "detect_heads",
    VALUE,
    "pattern",
    {"pattern-shape": lambda w: mechmem.detect_heads(w.model, w.tokens, {"mine": torch.ones(3, 3)})},
)
model_cases("logit_lens", lambda w, m: mechmem.logit_lens(m, w.tokens, w.tokens))
token_cases("logit_lens", lambda w, t: mechmem.logit_lens(w.model, t, w.tokens))
cases(
    "logit_lens",
    VALUE,
    "k",
    {f"k-{v}": lambda w, v=v: mechmem.logit_lens(w.model, w.tokens, w.tokens, k=v) for v in (0, -1)},
)
cases(
    "logit_lens",
    TYPE,
    "k",
    {
        f"k-{v!r}": lambda w, v=v: mechmem.logit_lens(w.model, w.tokens, w.tokens, k=v)
        for v in (1.5, True, "5")
    },
)
cases(
    "logit_lens",
    VALUE,
    "targets",
    {
        "targets-shape": lambda w: mechmem.logit_lens(w.model, w.tokens, w.tokens[:, :5]),
        "targets-above-vocab": lambda w: mechmem.logit_lens(w.model, w.tokens, torch.full_like(w.tokens, 99)),
        "targets-negative": lambda w: mechmem.logit_lens(w.model, w.tokens, torch.full_like(w.tokens, -1)),
    },
)
cases(
    "logit_lens",
    TYPE,
    "targets",
    {"targets-float": lambda w: mechmem.logit_lens(w.model, w.tokens, w.tokens.float())},
)
cases(
    "logit_lens",
    VALUE,
    "mask",
    {
        "mask-shape": lambda w: mechmem.logit_lens(w.model, w.tokens, w.tokens, torch.ones(4, 5)),
        "mask-nan": lambda w: mechmem.logit_lens(w.model, w.tokens, w.tokens, torch.full((4, 24), NAN)),
    },
)
model_cases("composition_scores", lambda w, m: mechmem.composition_scores(m))
cases(
    "composition_scores",
    VALUE,
    "baseline_draws",
    {f"draws-{v}": lambda w, v=v: mechmem.composition_scores(w.model, baseline_draws=v) for v in (0, -5)},
)
cases(
    "composition_scores",
    TYPE,
    "baseline_draws",
    {"draws-str": lambda w: mechmem.composition_scores(w.model, baseline_draws="100")},
)
cases(
    "composition_scores",
    TYPE,
    "generator",
    {"generator-int": lambda w: mechmem.composition_scores(w.model, generator=0)},
)
model_cases("builtin_probes", lambda w, m: mechmem.builtin_probes(m))
cases(
    "builtin_probes",
    VALUE,
    "tokens",
    {
        "tokens-above-vocab": lambda w: mechmem.builtin_probes(w.model, tokens=torch.tensor([99])),
        "key-tokens-negative": lambda w: mechmem.builtin_probes(w.model, key_tokens=torch.tensor([-1])),
        "ffn-tokens-above-vocab": lambda w: mechmem.builtin_probes(w.model, ffn_tokens=torch.tensor([12])),
    },
)
cases(
    "builtin_probes",
    TYPE,
    "tokens",
    {"tokens-float": lambda w: mechmem.builtin_probes(w.model, tokens=torch.ones(3))},
)
cases(
    "builtin_probes",
    VALUE,
    "first_positions",
    {"positions-0": lambda w: mechmem.builtin_probes(w.model, first_positions=(0,))},
)
cases(
    "builtin_probes",
    VALUE,
    "bigram",
    {"bigram-shape": lambda w: mechmem.builtin_probes(w.model, bigram=torch.ones(3, 3))},
)

# -- task-level analyses: roles, qk, circuits, patching, ablation -----------------------------------------
model_cases("head_roles", lambda w, m: mechmem.head_roles(m, w.task, n=64))
cases(
    "head_roles",
    VALUE,
    "task",
    {
        "perm-model-facts-task": lambda w: mechmem.head_roles(w.perm_model, w.facts, n=64),
        "planted-facts-task": lambda w: mechmem.head_roles(w.model, w.facts, n=64),
    },
)
cases("head_roles", TYPE, "task", {"task-name": lambda w: mechmem.head_roles(w.model, "repeats", n=64)})
cases(
    "head_roles",
    VALUE,
    "n",
    {f"n-{v}": lambda w, v=v: mechmem.head_roles(w.model, w.task, n=v) for v in (0, -5)},
)
cases(
    "head_roles",
    TYPE,
    "n",
    {f"n-{v!r}": lambda w, v=v: mechmem.head_roles(w.model, w.task, n=v) for v in (2.5, True, "64")},
)
cases(
    "head_roles",
    TYPE,
    "seed",
    {f"seed-{v!r}": lambda w, v=v: mechmem.head_roles(w.model, w.task, n=64, seed=v) for v in ("a", 1.5)},
)
cases(
    "head_roles",
    TYPE,
    "thresholds",
    {"thresholds-dict": lambda w: mechmem.head_roles(w.model, w.task, n=64, thresholds={"attention": 0.5})},
)
cases(
    "head_roles",
    TYPE,
    "policy",
    {"policy-str": lambda w: mechmem.head_roles(w.model, w.task, n=64, policy="fast")},
)
model_cases("qk_attribution", lambda w, m: mechmem.qk_attribution(m, w.task, n=8))
cases(
    "qk_attribution",
    VALUE,
    "head",
    {
        "L9H0": lambda w: mechmem.qk_attribution(w.model, w.task, heads=["L9H0"], n=8),
        "L0H9": lambda w: mechmem.qk_attribution(w.model, w.task, heads=["L0H9"], n=8),
        "garbage": lambda w: mechmem.qk_attribution(w.model, w.task, heads=["head one"], n=8),
    },
)
cases("qk_attribution", VALUE, "n", {"n-0": lambda w: mechmem.qk_attribution(w.model, w.task, n=0)})
cases("qk_attribution", VALUE, "task", {"facts": lambda w: mechmem.qk_attribution(w.model, w.facts, n=8)})
model_cases("circuit_prompts", lambda w, m: mechmem.circuit_prompts(m, w.task, 8, 0))
cases(
    "circuit_prompts",
    VALUE,
    "n",
    {f"n-{v}": lambda w, v=v: mechmem.circuit_prompts(w.model, w.task, v, 0) for v in (0, -1)},
)
cases(
    "circuit_prompts",
    TYPE,
    "n",
    {f"n-{v!r}": lambda w, v=v: mechmem.circuit_prompts(w.model, w.task, v, 0) for v in (1.5, True)},
)
cases(
    "circuit_prompts", TYPE, "seed", {"seed-str": lambda w: mechmem.circuit_prompts(w.model, w.task, 8, "0")}
)
cases("circuit_prompts", VALUE, "task", {"facts": lambda w: mechmem.circuit_prompts(w.model, w.facts, 8, 0)})
model_cases("decided_circuit", lambda w, m: mechmem.decided_circuit(m, w.task))
cases(
    "decided_circuit",
    VALUE,
    "share",
    {
        f"share-{v}": lambda w, v=v: mechmem.decided_circuit(w.model, w.task, share=v)
        for v in (2.0, -0.1, NAN)
    },
)
cases(
    "decided_circuit",
    VALUE,
    "memory_mb",
    {f"memory-{v}": lambda w, v=v: mechmem.decided_circuit(w.model, w.task, memory_mb=v) for v in (0, -1)},
)
cases(
    "decided_circuit",
    VALUE,
    "max_exact",
    {
        f"max-exact-{v}": lambda w, v=v: mechmem.decided_circuit(w.model, w.task, max_exact=v)
        for v in (-1, -10)
    },
)
cases(
    "decided_circuit",
    VALUE,
    "steps",
    {"steps--1": lambda w: mechmem.decided_circuit(w.model, w.task, steps=-1)},
)
cases(
    "decided_circuit",
    VALUE,
    "ablation",
    {"ablation-x": lambda w: mechmem.decided_circuit(w.model, w.task, ablation="x")},
)
cases(
    "decided_circuit",
    VALUE,
    "head",
    {
        "L9H0": lambda w: mechmem.decided_circuit(w.model, w.task, heads=["L9H0"]),
        "garbage": lambda w: mechmem.decided_circuit(w.model, w.task, heads=["first"]),
    },
)
cases("decided_circuit", VALUE, "task", {"facts": lambda w: mechmem.decided_circuit(w.model, w.facts)})
cases(
    "decided_circuit",
    VALUE,
    "reference",
    {
        "reference-above-vocab": lambda w: mechmem.decided_circuit(
            w.model, w.task, reference=torch.full((4, 24), 99)
        )
    },
)
model_cases("discover_circuit", lambda w, m: mechmem.discover_circuit(m, w.pair))
cases(
    "discover_circuit",
    VALUE,
    "target",
    {
        f"target-{v}": lambda w, v=v: mechmem.discover_circuit(w.model, w.pair, target=v)
        for v in (0.0, 1.5, NAN)
    },
)
cases(
    "discover_circuit",
    VALUE,
    "threshold",
    {"threshold-nan": lambda w: mechmem.discover_circuit(w.model, w.pair, threshold=NAN)},
)
cases(
    "discover_circuit",
    VALUE,
    "memory_mb",
    {"memory-0": lambda w: mechmem.discover_circuit(w.model, w.pair, memory_mb=0)},
)
cases(
    "discover_circuit",
    VALUE,
    "max_exact",
    {"max-exact--1": lambda w: mechmem.discover_circuit(w.model, w.pair, max_exact=-1)},
)
cases(
    "discover_circuit",
    VALUE,
    "ablation",
    {"ablation-x": lambda w: mechmem.discover_circuit(w.model, w.pair, ablation="x")},
)
cases("discover_circuit", TYPE, "pair", {"pair-none": lambda w: mechmem.discover_circuit(w.model, None)})
cases(
    "discover_circuit",
    VALUE,
    "tokens",
    {"facts-pair": lambda w: mechmem.discover_circuit(w.model, w.facts_pair)},
)
model_cases("run_sweeps", lambda w, m: mechmem.run_sweeps(m, w.pair, ["resid_pre"]))
cases(
    "run_sweeps",
    VALUE,
    "tokens",
    {
        "pair-of-other-task": lambda w: mechmem.run_sweeps(w.perm_model, w.pair, ["resid_pre"]),
        "facts-pair": lambda w: mechmem.run_sweeps(w.model, w.facts_pair, ["resid_pre"]),
        "pair-negative": lambda w: mechmem.run_sweeps(
            w.model, fake_pair(w, clean=-w.pair.clean - 1, corrupted=-w.pair.corrupted - 1), ["resid_pre"]
        ),
    },
)
cases(
    "run_sweeps",
    TYPE,
    "pair",
    {
        "pair-none": lambda w: mechmem.run_sweeps(w.model, None, ["resid_pre"]),
        "pair-tokens": lambda w: mechmem.run_sweeps(w.model, w.tokens, ["resid_pre"]),
    },
)
cases(
    "run_sweeps",
    VALUE,
    "answer_pos",
    {
        "answer-pos-99": lambda w: mechmem.run_sweeps(
            w.model, fake_pair(w, answer_pos=torch.full((4,), 99)), ["resid_pre"]
        )
    },
)
cases(
    "run_sweeps",
    VALUE,
    "correct",
    {
        "correct-99": lambda w: mechmem.run_sweeps(
            w.model, fake_pair(w, correct=torch.full((4,), 99)), ["resid_pre"]
        )
    },
)
cases(
    "run_sweeps",
    VALUE,
    "incorrect",
    {
        "incorrect--1": lambda w: mechmem.run_sweeps(
            w.model, fake_pair(w, incorrect=torch.full((4,), -1)), ["resid_pre"]
        )
    },
)
cases(
    "run_sweeps", VALUE, "sweep", {"unknown-sweep": lambda w: mechmem.run_sweeps(w.model, w.pair, ["nope"])}
)
cases(
    "run_sweeps",
    TYPE,
    "sweeps",
    {"sweeps-string": lambda w: mechmem.run_sweeps(w.model, w.pair, "resid_pre")},
)
cases(
    "run_sweeps",
    VALUE,
    "direction",
    {"direction-x": lambda w: mechmem.run_sweeps(w.model, w.pair, ["resid_pre"], direction="up")},
)
cases(
    "run_sweeps",
    VALUE,
    "metric",
    {
        "metric-nan": lambda w: mechmem.run_sweeps(
            w.model, w.pair, ["resid_pre"], metric=lambda l: torch.tensor(NAN)
        ),
        "metric-nan-readout": lambda w: mechmem.run_sweeps(w.model, w.pair, ["resid_pre"], metric=nan_metric),
        "metric-inf": lambda w: mechmem.run_sweeps(w.model, w.pair, ["resid_pre"], metric=inf_metric),
        "metric-shape": lambda w: mechmem.run_sweeps(w.model, w.pair, ["resid_pre"], metric=logits_metric),
    },
)
cases(
    "run_sweeps",
    TYPE,
    "metric",
    {"metric-number": lambda w: mechmem.run_sweeps(w.model, w.pair, ["resid_pre"], metric=3)},
)
cases(
    "run_sweeps",
    VALUE,
    "memory_mb",
    {
        f"memory-{v}": lambda w, v=v: mechmem.run_sweeps(w.model, w.pair, ["resid_pre"], memory_mb=v)
        for v in (0, -1, NAN)
    },
)
cases(
    "run_sweeps",
    VALUE,
    "readout",
    {
        "readout-99": lambda w: mechmem.run_sweeps(
            w.model, w.pair, ["resid_pre"], metric=loss_of(w), readout=[99]
        )
    },
)
model_cases("attribute_sweeps", lambda w, m: mechmem.attribute_sweeps(m, w.pair, ["resid_pre"]))
cases(
    "attribute_sweeps",
    TYPE,
    "pair",
    {"pair-none": lambda w: mechmem.attribute_sweeps(w.model, None, ["resid_pre"])},
)
cases(
    "attribute_sweeps",
    VALUE,
    "tokens",
    {"facts-pair": lambda w: mechmem.attribute_sweeps(w.model, w.facts_pair, ["resid_pre"])},
)
cases(
    "attribute_sweeps",
    VALUE,
    "direction",
    {"direction-x": lambda w: mechmem.attribute_sweeps(w.model, w.pair, ["resid_pre"], direction="up")},
)
cases(
    "attribute_sweeps",
    VALUE,
    "steps",
    {"steps--1": lambda w: mechmem.attribute_sweeps(w.model, w.pair, ["resid_pre"], steps=-1)},
)
cases(
    "attribute_sweeps",
    VALUE,
    "metric",
    {"metric-nan": lambda w: mechmem.attribute_sweeps(w.model, w.pair, ["resid_pre"], metric=nan_metric)},
)
model_cases("decided_patching", lambda w, m: mechmem.decided_patching(m, w.task, ["resid_pre"]))
cases(
    "decided_patching",
    VALUE,
    "share",
    {
        f"share-{v}": lambda w, v=v: mechmem.decided_patching(w.model, w.task, ["resid_pre"], share=v)
        for v in (2.0, -1, NAN)
    },
)
cases(
    "decided_patching",
    TYPE,
    "share",
    {"share-str": lambda w: mechmem.decided_patching(w.model, w.task, ["resid_pre"], share="0.1")},
)
cases(
    "decided_patching",
    VALUE,
    "min_gap",
    {
        f"min-gap-{v}": lambda w, v=v: mechmem.decided_patching(w.model, w.task, ["resid_pre"], min_gap=v)
        for v in (NAN, -1, INF)
    },
)
cases(
    "decided_patching",
    VALUE,
    "memory_mb",
    {
        f"memory-{v}": lambda w, v=v: mechmem.decided_patching(w.model, w.task, ["resid_pre"], memory_mb=v)
        for v in (0, -1)
    },
)
cases(
    "decided_patching",
    VALUE,
    "method",
    {"method-x": lambda w: mechmem.decided_patching(w.model, w.task, ["resid_pre"], method="x")},
)
cases(
    "decided_patching",
    VALUE,
    "direction",
    {"direction-x": lambda w: mechmem.decided_patching(w.model, w.task, ["resid_pre"], direction="x")},
)
cases(
    "decided_patching",
    VALUE,
    "task",
    {"facts": lambda w: mechmem.decided_patching(w.model, w.facts, ["resid_pre"])},
)
cases(
    "decided_patching",
    TYPE,
    "task",
    {"task-none": lambda w: mechmem.decided_patching(w.model, None, ["resid_pre"])},
)
cases(
    "decided_patching",
    VALUE,
    "sweep",
    {"unknown-sweep": lambda w: mechmem.decided_patching(w.model, w.task, ["nope"])},
)
cases(
    "decided_patching",
    TYPE,
    "policy",
    {"policy-str": lambda w: mechmem.decided_patching(w.model, w.task, ["resid_pre"], policy="x")},
)
cases(
    "decided_patching",
    TYPE,
    "seed",
    {"seed-str": lambda w: mechmem.decided_patching(w.model, w.task, ["resid_pre"], seed="x")},
)
model_cases("decided_ablation", lambda w, m: mechmem.decided_ablation(m, w.task))
cases(
    "decided_ablation",
    VALUE,
    "threshold",
    {
        f"threshold-{v}": lambda w, v=v: mechmem.decided_ablation(w.model, w.task, threshold=v)
        for v in (NAN, INF, -INF)
    },
)
cases(
    "decided_ablation",
    TYPE,
    "threshold",
    {"threshold-str": lambda w: mechmem.decided_ablation(w.model, w.task, threshold="0.1")},
)
cases(
    "decided_ablation",
    VALUE,
    "method",
    {
        "methods-x": lambda w: mechmem.decided_ablation(w.model, w.task, methods=("bogus",)),
        "methods-empty": lambda w: mechmem.decided_ablation(w.model, w.task, methods=()),
    },
)
cases(
    "decided_ablation",
    TYPE,
    "methods",
    {"methods-string": lambda w: mechmem.decided_ablation(w.model, w.task, methods="mean")},
)
cases(
    "decided_ablation",
    VALUE,
    "metric",
    {"metric-x": lambda w: mechmem.decided_ablation(w.model, w.task, metric="bogus")},
)
cases("decided_ablation", VALUE, "task", {"facts": lambda w: mechmem.decided_ablation(w.model, w.facts)})
model_cases("ablate_heads", lambda w, m: mechmem.ablate_heads(m, w.tokens, loss_of(w)))
token_cases("ablate_heads", lambda w, t: mechmem.ablate_heads(w.model, t, lambda x: x[:, -1, 0].mean()))
cases(
    "ablate_heads",
    VALUE,
    "metric",
    {
        "metric-nan": lambda w: mechmem.ablate_heads(w.model, w.tokens, nan_metric),
        "metric-shape": lambda w: mechmem.ablate_heads(w.model, w.tokens, logits_metric),
    },
)
cases(
    "ablate_heads", TYPE, "metric", {"metric-none": lambda w: mechmem.ablate_heads(w.model, w.tokens, None)}
)
cases(
    "ablate_heads",
    VALUE,
    "method",
    {"methods-x": lambda w: mechmem.ablate_heads(w.model, w.tokens, loss_of(w), methods=("x",))},
)
cases(
    "ablate_heads",
    VALUE,
    "reference",
    {
        "reference-above-vocab": lambda w: mechmem.ablate_heads(
            w.model, w.tokens, loss_of(w), reference=torch.full((4, 24), 99)
        )
    },
)
cases(
    "ablate_heads",
    TYPE,
    "reference",
    {
        "reference-float": lambda w: mechmem.ablate_heads(
            w.model, w.tokens, loss_of(w), reference=w.tokens.float()
        )
    },
)
cases(
    "ablate_heads",
    TYPE,
    "generator",
    {"generator-int": lambda w: mechmem.ablate_heads(w.model, w.tokens, loss_of(w), generator=3)},
)
model_cases("prompt_fit", lambda w, m: mechmem.prompt_fit(m, w.task, w.pair, generator=torch.Generator()))
cases(
    "prompt_fit",
    TYPE,
    "prompts",
    {"prompts-none": lambda w: mechmem.prompt_fit(w.model, w.task, None, generator=torch.Generator())},
)
cases(
    "prompt_fit",
    TYPE,
    "generator",
    {"generator-int": lambda w: mechmem.prompt_fit(w.model, w.task, w.pair, generator=0)},
)
cases(
    "prompt_fit",
    VALUE,
    "task",
    {"facts": lambda w: mechmem.prompt_fit(w.model, w.facts, w.pair, generator=torch.Generator())},
)
cases(
    "prompt_fit",
    VALUE,
    "tokens",
    {"facts-pair": lambda w: mechmem.prompt_fit(w.model, w.task, w.facts_pair, generator=torch.Generator())},
)

# -- report, dynamics, checkpoints, tasks, training, plots --------------------------------------------------
model_cases("build_report", lambda w, m: mechmem.build_report(m, w.task, n_samples=8))
cases(
    "build_report",
    VALUE,
    "n_samples",
    {f"n-samples-{v}": lambda w, v=v: mechmem.build_report(w.model, w.task, n_samples=v) for v in (0, -1)},
)
cases(
    "build_report",
    TYPE,
    "n_samples",
    {"n-samples-float": lambda w: mechmem.build_report(w.model, w.task, n_samples=8.5)},
)
cases(
    "build_report",
    VALUE,
    "role_samples",
    {"role-samples-0": lambda w: mechmem.build_report(w.model, w.task, n_samples=8, role_samples=0)},
)
cases("build_report", VALUE, "task", {"facts": lambda w: mechmem.build_report(w.model, w.facts, n_samples=8)})
cases(
    "build_report",
    TYPE,
    "title",
    {"title-int": lambda w: mechmem.build_report(w.model, w.task, n_samples=8, title=3)},
)
cases(
    "report_checkpoint",
    TYPE,
    "ckpt",
    {"path": lambda w: mechmem.report_checkpoint(str(w.tmp / "planted.pt"), w.tmp / "r", n_samples=8)},
)
cases(
    "report_checkpoint",
    VALUE,
    "n_samples",
    {"n-samples-0": lambda w: mechmem.report_checkpoint(w.checkpoint, w.tmp / "r0", n_samples=0)},
)
cases(
    "run_dynamics",
    VALUE,
    "run directory",
    {
        "missing": lambda w: mechmem.run_dynamics(w.tmp / "no-such-run"),
        "a-file": lambda w: mechmem.run_dynamics(w.tmp / "planted.pt"),
    },
)
cases("run_dynamics", VALUE, "checkpoints", {"no-checkpoints": lambda w: mechmem.run_dynamics(w.run_dir)})
cases("run_dynamics", TYPE, "run_dir", {"none": lambda w: mechmem.run_dynamics(None)})
cases("run_dynamics", VALUE, "quantit", {"unknown": lambda w: mechmem.run_dynamics(w.run_dir, ["bogus"])})
cases("run_dynamics", TYPE, "quantities", {"string": lambda w: mechmem.run_dynamics(w.run_dir, "loss")})
cases("run_dynamics", VALUE, "n", {"n-0": lambda w: mechmem.run_dynamics(w.run_dir, ["loss"], n=0)})
cases(
    "load_checkpoint",
    VALUE,
    "missing.pt",
    {
        "missing": lambda w: mechmem.load_checkpoint(w.tmp / "missing.pt"),
    },
)
cases("load_checkpoint", VALUE, "directory", {"a-folder": lambda w: mechmem.load_checkpoint(w.tmp)})
cases("load_checkpoint", TYPE, "path", {"none": lambda w: mechmem.load_checkpoint(None)})
cases(
    "load_checkpoint",
    VALUE,
    "device",
    {"device-x": lambda w: mechmem.load_checkpoint(w.tmp / "planted.pt", device="nonsense")},
)
model_cases("save_model", lambda w, m: mechmem.save_model(m, w.tmp / "bad.pt"))
cases("save_model", TYPE, "path", {"path-none": lambda w: mechmem.save_model(w.model, None)})
cases(
    "save_model",
    VALUE,
    "task",
    {
        "task-unknown": lambda w: mechmem.save_model(w.model, w.tmp / "bad.pt", task_name="bogus"),
        "task-facts": lambda w: mechmem.save_model(w.model, w.tmp / "bad.pt", task_name="facts"),
    },
)
cases(
    "save_checkpoint",
    TYPE,
    "model",
    {
        "model-none": lambda w: mechmem.save_checkpoint(
            w.tmp / "bad.pt", model=None, model_config=None, task_name="repeats", task_config=w.task.config
        )
    },
)
cases(
    "build_task",
    VALUE,
    "task",
    {"unknown": lambda w: mechmem.build_task("bogus"), "empty": lambda w: mechmem.build_task("")},
)
cases("build_task", TYPE, "task", {"none": lambda w: mechmem.build_task(None)})
cases(
    "build_task",
    VALUE,
    "d_vocab",
    {"d-vocab-negative": lambda w: mechmem.build_task("repeats", {"d_vocab": -1})},
)
cases("build_task", VALUE, "bogus", {"unknown-field": lambda w: mechmem.build_task("repeats", {"bogus": 1})})
cases("build_task", TYPE, "config", {"config-int": lambda w: mechmem.build_task("repeats", 3)})
cases("build_task", VALUE, "half", {"half-0": lambda w: mechmem.build_task("repeats", {"half": 0})})
cases(
    "register_task",
    TYPE,
    "task",
    {"int": lambda w: mechmem.register_task(int), "none": lambda w: mechmem.register_task(None)},
)
cases(
    "train_preset",
    VALUE,
    "task",
    {"unknown-task": lambda w: mechmem.train_preset("bogus", "quick", out_dir=w.tmp / "t0", progress=False)},
)
cases(
    "train_preset",
    VALUE,
    "preset",
    {
        "unknown-preset": lambda w: mechmem.train_preset(
            "permutation", "bogus", out_dir=w.tmp / "t1", progress=False
        )
    },
)
cases(
    "train_preset",
    VALUE,
    "steps",
    {
        f"steps-{v}": lambda w, v=v: mechmem.train_preset(
            "permutation", "task1-quick", steps=v, out_dir=w.tmp / f"t-steps{v}", progress=False
        )
        for v in (0, -1)
    },
)
cases(
    "train_preset",
    VALUE,
    "save_every",
    {
        "save-every-0": lambda w: mechmem.train_preset(
            "permutation", "task1-quick", steps=2, save_every=0, out_dir=w.tmp / "t-save0", progress=False
        )
    },
)
cases(
    "train_preset",
    VALUE,
    "device",
    {
        "device-x": lambda w: mechmem.train_preset(
            "permutation", "task1-quick", steps=2, device="nonsense", out_dir=w.tmp / "t-dev", progress=False
        )
    },
)
cases("plot", TYPE, "plot", {"none": lambda w: mechmem.plot(None), "number": lambda w: mechmem.plot(3)})
cases(
    "plot",
    VALUE,
    "quantity",
    {
        "dynamics-no-quantity": lambda w: mechmem.plot(dynamics_result(), quantity="heads"),
    },
)
cases(
    "decide",
    TYPE,
    "draw",
    {
        "draw-none": lambda w: mechmem.decide(
            None, {"x": 0.1}, policy=mechmem.analysis.stats.HEAD_POLICY, generator=torch.Generator()
        )
    },
)
cases(
    "decide",
    TYPE,
    "generator",
    {
        "generator-int": lambda w: mechmem.decide(
            lambda n, generator: {}, {"x": 0.1}, policy=mechmem.analysis.stats.HEAD_POLICY, generator=0
        )
    },
)
cases(
    "decide",
    VALUE,
    "threshold",
    {
        "threshold-nan": lambda w: mechmem.decide(
            lambda n, generator: {},
            {"x": NAN},
            policy=mechmem.analysis.stats.HEAD_POLICY,
            generator=torch.Generator(),
        )
    },
)
cases(
    "PatchingResult",
    VALUE,
    "values",
    {
        "values-shape": lambda w: mechmem.PatchingResult(
            "resid_pre", ("layer", "pos"), torch.zeros(3), "denoising", "m", 0.0, 1.0
        )
    },
)
cases(
    "PatchingResult",
    VALUE,
    "direction",
    {
        "direction-x": lambda w: mechmem.PatchingResult(
            "resid_pre", ("layer", "pos"), torch.zeros(2, 3), "sideways", "m", 0.0, 1.0
        )
    },
)


def one_line_naming(exc: BaseException, word: str) -> None:
    message = str(exc).strip()
    assert message and "\n" not in message, f"not one line: {message!r}"
    assert word.lower() in message.lower(), f"{word!r} not named in {message!r}"


@pytest.mark.parametrize("name, call, kinds, word", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_one_clear_error(w, as_a_user_calls, name, call, kinds, word):
    with pytest.raises(kinds) as info:
        call(w)
    one_line_naming(info.value, word)


def test_the_round_is_large_and_covers_every_public_name():
    called = {name.split("-")[0] for name, *_ in CASES}
    exempt = {"CheckpointError", "MechmemError", "__version__", "task_names", "planted_induction_model"}
    exempt |= {"Checkpoint", "zero"}  # a record from load_checkpoint; a setter without arguments
    assert len(CASES) >= 150
    spelled = {"setter": {"mean", "resample", "from_run", "apply"}}
    reached = called | {n for group in spelled.values() for n in group}
    assert set(mechmem.__all__) - exempt <= reached, sorted(set(mechmem.__all__) - exempt - reached)


# -- good input stays good ----------------------------------------------------------------------------------
def assert_same_scores(got: Any, want: Any) -> None:
    assert got.scores.keys() == want.scores.keys()
    for name in want.scores:
        torch.testing.assert_close(got.scores[name], want.scores[name])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8])
def test_integer_tokens_of_any_dtype_pass(w, as_a_user_calls, dtype):
    """Token ids of any integer dtype give the int64 answers (jaxtyping's own test-time check is off)."""
    metric = lambda x: x[:, -1].float().mean()
    want = mechmem.intervene(w.model, w.tokens, [[], w.head()], metric)
    got = mechmem.intervene(w.model, w.tokens.to(dtype), [[], w.head()], metric)
    torch.testing.assert_close(got, want)
    assert_same_scores(
        mechmem.detect_heads(w.model, w.tokens.to(dtype)), mechmem.detect_heads(w.model, w.tokens)
    )


def test_one_short_row_and_a_small_memory_budget_pass(w):
    """One sequence of 5 tokens: the last stage of the lens is the model's own softmax; a budget of half a
    MiB chunks the sweep and changes nothing."""
    tokens, targets = w.tokens[:1, :5], w.tokens[:1, 1:6]
    lens = mechmem.logit_lens(w.model, tokens, targets, k=12)
    probs = w.model(tokens).softmax(-1).gather(-1, targets[..., None])[..., 0]
    torch.testing.assert_close(lens.target_prob[-1], probs, atol=1e-5, rtol=1e-4)
    small = mechmem.run_sweeps(w.model, w.pair, ["resid_pre"], memory_mb=0.5)["resid_pre"]
    full = mechmem.run_sweeps(w.model, w.pair, ["resid_pre"])["resid_pre"]
    torch.testing.assert_close(small.values, full.values)


def test_a_float64_model_passes(w):
    """A float64 copy of a model gives its float32 answers."""
    model = build_model()
    tokens = torch.randint(6, (3, 9), generator=torch.Generator().manual_seed(1))
    variants = [[], mechmem.Intervention("blocks.0.attn.hook_z", (slice(None), 1))]
    want = mechmem.intervene(model, tokens, variants, lambda x: x[:, -1, 0].mean())
    got = mechmem.intervene(model.double(), tokens, variants, lambda x: x[:, -1, 0].mean())
    assert got.dtype == torch.float64
    torch.testing.assert_close(got.float(), want, atol=1e-4, rtol=1e-4)


def test_a_reloaded_model_with_its_buffers_and_another_fitting_task_pass(w):
    """A checkpoint's model (TransformerLens's buffers included) reads like the original; a task of another
    kind that fits the model is accepted."""
    assert_same_scores(
        mechmem.detect_heads(w.checkpoint.model, w.tokens), mechmem.detect_heads(w.model, w.tokens)
    )
    roles = mechmem.head_roles(w.perm_model, mechmem.build_task("permutation"), n=16)
    assert len(roles.heads) == w.perm_model.cfg.n_layers * w.perm_model.cfg.n_heads


def test_every_result_has_a_table_and_a_figure_or_says_why_not(w):
    """A decided patching becomes one long table (share 1 and min_gap 0, the ends of their ranges, pass)."""
    patched = mechmem.decided_patching(w.model, w.task, ["resid_pre", "attn_out"], share=1.0, min_gap=0.0)
    frame = patched.to_dataframe()
    sizes = {name: result.values.numel() for name, result in patched.results.items()}
    assert frame.groupby("sweep").size().to_dict() == sizes and "verdict" in frame
    with pytest.raises(TypeError) as info:
        mechmem.plot(patched)
    one_line_naming(info.value, "results")
    assert type(mechmem.plot(dynamics_result())).__name__ == "Figure"  # one quantity: no quantity= needed
    fit = mechmem.prompt_fit(w.model, w.task, w.pair, generator=torch.Generator().manual_seed(0))
    assert fit.to_dataframe().loc[0, "prompt_loss"] == fit.prompt_loss
