"""Experiments reproducing "Can a Tiny Transformer Learn to Remember?" (permutation memory, methods.md §1).

Each function takes a trained model and the task, draws its own sequences from an explicit generator, and
returns a small result (plain dicts of floats or dataclasses with `to_dict`). `run_reproduction` runs one cell
per (preset, seed) through `mechmem_papers.executor.run_cells` (in-process, or Ray tasks): each
cell trains the run unless its checkpoint is current (so a killed reproduction resumes) and measures every
experiment on it; the cells' records make one JSON-able dict (the run record); `page.build_page` turns it into
the page.

The larger-V presets live in `mechmem.tasks.permutation`: `v10-quick`, `v15-quick` (CPU) and
`v10-paper`, `v15-paper` (GPU-sized), all trained on repeat data (repeat_ratio 0.3).
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.logit_lens import decode_residual
from mechmem.analysis.neurons import ablate_neurons, neuron_direct_effect, rank_neurons
from mechmem.analysis.roles import head_roles
from mechmem.models.parts import model_device
from mechmem.tasks.permutation import (
    PermutationTask,
    bayes_posterior,
    elimination_floor,
)
from mechmem.training.rundir import finished_run, read_metrics, run_identity
from mechmem_papers.executor import Cell, run_cells, software
from mechmem_papers.permutation.page import load_published


# -- training -----------------------------------------------------------------------------------------------
def run_dir(runs: str | Path, preset: str, seed: int) -> Path:
    """Where the run of `preset` with `seed` lives."""
    return Path(runs) / preset / f"seed{seed}"


def _is_done(runs: Path, preset: str, seed: int) -> bool:
    from mechmem.tasks import get_preset

    want = get_preset("permutation", preset)
    identity = run_identity(want.model, "permutation", want.task, want.train.replace(seed=seed))
    return finished_run(run_dir(runs, preset, seed), identity)


def train_if_missing(preset: str, seed: int, runs: str | Path, device: str = "cpu") -> bool:
    """Train `preset` with `seed` into its run directory unless a current checkpoint is there.

    True if trained.
    """
    from mechmem.training.run import train_preset

    if _is_done(Path(runs), preset, seed):
        return False
    train_preset(
        "permutation",
        preset,
        out_dir=run_dir(runs, preset, seed),
        seed=seed,
        device=device,
        progress=False,
        overwrite=True,
    )
    return True


# -- 1. Bayesian evaluation ---------------------------------------------------------------------------------
@torch.no_grad()
def bayes_table(
    model: Any, task: PermutationTask, n: int, *, generator: torch.Generator
) -> list[dict[str, Any]]:
    """Per answer step on n test sequences (the task's own repeat ratio): accuracy, Bayes target, Bayes error.

    Columns: `acc` (argmax == target), `bayes_acc` (mean of 1 / #candidates: the accuracy of the Bayes-optimal
    predictor), `p_target` (mean model probability of the target) and `bayes_p_target`, `mae` (mean over
    sequences and the V+1 vocabulary entries of |p_model - p_bayes|, as in `answer_stats`), `max_err` (largest
    such entry), `seq_err_q` (median, 90th and 99th percentile over sequences of each sequence's largest
    entry), `loss` and `bayes_loss` (cross-entropy of the target under the model and under the posterior). The
    last step is also split into `elimination` (no repeat) and `memorisation` (repeat) rows.
    """
    seq, repeat = task.sequences(n, generator=generator, split="test")
    tokens, targets = seq[:, :-1], seq[:, 1::2]
    device = model_device(model)
    probs = model(tokens.to(device))[:, 0::2].float().softmax(-1).cpu()
    post = bayes_posterior(tokens, task.config.vocab_size)
    v = task.config.vocab_size
    rows = []

    def row(label: str, step: int, keep: Tensor) -> dict[str, Any]:
        p, b, t = probs[keep, step], post[keep, step], targets[keep, step]
        idx = torch.arange(len(t))
        err = (p - b).abs()
        return {
            "step": label,
            "n": int(keep.sum()),
            "acc": float((p.argmax(-1) == t).float().mean()),
            "bayes_acc": float(b.max(-1).values.mean()),
            "p_target": float(p[idx, t].mean()),
            "bayes_p_target": float(b[idx, t].mean()),
            "mae": float(err.mean()),
            "max_err": float(err.max()),
            "loss": float(-p[idx, t].clamp_min(1e-12).log().mean()),
            "bayes_loss": float(-b[idx, t].log().mean()) + 0.0,
            "seq_err_q": [float(q) for q in err.max(-1).values.quantile(torch.tensor([0.5, 0.9, 0.99]))],
        }

    everyone = torch.ones(n, dtype=torch.bool)
    for k in range(v):
        rows.append(row(str(k + 1), k, everyone))
    if repeat.any():
        rows.append(row(f"{v} elimination", v - 1, ~repeat))
        rows.append(row(f"{v} memorisation", v - 1, repeat))
    return rows


# -- 2. the probe -------------------------------------------------------------------------------------------
@torch.no_grad()
def probe_stats(model: Any, task: PermutationTask, n: int, *, generator: torch.Generator) -> dict[str, float]:
    """Mean and median p(recall answer) and p(elimination answer) on n probes, and how often each is the
    argmax. The median is the typical probe: the seed page reports one probe sequence."""
    probe = task.probe(n, generator=generator)
    device = model_device(model)
    probs = model(probe["tokens"].to(device))[:, -1].float().softmax(-1).cpu()
    top = probs.argmax(-1)
    out = {}
    for answer in ("recall", "elimination"):
        p = probs[torch.arange(n), probe[answer]]
        out |= {f"p_{answer}": float(p.mean()), f"median_p_{answer}": float(p.median())}
        out[f"argmax_{answer}"] = float((top == probe[answer]).float().mean())
    return out


def side_check_run(model: Any, task: PermutationTask, *, seed: int, train_loss: float) -> dict[str, Any]:
    """One side-check training as the page reads it (`page.TRAINED_SIDE_FILES`): the Bayes table's accuracy,
    MAE and max error per answer step and the probe, on `ReproConfig`'s evaluation sequences."""
    cfg = ReproConfig()
    with torch.no_grad():
        rows = bayes_table(model, task, cfg.n_eval, generator=torch.Generator().manual_seed(cfg.eval_seed))
        probe = probe_stats(model, task, cfg.n_eval, generator=torch.Generator().manual_seed(cfg.eval_seed))
    return {
        "seed": seed,
        "train_loss": round(train_loss, 5),
        "bayes": [{k: r[k] for k in ("step", "n", "acc", "mae", "max_err")} for r in rows],
        "probe": probe,
    }


# -- 3. head roles and attention ----------------------------------------------------------------------------
def last_step_groups(task: PermutationTask, n: int, *, generator: torch.Generator) -> dict[str, Tensor]:
    """Test sequences, half with a repeated last x, with the last answer's target and key sets over positions.

    Key sets (masks over the 2V-1 input positions, for the query at the last x): `match` = the earlier x equal
    to the last x, `bound` = the y that followed it, `other_y` = every other earlier y, `other_x` = every
    other earlier x, `self` = the query position. On repeat sequences they partition the positions.
    """
    seq, repeat = task.sequences(n, generator=generator, split="test", repeat_ratio=0.5)
    tokens = seq[:, :-1]
    pos = tokens.shape[1]
    xs = seq[:, 0:-2:2]  # the V-1 earlier x's
    match_pair = xs == seq[:, -2:-1]
    sets = {
        name: torch.zeros(n, pos, dtype=torch.bool)
        for name in ("match", "bound", "other_y", "other_x", "self")
    }
    sets["match"][:, 0:-1:2] = match_pair
    sets["bound"][:, 1::2] = match_pair
    sets["other_y"][:, 1::2] = ~match_pair
    sets["other_x"][:, 0:-1:2] = ~match_pair
    sets["self"][:, -1] = True
    return {"tokens": tokens, "targets": seq[:, -1], "repeat": repeat, **sets}


@torch.no_grad()
def attention_rows(
    model: Any, tokens: Int[Tensor, "batch pos"], layer: int = 0
) -> Float[Tensor, "head query key"]:
    """Attention of the x positions (query rows x1..xV) over all key positions, averaged over the batch."""
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n == f"blocks.{layer}.attn.hook_pattern")
    return cache[f"blocks.{layer}.attn.hook_pattern"][:, :, 0::2].mean(0).cpu()


@torch.no_grad()
def circuit_attention(
    model: Any, task: PermutationTask, n: int, *, generator: torch.Generator
) -> dict[str, Any]:
    """Per layer and head: previous-token score and attention at the last x of repeat sequences.

    The previous-token score is the mean attention of each y onto the x just before it; at the last x of
    repeat sequences, the attention on the matching x, on the y that followed it (induction route) and on each
    other earlier y (mean per y).
    """
    g = last_step_groups(task, n, generator=generator)
    tokens = g["tokens"][g["repeat"]]
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(tokens, names_filter=lambda x: x in names)
    out: dict[str, Any] = {"previous_token": [], "match": [], "bound": [], "other_y_each": []}
    n_other = task.config.vocab_size - 2  # earlier y's besides the bound one
    y_pos = torch.arange(1, tokens.shape[1], 2)
    for name in names:
        pattern = cache[name]  # [batch head query key]
        out["previous_token"].append(pattern[:, :, y_pos, y_pos - 1].mean((0, 2)).tolist())
        last = pattern[:, :, -1]  # [batch head key]
        for key in ("match", "bound", "other_y"):
            mass = (last * g[key][g["repeat"]][:, None].float()).sum(-1).mean(0)
            out[key if key != "other_y" else "other_y_each"].append(
                (mass / (n_other if key == "other_y" else 1)).tolist()
            )
    return out


# -- 4. the FFN rescue ---------------------------------------------------------------------------------------
@dataclass
class RescueResult:
    """Logit lens before/after the last MLP and the neurons that write the correct answer, with ablations."""

    lens: dict[str, dict[str, float]]
    """{"pre_ffn"|"post_ffn": {...}} at the last answer.

    Each holds "recall_acc", "recall_p", "elimination_acc" and "elimination_p".
    """
    ranking: Any
    """NeuronRanking of the last MLP by direct effect on the correct logit over recall cases."""
    ranking_elimination: Any
    """The same ranking over elimination cases."""
    ablation: list[dict[str, Any]]
    """Rows: ablating the top-k neurons (and k random neurons, mean of draws) -> accuracy per group."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "lens": self.lens,
            "ranking": self.ranking.to_dict(),
            "ranking_elimination": self.ranking_elimination.to_dict(),
            "ablation": self.ablation,
        }


def _group_scores(logits: Tensor, targets: Tensor, repeat: Tensor) -> dict[str, float]:
    probs = logits[:, -1].float().softmax(-1).cpu()
    rows = torch.arange(len(targets))
    hit = (probs.argmax(-1) == targets).float()
    p = probs[rows, targets]
    return {
        "recall_acc": float(hit[repeat].mean()),
        "recall_p": float(p[repeat].mean()),
        "elimination_acc": float(hit[~repeat].mean()),
        "elimination_p": float(p[~repeat].mean()),
    }


@torch.no_grad()
def ffn_rescue(
    model: Any,
    task: PermutationTask,
    n: int,
    *,
    generator: torch.Generator,
    ks: tuple[int, ...] = (1, 2, 4, 8),
    random_draws: int = 5,
) -> RescueResult:
    """Pre- vs post-FFN lens at the last answer, top neurons by direct effect, and their ablation."""
    g = last_step_groups(task, n, generator=generator)
    tokens, targets, repeat = g["tokens"], g["targets"], g["repeat"]
    layer = model.cfg.n_layers - 1
    name = f"blocks.{layer}.hook_resid_mid"
    logits, cache = model.run_with_cache(tokens, names_filter=lambda x: x == name)
    resid = cache[name]
    pre = decode_residual(model, resid)
    lens = {
        "pre_ffn": _group_scores(pre, targets, repeat),
        "post_ffn": _group_scores(logits, targets, repeat),
    }
    pos = torch.full((n,), task.seq_len - 1, dtype=torch.long)
    effect = neuron_direct_effect(model, tokens, layer, pos, targets)
    ranking, ranking_elim = rank_neurons(effect[repeat], layer), rank_neurons(effect[~repeat], layer)
    rows = [{"ablated": "none", "k": 0, **lens["post_ffn"]}]
    d_mlp = model.cfg.d_mlp
    for k in ks:
        top = ranking.top(k)
        rows.append(
            {
                "ablated": f"top-{k} {top}",
                "k": k,
                **_group_scores(ablate_neurons(model, tokens, layer, top), targets, repeat),
            }
        )
        draws = [
            _group_scores(
                ablate_neurons(model, tokens, layer, torch.randperm(d_mlp, generator=generator)[:k].tolist()),
                targets,
                repeat,
            )
            for _ in range(random_draws)
        ]
        rows.append(
            {
                "ablated": f"random {k} (mean of {random_draws})",
                "k": k,
                **{key: sum(d[key] for d in draws) / len(draws) for key in draws[0]},
            }
        )
    return RescueResult(lens, ranking, ranking_elim, rows)


def floor(vocab_size: int) -> float:
    """The elimination floor of the masked loss (re-exported for the report)."""
    return elimination_floor(vocab_size)


# -- everything
# -----------------------------------------------------------------------------------------------
@torch.no_grad()
def masked_losses(
    model: Any, task: PermutationTask, n: int, *, generator: torch.Generator
) -> dict[str, float]:
    """Masked loss on n train-mapping and n test-mapping sequences.

    With the Bayes-optimal loss on the test ones.
    """
    from mechmem.tasks.base import masked_cross_entropy

    out = {}
    device = model_device(model)
    for split in ("train", "test"):
        batch = task.eval_batch(n, generator=generator, split=split)
        out[split] = float(
            masked_cross_entropy(model(batch.tokens.to(device)).cpu(), batch.targets, batch.loss_mask)
        )
    post = bayes_posterior(batch.tokens, task.config.vocab_size)
    p = post.gather(-1, batch.targets[:, 0::2, None]).squeeze(-1)
    out["bayes_test"] = float(-p.log().mean()) + 0.0
    return out


@dataclass(frozen=True)
class ReproConfig:
    """What `run_reproduction` trains and measures."""

    task1_preset: str = "task1-quick"
    """Preset of the 1-head model trained without repeats."""
    task2_preset: str = "task2-quick"
    """Preset of the 2-head model trained with repeats."""
    task1_seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Seeds of the Task 1 model."""
    task2_seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Seeds of the Task 2 model."""
    scale_presets: tuple[str, ...] = ("v10-quick", "v15-quick")
    """Presets of the larger-vocabulary experiments (seed 0 each)."""
    n_eval: int = 5000
    """Test sequences for the Bayesian evaluation, the probe and the losses."""
    n_analysis: int = 2000
    """Sequences for head roles and the FFN rescue."""
    runs: str = "runs/permutation"
    """Directory holding one run directory per preset and seed (reused when complete)."""
    workers: int = 2
    """Cells at once on a local Ray instance (executor ray without address; one torch thread each)."""
    device: str = "cpu"
    """Device for training (measurements run on the CPU)."""
    executor: str = "local"
    """Where the cells run: local (this process, one at a time) or ray (`mechmem_papers.executor`)."""
    address: str = ""
    """Ray cluster to join (auto or host:port); empty: a local instance.

    With a cluster, `runs` must be a shared folder.
    """
    eval_seed: int = 1234
    """Seed of every evaluation generator, so all models see the same sequences."""
    role_samples: int = 1000
    """Sequences per counterfactual pair for the head roles (the circuit report's default too)."""
    role_seed: int = 0
    """Seed of the head-role measurement.

    The circuit report's default too, so both print the same numbers.
    """
    variant: str = "full"
    """The variant this config was made from (recorded, so the page can say how to rebuild it)."""


def measure_seed(
    preset: str, seed: int, cfg: ReproConfig, *, roles: bool, rescue: bool = False
) -> dict[str, Any]:
    from mechmem.checkpoint import load_checkpoint

    path = run_dir(cfg.runs, preset, seed)
    ckpt = load_checkpoint(path / "ckpt.pt")
    model, task = ckpt.model.eval(), ckpt.task

    def gen() -> torch.Generator:
        return torch.Generator().manual_seed(cfg.eval_seed)

    out: dict[str, Any] = {
        "preset": preset,
        "seed": seed,
        "run": str(path),
        "vocab_size": task.config.vocab_size,
        "model": ckpt.model_config.to_dict(),
        "train": ckpt.train,
        "task": ckpt.task_config,
        "history": read_metrics(path),
        "losses": masked_losses(model, task, cfg.n_eval, generator=gen()),
        "bayes": bayes_table(model, task, cfg.n_eval, generator=gen()),
        "probe": probe_stats(model, task, cfg.n_eval, generator=gen()),
    }
    if ckpt.model_config.n_heads > 1 or ckpt.model_config.n_layers > 1:
        out["circuit_attention"] = circuit_attention(model, task, cfg.n_analysis, generator=gen())
    if roles:
        out["roles"] = head_roles(model, task, n=cfg.role_samples, seed=cfg.role_seed).to_dict()
        example = task.probe(1, generator=gen())["tokens"]
        out["attention_example"] = {
            "tokens": example[0].tolist(),
            "rows": attention_rows(model, example).tolist(),
        }
    if rescue and not model.cfg.attn_only:  # the FFN rescue needs an MLP and repeat cases
        out["rescue"] = ffn_rescue(model, task, cfg.n_analysis, generator=gen()).to_dict()
    return out


def seed_cell(preset: str, seed: int, cfg: ReproConfig, roles: bool, rescue: bool) -> dict[str, Any]:
    """One cell of the reproduction.

    Train (preset, seed) unless its checkpoint is current, then measure it.
    """
    train_if_missing(preset, seed, cfg.runs, cfg.device)
    return measure_seed(preset, seed, cfg, roles=roles, rescue=rescue)


def run_reproduction(cfg: ReproConfig, *, log: Any = print) -> dict[str, Any]:
    """Train what is missing and measure every experiment on every run; JSON-able.

    One executor cell per run.
    """
    groups = {
        "task1": [(cfg.task1_preset, s) for s in cfg.task1_seeds],
        "task2": [(cfg.task2_preset, s) for s in cfg.task2_seeds],
        "scale": [(p, 0) for p in cfg.scale_presets],
    }
    # Longest jobs first (V=15, V=10, then Task 2), so that parallel workers finish together.
    order = [("scale", *run) for run in reversed(groups["scale"])]
    order += [("task2", *run) for run in groups["task2"]] + [("task1", *run) for run in groups["task1"]]
    cells = [
        Cell(
            f"{g}/{p}/seed{s}",
            seed_cell,
            {"preset": p, "seed": s, "cfg": cfg, "roles": g != "scale", "rescue": g == "task2"},
        )
        for g, p, s in order
    ]
    log(f"{len(cells)} run(s): trained where missing, then measured ({cfg.executor} executor)")
    records = run_cells(
        cells,
        None,
        executor=cfg.executor,
        address=cfg.address or None,
        device=cfg.device,
        progress="permutation runs",
        num_cpus=cfg.workers,
    )
    return {
        "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
        "software": software(),
        "published": load_published(),
        "floor": elimination_floor(5),
        **{g: [records[f"{g}/{p}/seed{s}"] for p, s in runs] for g, runs in groups.items()},
    }


def run(spec: ReproConfig, log: Callable[[str], None]) -> dict[str, Any]:
    """The plugin's run: train what is missing and measure everything (see `run_reproduction`)."""
    return run_reproduction(spec, log=log)
