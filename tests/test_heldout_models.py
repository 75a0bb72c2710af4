"""Role naming on kinds of model the project did not design its rule on, at the report's DEFAULT settings.

Ground truth is plain TransformerLens, computed here without mechmem's detection code: `run_with_cache` on
repeated random tokens [r, r] and the standard recipe (the induction stripe, attention from each second-copy
query to the key just after its first occurrence; the previous-token diagonal), at the length the model was
built or trained for and, for token-selective heads, on the query rows holding the tokens the head works for.
A head is an induction / previous-token head when its recipe score is at least 0.5; every fixture first checks
that its scores are clearly on one side (no score within 0.15 of 0.5), so "exactly these heads" is well posed.

Kinds:
    lngelu       3 layers, LayerNorm, GELU MLPs, 4 heads per layer, hand-built: a previous-token head in
                 layer 0 and an induction head in layer 1 among self / first-position / uniform heads (fast).
    lngelu-trained  the same architecture trained on repeats of one length (16-token halves) with a context
                 of 64, so the generic task sizes its data to 32-token halves (slow: a short training).
    triggers     induction only for 4 trigger tokens of 24 (as in the Birth setting): on random repeats the
                 head's overall induction score is low.
    distractors  two extra heads attend to the previous token without copying anything (zero OV).
"""

import pytest
import torch
from helpers import train_briefly

from mechmem.analysis.planted import PlantedLayout, planted_induction_model
from mechmem.models.transformer import build_transformer
from mechmem.models.transformer_config import TransformerConfig
from mechmem.models.weights import canonical_parameters
from mechmem.report import build_report
from mechmem.tasks.generic import RepeatsConfig, RepeatsTask

TRIGGERS = (2, 5, 11, 17)
MARGIN = 0.15


# -- ground truth: plain TransformerLens ---------------------------------------------------------------------
def tl_scores(
    model: torch.nn.Module, half: int, *, n: int = 64, seed: int = 0, tokens_of: tuple[int, ...] = ()
) -> dict[str, torch.Tensor]:
    """[layer head] induction-stripe and previous-token-diagonal scores from TL's cached patterns on [r, r].

    With `tokens_of`, the induction score counts only second-copy queries holding one of those tokens.
    """
    vocab = model.cfg.d_vocab
    first = torch.rand(n, vocab, generator=torch.Generator().manual_seed(seed)).argsort(-1)[:, :half]
    tokens = torch.cat([first, first], dim=1)
    _, cache = model.run_with_cache(tokens, names_filter=lambda name: name.endswith("hook_pattern"))
    second = tokens[:, half:]  # the query tokens of the induction stripe
    keep = torch.isin(second, torch.tensor(tokens_of)) if tokens_of else torch.ones_like(second, dtype=bool)
    induction, previous = [], []
    for layer in range(model.cfg.n_layers):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]  # [batch head query key]
        stripe = pattern.diagonal(offset=1 - half, dim1=-2, dim2=-1)[..., 1:]  # queries half .. 2 half - 1
        induction.append((stripe * keep[:, None]).sum((0, 2)) / keep.sum())
        previous.append(pattern.diagonal(offset=-1, dim1=-2, dim2=-1).mean((0, 2)))
    return {"induction": torch.stack(induction), "previous-token": torch.stack(previous)}


def tl_ground_truth(scores: dict[str, torch.Tensor]) -> dict[str, set[str]]:
    """Role -> the heads whose TL score is >= 0.5, after checking every score is clearly on one side."""
    out = {}
    for role, s in scores.items():
        assert ((s - 0.5).abs() >= MARGIN).all(), f"{role} scores too close to 0.5 to be ground truth: {s}"
        out[role] = {f"L{l}H{h}" for l, h in (s >= 0.5).nonzero().tolist()}
    return out


def report_roles(model: torch.nn.Module) -> dict[str, set[str]]:
    """Role -> heads, as the report names them at its defaults (the generic task sized to the model)."""
    task = RepeatsTask(RepeatsConfig.for_model(model))
    report = build_report(model, task, sections=())
    out: dict[str, set[str]] = {}
    for head in report.section("circuit").findings["heads"]:
        out.setdefault(head["role"], set()).add(f"L{head['layer']}H{head['head']}")
    return out


def assert_report_matches(model: torch.nn.Module, truth: dict[str, set[str]]) -> None:
    named = report_roles(model)
    for role in ("induction", "previous-token"):
        assert named.get(role, set()) == truth[role], (role, named, truth)


# -- the kinds -----------------------------------------------------------------------------------------------
def lngelu_planted(d_vocab: int = 16, n_ctx: int = 32, c: float = 10.0) -> torch.nn.Module:
    """3 layers, LayerNorm, GELU MLPs (zero weights), 4 heads per layer; previous-token head L0H1 copies the
    token into a PREV block, induction head L1H2 matches the query token against PREV and copies into OUT."""
    lay = PlantedLayout(d_vocab, n_ctx)
    cfg = TransformerConfig(
        n_layers=3,
        d_model=lay.d_model,
        n_heads=4,
        d_head=lay.d_head,
        d_vocab=d_vocab,
        n_ctx=n_ctx,
        d_mlp=8,
        act_fn="gelu",
        normalization_type="LN",
    )
    model = build_transformer(cfg, generator=torch.Generator().manual_seed(0))
    eye_v, eye_t = torch.eye(d_vocab), torch.eye(n_ctx)
    with torch.no_grad():
        for name, param in canonical_parameters(model).items():  # HookedTransformer's names on either backend
            param.copy_(torch.ones_like(param) if name.split(".")[-1] == "w" else torch.zeros_like(param))
        model.embed.W_E[:, lay.tok] = eye_v
        model.pos_embed.W_pos[:, lay.pos] = eye_t
        model.unembed.W_U[lay.out, :] = c * eye_v
        a0, a1 = model.blocks[0].attn, model.blocks[1].attn
        a0.W_Q[0, lay.pos, :n_ctx] = c * eye_t  # L0H0: self
        a0.W_K[0, lay.pos, :n_ctx] = c * eye_t
        a0.W_Q[1, lay.pos, :n_ctx] = c * eye_t  # L0H1: previous token, copies TOK into PREV
        a0.W_K[1, lay.pos.start : lay.pos.stop - 1, 1:n_ctx] = c * eye_t[:-1, :-1]
        a0.W_V[1, lay.tok, :d_vocab] = eye_v
        a0.W_O[1, :d_vocab, lay.prev] = eye_v
        a0.W_Q[2, lay.pos, 0] = c  # L0H2: first position; L0H3 uniform
        a0.W_K[2, lay.pos.start, 0] = c
        a1.W_Q[2, lay.tok, :d_vocab] = c * eye_v  # L1H2: induction, TOK against PREV, copies TOK into OUT
        a1.W_K[2, lay.prev, :d_vocab] = c * eye_v
        a1.W_Q[2, lay.tok, d_vocab] = c  # position 0 has no previous token
        a1.W_K[2, lay.pos.start, d_vocab] = -c
        a1.W_V[2, lay.tok, :d_vocab] = eye_v
        a1.W_O[2, :d_vocab, lay.out] = eye_v
        a1.W_Q[0, lay.pos, :n_ctx] = c * eye_t  # L1H0: self; L1H1, L1H3 and layer 2 uniform, zero OV
        a1.W_K[0, lay.pos, :n_ctx] = c * eye_t
    return model.eval()


def trained_lngelu(steps: int = 150, seed: int = 0) -> torch.nn.Module:
    """The same architecture trained (AdamW, masked next-token loss) on [r, r] with |r| = 16, n_ctx 64."""
    cfg = TransformerConfig(
        n_layers=3,
        d_model=64,
        n_heads=4,
        d_vocab=48,
        n_ctx=64,
        d_mlp=128,
        act_fn="gelu",
        normalization_type="LN",
    )
    model = build_transformer(cfg, generator=torch.Generator().manual_seed(seed))
    task = RepeatsTask(RepeatsConfig(d_vocab=48, half=16))
    return train_briefly(
        model,
        task,
        steps,
        batch_size=64,
        lr=3e-3,
        seed=seed + 1,
        optimizer=torch.optim.AdamW,
        weight_decay=0.0,
    )


def trigger_model() -> torch.nn.Module:
    """The planted induction model (L0H2 previous-token, L1H1 induction) with L1H1's query kept for TRIGGERS
    only: any other query token attends uniformly (bar position 0)."""
    model = planted_induction_model(d_vocab=24, n_ctx=32)
    lay = PlantedLayout(24, 32)
    others = [t for t in range(24) if t not in TRIGGERS]
    with torch.no_grad():
        model.blocks[1].attn.W_Q[1, lay.tok.start + torch.tensor(others), :24] = 0.0
    return model


def distractor_model() -> torch.nn.Module:
    """The planted induction model whose self-attending heads L0H0 and L1H2 attend to the previous token
    instead, with a zero OV circuit (they move nothing)."""
    model = planted_induction_model(d_vocab=16, n_ctx=32)
    lay, eye = PlantedLayout(16, 32), torch.eye(32)
    with torch.no_grad():
        for layer, head in ((0, 0), (1, 2)):
            attn = model.blocks[layer].attn
            attn.W_K[head].zero_()
            attn.W_K[head, lay.pos.start : lay.pos.stop - 1, 1:32] = 10.0 * eye[:-1, :-1]
            assert attn.W_V[head].abs().sum() == 0 and attn.W_O[head].abs().sum() == 0
    return model


# -- the tests -----------------------------------------------------------------------------------------------
def test_lngelu_hand_built_report_names_what_transformer_lens_finds():
    model = lngelu_planted()
    truth = tl_ground_truth(tl_scores(model, 16))
    assert truth == {"induction": {"L1H2"}, "previous-token": {"L0H1"}}  # the fixture is what it claims
    assert_report_matches(model, truth)


@pytest.mark.slow
def test_lngelu_trained_on_one_length_report_names_what_transformer_lens_finds():
    model = trained_lngelu()
    assert RepeatsConfig.for_model(model).half == 32  # the task's own data is not the trained length
    truth = tl_ground_truth(tl_scores(model, 16))
    assert truth["induction"], "training did not produce an induction-scoring head"
    assert_report_matches(model, truth)


def test_trigger_only_induction_report_names_what_transformer_lens_finds():
    model = trigger_model()
    on_triggers = tl_scores(model, 12, tokens_of=TRIGGERS)
    overall = tl_scores(model, 12)
    assert overall["induction"][1, 1] < 0.5  # one probe over all tokens misses it
    truth = tl_ground_truth(on_triggers)
    assert truth == {"induction": {"L1H1"}, "previous-token": {"L0H2"}}
    assert_report_matches(model, truth)


def test_previous_token_distractors_report_names_what_transformer_lens_finds():
    model = distractor_model()
    truth = tl_ground_truth(tl_scores(model, 16))
    assert truth == {"induction": {"L1H1"}, "previous-token": {"L0H0", "L0H2", "L1H2"}}
    assert_report_matches(model, truth)
