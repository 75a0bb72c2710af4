"""The floating-point floor of a benchmark figure: the matmul work it needed, the machine's measured matrix
rate in the same run, the time that work takes at that rate, and the measured time's ratio to it.

    from floor import forward_flops, matmul_rate, floor_table
    rate = matmul_rate()                                     # FLOP/s of a 2048^2 float32 matmul, this run
    flops = cells * forward_flops(model.cfg, batch, pos)     # one forward of the batch per patched cell
    print(floor_table([("resid_pre", flops, {"mechmem": measured_s})], rate))

The work is counted, not measured: per token 2 x the weights in matmuls (query, key, value and output
projections, the MLP's input, gate and output, the unembedding), plus the attention scores and the pattern
times the values, 2 x 2 x pos^2 x n_heads x d_head per layer and sequence (causal masking not subtracted);
embedding look-ups, norms, activations and softmax are left out, and a backward pass counts as
`BACKWARD_FACTOR` forwards. The rate is the best of a few large float32 matmuls on the benchmark's own torch
thread count, timed in the same process, so a loaded machine lowers the rate and the measured time together.
A ratio of 1 means the benchmark ran at the machine's matmul rate; small models and small batches sit far
above it (Python, hooks, kernel launches and memory traffic dominate).
"""

import time
from typing import Any

import torch

BACKWARD_FACTOR = 2.0
"""A backward pass in forwards: gradients of activations and of weights, one matmul each per forward one."""


def layer_flops(cfg: Any, pos: int) -> float:
    """Matmul FLOPs of one layer on one sequence of `pos` tokens (TransformerLens config names)."""
    heads, kv = cfg.n_heads, getattr(cfg, "n_key_value_heads", None) or cfg.n_heads
    width = heads * cfg.d_head
    weights = cfg.d_model * (2 * width + 2 * kv * cfg.d_head)  # W_Q and W_O, W_K and W_V
    if not getattr(cfg, "attn_only", False) and cfg.d_mlp:
        weights += cfg.d_model * cfg.d_mlp * (3 if getattr(cfg, "gated_mlp", False) else 2)
    return 2.0 * weights * pos + 2.0 * 2.0 * pos * pos * width


def forward_flops(cfg: Any, sequences: int, pos: int, *, from_layer: int = 0) -> float:
    """Matmul FLOPs of a forward pass over `sequences` sequences of `pos` tokens, from layer `from_layer`
    (a pass resumed there) through the unembedding."""
    unembed = 2.0 * cfg.d_model * (getattr(cfg, "d_vocab_out", None) or cfg.d_vocab) * pos
    return sequences * ((cfg.n_layers - from_layer) * layer_flops(cfg, pos) + unembed)


def sweep_flops(cfg: Any, axes: tuple[str, ...], shape: tuple[int, ...], sequences: int, pos: int) -> float:
    """Work of an activation-patching sweep whose result has `axes` and `shape`: one forward of the batch
    per cell, resumed at the cell's layer when the first axis is "layer" (nothing before the patch changes),
    else from the first layer."""
    cells = 1
    for size in shape:
        cells *= size
    if not axes or axes[0] != "layer":
        return cells * forward_flops(cfg, sequences, pos)
    per_layer = cells // shape[0]
    return per_layer * sum(forward_flops(cfg, sequences, pos, from_layer=l) for l in range(shape[0]))


def matmul_rate(n: int = 2048, repeats: int = 3, device: str = "cpu") -> float:
    """FLOP/s of an n x n float32 matmul on torch's current thread count (or on a CUDA `device`, timed to
    its completion): the best of `repeats` timings."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=gen).to(device), torch.randn(n, n, generator=gen).to(device)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    a @ b  # warm-up
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 / best


def floor_table(work: list[tuple[str, float, dict[str, float]]], rate: float) -> str:
    """The floor of each (label, FLOPs, {what was timed: measured seconds}) as a table: GFLOP, the floor's
    milliseconds at `rate`, then per timing its milliseconds and its ratio to the floor; a line giving the
    rate above it."""
    from mechmem.cli import format_table

    names = list(work[0][2]) if work else []
    headers = ["work", "GFLOP", "floor ms"] + [h for n in names for h in (f"{n} ms", f"{n}/floor")]
    rows = []
    for label, flops, seconds in work:
        floor_s = flops / rate
        row = [label, flops / 1e9, 1e3 * floor_s]
        for n in names:
            row += [1e3 * seconds[n], seconds[n] / floor_s if floor_s else float("nan")]
        rows.append(row)
    head = (
        f"floor: matmul rate {rate / 1e9:.1f} GFLOP/s (2048^2 float32 matmul, {torch.get_num_threads()} "
        "torch thread(s), measured in this run); floor ms = counted matmul FLOPs / rate"
    )
    return head + "\n" + format_table(rows, headers, floatfmt=".3g")
