"""The batched facts trainer's step: loss gradient and hits with the per-fact work written out by hand.

With two positions, the last position's residual stream after the mixing is, for a fact (t1, t2),

    resid = second[t2] + p (first[t1] - minus[t2])      p = sigmoid(gap[t2, t1]): attention on the first token

where `first`, `second`, `minus` and `gap` are per-vocabulary tables (`mixing_tables`). For 2Emb and uniform
attention p is a constant and is folded into the tables (p = 1, minus = 0). The tables are small ([init, n_in,
d]) and keep autograd; everything per fact (the gathers, the attention weight, norms, MLP, unembedding and
cross-entropy) has a hand-written backward (`loss_grad`), checked against autograd in the tests.

Per-fact activations are feature-major, [init, feature, fact]: a norm's mean over 16 features or a softmax
over 16 labels is then an elementwise pass over contiguous rows, several times faster on a CPU than reducing a
16-wide last axis, and no intermediate is kept for autograd.
"""

import copy
import math

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.models.facts import EPS, FactsModelConfig, Params


def _norm_rows(x: Tensor, gain: Tensor) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * gain[:, None, :]


def mixing_tables(cfg: FactsModelConfig, params: Params) -> dict[str, Tensor]:
    """Per-vocabulary tables of the mixing.

    "first" [init, n_in, d] (read at t1), "second" (at t2) and, for learned attention, "minus" (at t2) and
    "gap" [init, n_in (t2), n_in (t1)], the score of the first token minus the second's; x_p = W_E + W_pos[p],
    o_p = ln1(x_p) W_V W_O.
    """
    W_E = params["embed.W_E"]
    if cfg.mixing == "2emb":
        return {"first": W_E, "second": params["embed.W_E2"]}
    x0, x1 = W_E + params["pos_embed.W_pos"][:, :1], W_E + params["pos_embed.W_pos"][:, 1:]
    n0, n1 = x0, x1
    if cfg.norms:
        n0, n1 = _norm_rows(x0, params["blocks.0.ln1.w"]), _norm_rows(x1, params["blocks.0.ln1.w"])
    W_VO = params["blocks.0.attn.W_V"][:, 0] @ params["blocks.0.attn.W_O"][:, 0]
    o0, o1 = n0 @ W_VO, n1 @ W_VO
    if cfg.mixing == "uniform":
        return {"first": 0.5 * o0, "second": x1 + 0.5 * o1}
    q1 = n1 @ params["blocks.0.attn.W_Q"][:, 0]
    k0, k1 = n0 @ params["blocks.0.attn.W_K"][:, 0], n1 @ params["blocks.0.attn.W_K"][:, 0]
    gap = (q1 @ k0.transpose(1, 2) - (q1 * k1).sum(-1, keepdim=True)) / math.sqrt(cfg.d_model)
    return {"first": o0, "second": x1 + o1, "minus": o1, "gap": gap}


class FactBatch:
    """The facts of one training run in the forms the step reads.

    One-hot gather matrices and scaled labels. With `counts` (one per row of the stack), row r trains on the
    first counts[r] facts only: its loss is the mean over those, its hits count those (`weights`, `mask`);
    the other facts are computed and ignored. `select` keeps the rows still training.
    """

    def __init__(
        self,
        tokens: Int[Tensor, "n 2"],
        labels: Int[Tensor, " n"],
        n_in: int,
        n_out: int,
        dtype: torch.dtype,
        counts: Int[Tensor, " row"] | None = None,
    ) -> None:
        n = labels.shape[0]
        eye = torch.eye(n_in, dtype=dtype, device=tokens.device)
        self.first, self.second = eye[tokens[:, 0]], eye[tokens[:, 1]]  # [n, n_in]
        self.both = torch.cat([self.first, self.second], 1)  # [n, 2 n_in]: first[t1] + second[t2] in one GEMM
        self.both_t, self.second_t = self.both.t().contiguous(), self.second.t().contiguous()
        self.pair = tokens[:, 1] * n_in + tokens[:, 0]  # index into gap.flatten(1)
        self.labels = labels
        one_hot = torch.eye(n_out, dtype=dtype, device=labels.device)[:, labels]  # [n_out, n]
        # cross-entropy gradient = softmax / n - one_hot(label) / n (each init's mean loss)
        self.target = one_hot / n
        self.n = n
        self.weights: Tensor | None = None  # [row, 1, n]: 1 / counts[r] on the row's facts, else 0
        self.mask: Tensor | None = None  # [row, 1, n]: the row's facts
        if counts is not None:
            if int(counts.min()) < 1 or int(counts.max()) > n:
                raise ValueError(f"counts must lie in [1, {n}]")
            self.counts, self.one_hot = counts.to(labels.device), one_hot
            self.mask = (torch.arange(n, device=labels.device) < counts.to(labels.device)[:, None])[:, None]
            self.weights = self.mask / counts.to(device=labels.device, dtype=dtype)[:, None, None]

    def select(self, rows: Tensor) -> "FactBatch":
        """The batch of the rows `rows` (indices into the rows of `counts`), cut to the facts they still read
        (the first max(counts[rows])); itself when it has no counts."""
        if self.weights is None:
            return self
        out = copy.copy(self)
        out.counts = self.counts[rows]
        m = int(out.counts.max()) if out.counts.numel() else 0
        out.weights, out.mask = self.weights[rows, :, :m], self.mask[rows, :, :m]
        out.first, out.second, out.both = self.first[:m], self.second[:m], self.both[:m]
        out.both_t, out.second_t = self.both_t[:, :m].contiguous(), self.second_t[:, :m].contiguous()
        out.pair, out.labels, out.one_hot = self.pair[:m], self.labels[:m], self.one_hot[:, :m]
        out.n = m
        return out


def _gather(tables: list[Tensor], rows_t: Tensor) -> Tensor:
    """sum_k tables[k][idx_k] as [init, d, n].

    tables [init, n_in, d], rows_t the stacked one-hots [k n_in, n].
    """
    n_init, _, d = tables[0].shape
    stacked = torch.cat([t.transpose(1, 2) for t in tables], 2).reshape(n_init * d, -1)
    return (stacked @ rows_t).view(n_init, d, -1)


def _scatter(grad: Tensor, rows: Tensor, n_tables: int) -> list[Tensor]:
    """Backward of `_gather`: grad [init, d, n] -> one [init, n_in, d] gradient per table."""
    n_init, d, _ = grad.shape
    out = (grad.reshape(n_init * d, -1) @ rows).view(n_init, d, -1).transpose(1, 2)
    return list(out.chunk(n_tables, 1))


def _rms_t(x: Tensor) -> tuple[Tensor, Tensor]:
    """x / rms(x) over the feature axis (1) of [init, d, n], and 1 / rms."""
    r = torch.rsqrt(x.pow(2).mean(1, keepdim=True) + EPS)
    return x * r, r


def _rms_t_backward(grad: Tensor, xr: Tensor, r: Tensor) -> Tensor:
    return (grad - xr * (grad * xr).mean(1, keepdim=True)) * r


def _linear_t(x: Tensor, W: Tensor, b: Tensor | None, gain: Tensor | None) -> tuple[Tensor, Tensor]:
    """(W_eff^T x + b, W_eff) for x [init, d_in, n], W [init, d_in, d_out].

    W_eff = gain-scaled W (a folded norm).
    """
    W_eff = W if gain is None else W * gain[:, :, None]
    out = (
        torch.bmm(W_eff.transpose(1, 2), x)
        if b is None
        else torch.baddbmm(b[:, :, None], W_eff.transpose(1, 2), x)
    )
    return out, W_eff


def _linear_t_backward(
    grad: Tensor, x: Tensor, W_eff: Tensor, names: tuple[str, str, str], params: Params, out: Params
) -> Tensor:
    """Gradients of `_linear_t` w.r.t. the parameters `names` into `out`; returns the gradient of x.

    `names`: weight, bias, folded norm gain; those not in `params` are skipped.
    """
    weight, bias, gain = names
    g_W_eff = torch.bmm(x, grad.transpose(1, 2))  # [init, d_in, d_out]
    if gain in params:
        out[weight] = g_W_eff * params[gain][:, :, None]
        out[gain] = (g_W_eff * params[weight]).sum(-1)
    else:
        out[weight] = g_W_eff
    if bias in params:
        out[bias] = grad.sum(2)
    return torch.bmm(W_eff, grad)


def _readout_grad(
    cfg: FactsModelConfig, params: Params, x: Tensor, batch: FactBatch, out: Params
) -> tuple[Tensor, Tensor]:
    """Forward and hand-written backward of norms, MLP, unembedding and mean cross-entropy from resid_mid
    [init, d, n]; writes the readout parameters' gradients into `out`, returns (grad of x, hits [init])."""
    norms, saved = cfg.norms, []
    y = x
    if cfg.mlp:
        xn, r2 = _rms_t(x) if norms else (x, None)
        pre, W_in = _linear_t(
            xn,
            params["blocks.0.mlp.W_in"],
            params.get("blocks.0.mlp.b_in"),
            params["blocks.0.ln2.w"] if norms else None,
        )
        post = torch.nn.functional.gelu(pre) if cfg.act_fn == "gelu" else torch.relu(pre)
        mlp_out, _ = _linear_t(post, params["blocks.0.mlp.W_out"], params.get("blocks.0.mlp.b_out"), None)
        y = x + mlp_out if cfg.mlp_residual else mlp_out
        saved = [xn, r2, pre, W_in, post]
    yn, rf = _rms_t(y) if norms else (y, None)
    logits, W_U = _linear_t(
        yn, params["unembed.W_U"], params.get("unembed.b_U"), params["ln_final.w"] if norms else None
    )
    # A hit is the authors' `logits.argmax(-1) == targets`: of tied maxima the first label wins. Without
    # biases and residual, a ReLU MLP with every unit off for a fact gives it all-zero logits.
    top, predicted = logits.max(1, keepdim=True)
    correct = predicted == batch.labels
    probs = (logits - top).exp_()
    if batch.weights is None:
        hits = correct.sum((1, 2))
        grad = probs.mul_((1.0 / batch.n) / probs.sum(1, keepdim=True)).sub_(batch.target)
    else:  # rows with their own fact counts
        hits = correct.logical_and_(batch.mask).sum((1, 2))
        grad = probs.div_(probs.sum(1, keepdim=True)).sub_(batch.one_hot).mul_(batch.weights)
    grad = _linear_t_backward(grad, yn, W_U, ("unembed.W_U", "unembed.b_U", "ln_final.w"), params, out)
    if norms:
        grad = _rms_t_backward(grad, yn, rf)
    if not cfg.mlp:
        return grad, hits
    xn, r2, pre, W_in, post = saved
    mlp_names = (
        ("blocks.0.mlp.W_out", "blocks.0.mlp.b_out", ""),
        ("blocks.0.mlp.W_in", "blocks.0.mlp.b_in", "blocks.0.ln2.w"),
    )
    g_post = _linear_t_backward(grad, post, params[mlp_names[0][0]], mlp_names[0], params, out)
    if cfg.act_fn == "gelu":
        g_pre = torch.ops.aten.gelu_backward(g_post, pre)
    else:
        g_pre = g_post.mul_(pre > 0)
    g_xn = _linear_t_backward(g_pre, xn, W_in, mlp_names[1], params, out)
    g_x = _rms_t_backward(g_xn, xn, r2) if norms else g_xn
    return (g_x + grad if cfg.mlp_residual else g_x), hits


def loss_grad(
    cfg: FactsModelConfig, flat: Tensor, params: Params, batch: FactBatch
) -> tuple[Float[Tensor, "init n_params"], Int[Tensor, " init"]]:
    """Gradient of the summed per-init mean cross-entropy at the last position, and each init's argmax hits.

    The gradient is w.r.t. `flat`, of which `params` are views. A hit is an argmax equal to the label, the
    first of tied maxima winning.
    """
    with torch.enable_grad():
        tables = mixing_tables(cfg, params)
    with torch.no_grad():
        out: Params = {}
        grads, hits = _per_fact(cfg, {k: t.detach() for k, t in tables.items()}, params, batch, out)
    names = ["first", "second", "minus", "gap"][: len(grads)]
    (grad,) = torch.autograd.grad([tables[k] for k in names], flat, grads, allow_unused=False)
    with torch.no_grad():
        views = {k: t.view(flat.shape[0], *params[k].shape[1:]) for k, t in _split(grad, params)}
        for k, g in out.items():
            views[k].add_(g)
    return grad, hits


def _split(grad: Tensor, params: Params) -> list[tuple[str, Tensor]]:
    sizes = [math.prod(p.shape[1:]) for p in params.values()]
    return list(zip(params, grad.split(sizes, 1)))


def _per_fact(
    cfg: FactsModelConfig, tables: dict[str, Tensor], params: Params, batch: FactBatch, out: Params
) -> tuple[list[Tensor], Tensor]:
    """Per-fact forward and backward: the tables' gradients (in `mixing_tables` order), readout gradients into
    `out`, and the hits."""
    if "gap" in tables:
        p = torch.sigmoid(tables["gap"].flatten(1)[:, batch.pair])[:, None, :]  # [init, 1, n]
        diff = _gather([tables["first"], -tables["minus"]], batch.both_t)
        resid = _gather([tables["second"]], batch.second_t).add_(p * diff)
    else:
        resid = _gather([tables["first"], tables["second"]], batch.both_t)
    g_resid, hits = _readout_grad(cfg, params, resid, batch, out)
    if "gap" not in tables:
        return _scatter(g_resid, batch.both, 2), hits
    g_p = (g_resid * diff).sum(1) * (p * (1 - p))[:, 0]
    g_gap = torch.zeros_like(tables["gap"]).flatten(1).index_add_(1, batch.pair, g_p)
    g_first, g_minus = _scatter(g_resid * p, batch.both, 2)
    (g_second,) = _scatter(g_resid, batch.second, 1)
    return [g_first, g_second, -g_minus, g_gap.view_as(tables["gap"])], hits
