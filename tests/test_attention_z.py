"""`attention_z`, the resumed pass's attention, equals attention written per patch the obvious way (as
TransformerLens computes it) on every layout the replay gives it, and the replay gives each backend's own
result where scores overflow."""

import itertools

import pytest
import torch
from helpers import build_model, random_tokens

from mechmem.analysis.interventions import Engine, Intervention, apply
from mechmem.analysis.interventions.reference import naive_intervene
from mechmem.analysis.interventions.replay.attention import attention_z


def naive_z(q, k, v, mask, scale, past):
    """Per patch and prompt: scores over [past, fresh] keys / scale, masked, softmax, NaN to 0, times
    values."""
    out = torch.empty_like(q)
    lead = q.shape[:-4]
    for index in itertools.product(*(range(n) for n in (*lead, q.shape[-4]))):
        *patch, b = index
        keys, values = k[(*patch, b)], v[(*patch, b)]
        if past is not None:
            keys, values = torch.cat([past[0][b], keys]), torch.cat([past[1][b], values])
        scores = torch.einsum("qhd,khd->hqk", q[(*patch, b)], keys) / scale
        row_mask = mask if mask.dim() == 2 else mask[b]
        pattern = scores.masked_fill(~row_mask, -torch.inf).softmax(-1).nan_to_num(0.0)
        out[(*patch, b)] = torch.einsum("hqk,khd->qhd", pattern, values)
    return out


def window_mask(queries, n_keys, window=None):
    keys = torch.arange(n_keys)
    mask = queries[..., None] >= keys
    return mask if window is None else mask & (keys > queries[..., None] - window)


@pytest.mark.parametrize(
    "lead, start, window, readout",
    [
        ((3,), 0, None, False),  # no past: every key fresh
        ((3,), 5, None, False),  # causal queries after shared past keys
        ((2, 2), 4, None, False),  # two patch axes
        ((3,), 5, 3, False),  # a local window hides some past keys
        ((3,), 5, None, True),  # read-out queries, per prompt, some before the fresh keys
        ((), 2, None, False),  # no patch axis at all
    ],
)
def test_attention_z_equals_attention_per_patch(lead, start, window, readout):
    g = torch.Generator().manual_seed(len(lead) + start)
    batch, n_fresh, heads, d_head = 4, 6, 3, 5
    n_keys = start + n_fresh
    if readout:
        queries = torch.randint(0, n_keys, (batch, 2), generator=g)
        mask = window_mask(queries, n_keys, window)
    else:
        queries = torch.arange(start, n_keys)
        mask = window_mask(queries, n_keys, window)
    n_query = queries.shape[-1]
    q = torch.randn(*lead, batch, n_query, heads, d_head, generator=g)
    k, v = (torch.randn(*lead, batch, n_fresh, heads, d_head, generator=g) for _ in range(2))
    past = tuple(torch.randn(batch, start, heads, d_head, generator=g) for _ in range(2)) if start else None
    z = attention_z(q, k, v, mask, 1.7, past)
    torch.testing.assert_close(z, naive_z(q, k, v, mask, 1.7, past), atol=1e-6, rtol=1e-5)


def test_attention_z_makes_a_row_nan_where_a_score_is_nan_even_a_masked_one():
    """What `Replay.attend_z` checks for: a NaN key makes NaN every row that sees it and every row it is
    masked from, and nothing else."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, 2, 5, generator=g) for _ in range(3))
    k[1, 0, 2] = torch.nan  # every head's key at position 2 of prompt 0, patch 1
    z = attention_z(q, k, v, window_mask(torch.arange(4), 4), 1.0)
    assert z[1, 0].isnan().all()
    assert not z[0].isnan().any() and not z[1, 1:].isnan().any()


@pytest.mark.parametrize("scale", [1e19, 1e21, 1e40])
def test_non_finite_scores_give_the_backends_own_result(scale):
    """A residual row scaled far up overflows the next layers' scores (1e21) or makes its keys infinite and
    NaN (1e40; 1e19: nothing overflows). HookedTransformer's attention turns NaNs to 0, TransformerLens 4's
    leaves them; both mask by filling, so position 1, which cannot see position 3, stays finite. The metric
    reads position 1 and the last position (its NaNs to 0). The replay must give the backend's numbers."""
    model = build_model(seed=1, n_layers=3, normalization_type=None)
    tokens = random_tokens(model, 5, seed=3)

    def metric(logits):
        logprobs = logits.log_softmax(-1)[:, :, 2]
        return logprobs[:, 1] + logprobs[:, -1].nan_to_num(0.0)

    blow_up = apply(lambda act, hook: act * scale)
    variants = [[], Intervention("blocks.1.hook_resid_pre", (slice(None), 3), blow_up)]
    engine = Engine(model, metric)
    assert engine.strategy == "replay"
    fast = torch.stack(engine.run(tokens, variants)).cpu()
    naive = naive_intervene(model, tokens, variants, metric)
    torch.testing.assert_close(fast, naive, atol=1e-5, rtol=1e-5, equal_nan=True)
