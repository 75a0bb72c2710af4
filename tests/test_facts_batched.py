"""The batched multi-init trainer equals the plain per-init loop (hooked model + torch.optim.Adam)."""

import resource

import pytest
import torch
import torch.nn.functional as F

from mechmem.errors import MechmemError
from mechmem.models.facts import (
    FactsModelConfig,
    RMSNormFunction,
    all_variants,
    forward_params,
    init_params,
)
from mechmem.tasks.facts import fact_sequence, generate_facts
from mechmem_papers.memorisation import batched
from mechmem_papers.memorisation.batched import (
    ParamStack,
    Schedule,
    fact_logits,
    train_batched,
    train_counts,
    train_reference,
)
from mechmem_papers.memorisation.fused import FactBatch, loss_grad
from mechmem_papers.memorisation.heap import cpu_training, retain_freed_memory
from mechmem_papers.memorisation.snapshots import Snapshots

INPUTS, LABELS = generate_facts(64, 32, 16)
# Short phases so every init walks through all three learning rates (continue_above=0 always continues).
SHORT = Schedule(max_epochs=6, patience=3, continue_above=0.0)


@pytest.mark.parametrize(
    "cfg",
    [
        FactsModelConfig(mixing="attn"),
        FactsModelConfig(mixing="uniform", bias=False, act_fn="relu"),
        FactsModelConfig(mixing="2emb", mlp_residual=False, norms=False),
        FactsModelConfig(mixing="2emb", mlp=False, norms=False),
    ],
    ids=lambda c: c.name,
)
def test_batched_equals_per_init(cfg):
    seeds = [0, 1, 2]
    batched = train_batched(cfg, INPUTS, LABELS, seeds, SHORT)
    reference = train_reference(cfg, INPUTS, LABELS, seeds, SHORT)
    assert batched.to_dict() == reference.to_dict()
    assert batched.phases.tolist() == [3, 3, 3]
    # Float rounding differs (einsum vs TL kernels) and Adam amplifies it on near-zero second moments, so
    # single weights may drift by ~1e-3 after 18 steps; the models' outputs must still agree closely.
    for name in reference.params:
        torch.testing.assert_close(batched.params[name], reference.params[name], atol=5e-3, rtol=1e-3)
    b_logits = forward_params(cfg, batched.params, INPUTS, last_only=True)
    r_logits = forward_params(cfg, reference.params, INPUTS, last_only=True)
    torch.testing.assert_close(b_logits, r_logits, atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize(
    "cfg",
    [FactsModelConfig(mixing="attn"), FactsModelConfig(mixing="2emb", mlp_residual=False, norms=False)],
    ids=lambda c: c.name,
)
def test_train_counts_equals_one_training_per_count(cfg):
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the sums run in another order: exact outcomes need float64
    try:
        schedule = Schedule(max_epochs=150, patience=25)
        counts = [120, 30, 75]
        together = train_counts(cfg, *fact_sequence(120, 32, 16), counts, [0, 1, 2], schedule)
        assert list(together) == counts
        for n in counts:
            alone = train_batched(cfg, *generate_facts(n, 32, 16), [0, 1, 2], schedule)
            assert together[n].to_dict() == alone.to_dict()
            for name, p in alone.params.items():
                torch.testing.assert_close(together[n].params[name], p, atol=1e-8, rtol=1e-8)
        assert len({tuple(together[n].epochs.tolist()) for n in counts}) == 3  # the counts really differ
    finally:
        torch.set_default_dtype(before)


def test_success_stops_early_and_inits_are_independent():
    cfg = FactsModelConfig(mixing="2emb", mlp=False, norms=False)
    inputs, labels = generate_facts(48, 32, 16)
    schedule = Schedule(max_epochs=400, patience=50)
    both = train_batched(cfg, inputs, labels, [5, 7], schedule)
    alone = train_batched(cfg, inputs, labels, [7], schedule)
    assert both.success.all() and both.best_acc.eq(1.0).all()
    assert int(both.epochs.max()) < 400
    # An init's run does not depend on which other inits share the batch (finished ones are dropped).
    assert both.epochs[1] == alone.epochs[0]
    for name in alone.params:
        torch.testing.assert_close(both.params[name][1], alone.params[name][0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cut", [4, 17, 40])
@pytest.mark.parametrize("every", [0.0, 1e9], ids=["saved every epoch", "saved on the interrupt only"])
def test_a_training_stopped_mid_run_resumes_from_its_snapshot_exactly(tmp_path, monkeypatch, cut, every):
    """Stopped after `cut` epochs (rows finished and phases changed by then at the later cuts), started again
    from its snapshot, a training ends bit for bit as the uninterrupted one."""
    cfg = FactsModelConfig(mixing="attn")
    schedule = Schedule(max_epochs=30, patience=5, continue_above=0.0)
    seeds = [0, 1, 2, 3]
    whole = train_batched(cfg, INPUTS, LABELS, seeds, schedule)
    saves = Snapshots(tmp_path / "run.pt", "cell|n=64", every=every)
    calls, stop, real = [0], [cut], batched.loss_grad

    def stop_at_cut(*args, **kwargs):
        calls[0] += 1
        if calls[0] > stop[0]:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(batched, "loss_grad", stop_at_cut)
    with pytest.raises(KeyboardInterrupt):
        train_batched(cfg, INPUTS, LABELS, seeds, schedule, snapshots=saves)
    assert saves.path.exists() and int(whole.epochs.max()) > cut
    calls[0], stop[0] = 0, 10**9
    resumed = train_batched(cfg, INPUTS, LABELS, seeds, schedule, snapshots=saves)
    assert calls[0] == int(whole.epochs.max()) - cut  # it went on from epoch `cut`, not from the start
    assert whole.earlier_seconds == 0.0 and resumed.earlier_seconds > 0.0  # the time before the stop counts
    assert resumed.to_dict() == whole.to_dict()
    for name in whole.params:
        assert torch.equal(resumed.params[name], whole.params[name]), name
    with pytest.raises(MechmemError, match="snapshot of another training"):
        train_batched(cfg, INPUTS, LABELS, seeds, schedule, snapshots=Snapshots(saves.path, "other", 0.0))


def test_relaxed_target():
    cfg = FactsModelConfig(mixing="2emb", mlp=False, norms=False)
    inputs, labels = generate_facts(600, 32, 16)  # far above capacity: 100% is out of reach
    schedule = Schedule(lrs=(1e-2,), max_epochs=150, patience=150, target_acc=0.05)
    out = train_batched(cfg, inputs, labels, [0], schedule)
    assert out.success.all() and out.final_acc[0] >= 0.05


@pytest.mark.parametrize("cfg", all_variants(n_in=8, n_out=4, d_model=4, d_mlp=6), ids=lambda c: c.name)
def test_factorised_logits_equal_the_forward_pass(cfg):
    # The trainer's factorised mixing (per-token tables, one attention weight per fact) against the reference.
    inputs, _ = generate_facts(40, 8, 4)
    inits = [init_params(cfg, generator=torch.Generator().manual_seed(s)) for s in (0, 1)]
    params = {k: torch.stack([p[k] for p in inits]) for k in inits[0]}
    expected = forward_params(cfg, params, inputs, last_only=True)[:, :, 0]
    torch.testing.assert_close(fact_logits(cfg, params, inputs), expected, atol=1e-5, rtol=1e-5)


def test_rms_norm_backward_is_the_gradient():
    x = torch.randn(3, 5, 2, 4, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(RMSNormFunction.apply, (x,))


@pytest.mark.parametrize("cfg", all_variants(n_in=8, n_out=4, d_model=4, d_mlp=6), ids=lambda c: c.name)
def test_hand_written_step_is_the_autograd_gradient(cfg):
    # The trainer's step (per-fact backward by hand) against autograd through the factorised logits, in
    # float64; hits: the authors' `logits.argmax(-1) == targets`.
    inputs, labels = generate_facts(40, 8, 4)
    inits = [init_params(cfg, generator=torch.Generator().manual_seed(s)) for s in (0, 1, 2)]
    stack = ParamStack(
        {k: torch.stack([p[k] for p in inits]).double() for k in inits[0]}, torch.device("cpu")
    )
    logits = fact_logits(cfg, stack.params(), inputs)
    loss = F.cross_entropy(logits.flatten(0, 1), labels.repeat(3), reduction="sum") / len(labels)
    (expected,) = torch.autograd.grad(loss, stack.flat)
    grad, hits = loss_grad(cfg, stack.flat, stack.params(), FactBatch(inputs, labels, 8, 4, torch.double))
    torch.testing.assert_close(grad, expected, atol=1e-12, rtol=1e-10)
    assert hits.tolist() == (logits.argmax(-1) == labels).sum(1).tolist()


def test_a_fact_with_every_logit_tied_is_a_hit_only_for_the_first_label():
    """Without biases and MLP residual, a ReLU MLP with every unit off gives a fact all-zero logits: the
    authors' argmax answers label 0, so only the facts labelled 0 are hits, as in the per-init loop."""
    cfg = FactsModelConfig(mixing="2emb", mlp_residual=False, bias=False, act_fn="relu")
    inputs, labels = generate_facts(64, 32, 16)
    params = {k: p[None] for k, p in init_params(cfg, generator=torch.Generator().manual_seed(0)).items()}
    params["blocks.0.mlp.W_in"] = torch.zeros_like(params["blocks.0.mlp.W_in"])  # every unit off
    stack = ParamStack(params, torch.device("cpu"))
    logits = fact_logits(cfg, stack.params(), inputs)
    assert bool((logits == 0).all())
    _, hits = loss_grad(cfg, stack.flat, stack.params(), FactBatch(inputs, labels, 32, 16, torch.float32))
    assert hits.tolist() == [int((labels == 0).sum())] == [(logits.argmax(-1) == labels).sum().item()]
    assert 0 < hits.item() < len(labels)


def test_freed_memory_stays_mapped():
    # Without it, glibc trims the heap and every step
    # page-faults its buffers anew (about 2,300 faults per step).
    if not retain_freed_memory():
        pytest.skip("the C library is not glibc")
    cfg = FactsModelConfig(mixing="2emb")
    inputs, labels = generate_facts(1024, 32, 16)
    inits = [init_params(cfg, generator=torch.Generator().manual_seed(s)) for s in range(11)]
    stack = ParamStack({k: torch.stack([p[k] for p in inits]) for k in inits[0]}, torch.device("cpu"))
    batch = FactBatch(inputs, labels, 32, 16, torch.float32)
    for _ in range(3):
        loss_grad(cfg, stack.flat, stack.params(), batch)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        loss_grad(cfg, stack.flat, stack.params(), batch)
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10 < 200


def test_training_flushes_denormals_and_restores_the_default(monkeypatch):
    """Inside the trainer, products below float32's smallest normal number are 0 (the CPU's slow path is
    never taken); before and after it, they are the denormals torch computes by default."""
    tiny = torch.tensor([1e-38])
    seen = []
    real = batched.loss_grad

    def watch(*args, **kwargs):
        seen.append(float(tiny / 100))
        return real(*args, **kwargs)

    monkeypatch.setattr(batched, "loss_grad", watch)
    cfg = FactsModelConfig(mixing="2emb", mlp=False, norms=False)
    train_batched(cfg, INPUTS, LABELS, [0], Schedule(max_epochs=3, patience=3))
    assert seen and all(v == 0.0 for v in seen)
    assert float(tiny / 100) > 0.0
    with pytest.raises(RuntimeError), cpu_training(torch.device("cpu")):
        assert float(tiny / 100) == 0.0
        raise RuntimeError("an error inside the block")
    assert float(tiny / 100) > 0.0  # restored on the way out, also after an error
