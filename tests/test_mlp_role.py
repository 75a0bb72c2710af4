"""The last MLP's role decided over rounds of sequences (docs/decisions.md, "The MLP's role"): each drop
equals TransformerLens's own run with the MLP's output replaced by its mean, and an MLP that writes nothing
is decided "none" at the first look."""

import torch
from helpers import assert_no_hooks, build_model

import mechmem
from mechmem.analysis.mlp_role import decided_mlp_role, last_answer
from mechmem.analysis.stats import DecisionPolicy


def test_each_drop_equals_a_run_with_hooks_that_writes_the_mlps_mean():
    model = build_model(0, n_ctx=24, d_vocab=12)
    task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    policy = DecisionPolicy(first=16, budget=64)
    found = decided_mlp_role(model, task, seed=4, policy=policy, threshold=0.5)
    looks = found.decision.looks
    assert len(looks) >= 2 and found.n == looks[-1]  # the equality is about pooling rounds
    gen = torch.Generator().manual_seed(4)
    reference = task.eval_batch(64, generator=gen).tokens
    hook = f"blocks.{found.layer}.hook_mlp_out"
    _, cache = model.run_with_cache(reference, names_filter=hook)
    means = cache[hook].mean(0)
    drops, taken = [], 0
    for look in looks:
        batch = task.eval_batch(look - taken, generator=gen)
        taken = look
        pos, targets = last_answer(batch)
        rows = torch.arange(len(pos))

        def p_answer(logits: torch.Tensor) -> torch.Tensor:
            return logits[rows, pos].softmax(-1)[rows, targets]  # noqa: B023 (used at once)

        with torch.no_grad():
            plain = p_answer(model(batch.tokens))
            write_mean = [(hook, lambda act, hook: means.expand_as(act))]
            ablated = model.run_with_hooks(batch.tokens, fwd_hooks=write_mean)
        drops.append(plain - p_answer(ablated))
    torch.testing.assert_close(found.drops.float(), torch.cat(drops).float(), atol=1e-5, rtol=0)
    assert_no_hooks(model)


def test_an_mlp_that_writes_nothing_is_decided_none_at_the_first_look():
    model = build_model(1, n_ctx=24, d_vocab=12)
    for block in model.blocks:
        torch.nn.init.zeros_(block.mlp.W_out)
        torch.nn.init.zeros_(block.mlp.b_out)
    task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    found = decided_mlp_role(model, task, seed=0)
    assert found.role == "none" and found.decision.looks == (64,)
    assert float(found.drops.abs().max()) < 1e-6
