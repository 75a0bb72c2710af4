"""The prose of docs/reproductions/constructions.md, filled in from the measured results."""

import math

from mechmem.papers.memorisation.constructions.experiments import AppendixACheck, CapacityResult, SweepResult


def _ratio(result: CapacityResult, num: str, den: str, d: int, thr: float) -> str:
    a, b = result.get(num, d, thr), result.get(den, d, thr)
    return f"{a / b:.1f}x" if a and b else "n/a"


def _fit_ratio(result: CapacityResult, num: str, den: str, thr: float) -> str:
    if num not in result.capacity or den not in result.capacity:
        return "n/a"
    ratio = result.fit_ratio(num, den, thr)
    return "n/a" if math.isnan(ratio) else f"{ratio:.1f}x"


def _spot_headline(result: CapacityResult) -> str:
    lines = []
    for d, by_n in result.spot.items():
        kv = {t: result.get("keyvalue_hand", int(d), t) for t in (1.0, 0.9)}
        checks = ", ".join(f"{acc:.3f} at {n} facts" for n, acc in by_n.items())
        lines.append(
            f"- d = {d} (no full trained search): our table stores {kv[1.0]} facts at acc = 1 and {kv[0.9]} at "
            f"acc >= 0.9; trained spot checks reach {checks}.\n"
        )
    return "".join(lines)


def _spot_text(result: CapacityResult, grid) -> str:
    if not result.spot:
        return ""
    rows = [f"| {d} | {n} | {acc:.4f} |" for d, by_n in result.spot.items() for n, acc in by_n.items()]
    return (
        f"Spot checks where a full trained search was too slow (best of {grid.n_inits} trained initialisations,"
        " same recipe):\n\n| d | facts | trained accuracy |\n|---|---|---|\n" + "\n".join(rows) + "\n\n"
    )


def markdown_sections(
    result: CapacityResult,
    check: AppendixACheck,
    sweep: SweepResult,
    tables: dict,
    figures: dict,
    grid,
    *,
    command: str,
    quick: bool,
    minutes: float,
) -> list[tuple[str, str]]:
    """Titled markdown sections; every number in them comes from `result`, `check` and `sweep`."""
    ds = ", ".join(str(d) for d in result.ds)
    best_s, best_tf, best_acc = max(
        (
            (s, tf, acc)
            for s, row in zip(sweep.s_values, sweep.accuracy)
            for tf, acc in zip(sweep.top_fractions, row)
        ),
        key=lambda t: t[2],
    )
    r = lambda num, den, thr: _fit_ratio(result, num, den, thr)
    quick_note = (
        (
            "\n\n**This is the `--quick` run** (d = 8, 16, small grids, 2 initialisations, precision 16 facts): "
            "a smoke test of the pipeline, not the reproduction."
        )
        if quick
        else ""
    )
    return [
        (
            "",
            f"""# Hand-coded memorisation (Linsefors & Bushnaq): reproduction and a better construction

Reproduces the "Challenge" part of Linsefors & Bushnaq (seed 003; methods.md §3): their hand-coded construction,
the hybrid (constructed embeddings, trained unembedding), the random-embedding baseline and Appendix A, and
measures our challenge entry, a **random-key value table**, on the same capacity table (d = {ds}).

Headline (ratios of fixed-exponent fits a d^2 / ln d over the sizes where both modes were measured; published
values in brackets):

- trained / published hand-coded at acc >= 0.9: **{r("trained", "published_hand", 0.9)}** [about 9.7x];
  at acc = 1: {r("trained", "published_hand", 1.0)}.
- trained / published hybrid at acc >= 0.9: **{r("trained", "published_hybrid", 0.9)}** [about 3.5x];
  at acc = 1: {r("trained", "published_hybrid", 1.0)}.
- trained / **our hand-coded key-value table** at acc >= 0.9: **{r("trained", "keyvalue_hand", 0.9)}**
  (goal: within 3x); at acc = 1: {r("trained", "keyvalue_hand", 1.0)}.
- Hybrid track: our key-value embeddings with a trained unembedding fail
  (trained / ours = {r("trained", "keyvalue_hybrid", 0.9)}); the best hybrid we have is still the published one, so
  the hybrid goal (within 2x) is **not** met.
{_spot_headline(result)}- Appendix A stores all n_in^2 facts at 100% for n_in = {", ".join(map(str, check.n_in))}, with the bias neuron
  and with an output bias instead.{quick_note}""",
        ),
        (
            "Command",
            f"""This file was written by
```
{command}
```
({minutes:.1f} min on CPU, 1 thread, on 2 cores shared with other jobs). The whole table from scratch is
`python analyses/reproduce_constructions.py --ds 16 32` (about an hour on a free core, most of it the trained
d = 32 searches); with `--reuse` only the `--modes` given are recomputed and the rest is read from the data file.
Runs that contributed to the data file: {"; ".join(f"`{c}`" for c in result.runs) or "this one"}.
Per-mode search times are in the data file (`seconds`). Data: `data/constructions_capacity_{"quick" if quick else "full"}.json`
(every evaluation of the binary searches: mode -> d -> fact count -> best accuracy), `data/constructions_misc_*.json`.
Tests: `.venv/bin/pytest tests/test_constructions.py -q`.""",
        ),
        (
            "Setup",
            f"""- **Model** (`mechmem.papers.memorisation.constructions.model.ChallengeMLP`, registered as `challenge_mlp`):
  h = ReLU(E1[t1] + E2[t2]), logits = h U, no biases or norms; n_in = 2d, d_mlp = n_out = d. Hooks
  `hook_embed1`, `hook_embed2`, `mlp.hook_pre`, `mlp.hook_post`, `hook_logits`; many models stack on a leading axis.
- **Facts**: `mechmem.papers.memorisation.data.generate_facts(n, 2d, d, seed=42)` (the published generator).
- **Training** (trained, hybrid, rand-emb): Adam lr 1e-2, full batch, at most {grid.train.max_epochs} epochs, stop at
  100% or after {grid.train.patience} epochs without a new best; a model counts with the best accuracy it reached.
- **Capacity**: largest fact count with accuracy = 1 (resp. >= 0.9), found by doubling from d and bisecting to
  {result.precision["facts"]} facts; each count is judged by the best of {grid.n_inits} initialisations ("Any") or
  the best hyperparameter setting. Published hand-coded: S in {list(grid.s_values)} x top_fraction in
  {grid.top_fractions[0]:.2f}..{grid.top_fractions[-1]:.2f} ({len(grid.top_fractions)} values), {grid.retries}
  tie-break draws. Published hybrid (one trained U per setting): S in {list(grid.hybrid_s_values)} x top_fraction in
  {list(grid.hybrid_top_fractions)}. Ours: key sizes k = round(f (d - 1)), f in {list(grid.key_fractions)},
  {grid.key_retries} key draws.
- **Deviations from the paper.** (1) No output bias anywhere: the challenge architecture has none, but the
  authors' code trains a logit bias for the trained, hybrid and rand-emb models. (2) {grid.n_inits} initialisations
  per fact count, not 11, and one fact-set seed. (3) d = {ds} instead of 16..256 (trained only where the table shows it), so the fits rest
  on few points and the free exponents are rough; a column "a" is fitted over the sizes that mode has, the
  "trained / mode" ratio only over sizes both have. (4) Our own neuron-label code (greedy + local search; the authors used greedy +
  simulated annealing; they note the method should not matter). Loads are balanced to within one and overlaps
  are <= 1 away from the packing bound n_out S(S-1) <= d(d-1); near it a spread of 2 can remain. (5) The hybrid
  grid is smaller than the hand-coded one because every setting trains a U.""",
        ),
        (
            "Appendix A: all facts at d_mlp = n_in + 1",
            f"""{tables["appendix"]}

Selector neuron i fires only for first token i (E1 = 0 on the diagonal, -n_out elsewhere); the second token writes
L + 1 into it; an always-on neuron carries -(c + 1)^2 / 2, so logit_c = -((c + 1) - (L + 1))^2 / 2 + const peaks at
the stored label. With an output bias b_c = -(c + 1)^2 / 2 the always-on neuron is not needed (d_mlp = n_in).""",
        ),
        (
            "The published construction",
            f"""Each label gets S guard neurons; each guard is made silent on its labels'
facts by the +1 / -1 / 0 rule (the k = max(1, int(n_unique top_fraction)) most frequent tokens of each position to
-1; both tokens of facts covered by neither to 0); U = -2 from each label's guards. The true label's logit is then
exactly 0 and any label with a firing guard is negative (tests check both). Sweep at d = {sweep.d},
{sweep.n_facts} facts (best of {grid.retries} tie-breaks): best accuracy {best_acc:.3f} at S = {best_s},
top_fraction = {best_tf:.2f} (the paper: best S grows roughly like sqrt(d), here sqrt({sweep.d}) =
{sweep.d**0.5:.0f}; best top_fraction typically 0.1-0.3).

![S x top_fraction sweep]({figures["sweep"]})""",
        ),
        (
            "Capacity: the four modes and our entry",
            f"""{tables["capacity"]}

{tables["ratios"]}

![capacity vs d]({figures["capacity"]})

{_spot_text(result, grid)}The published ratios (9.7x hand-coded, 3.5x hybrid at acc >= 0.9) come from fits over d = 16..256 with 11
initialisations and a trained output bias; ours from d = {ds}. The ordering trained > hybrid > hand-coded and
hybrid > rand-emb reproduces; see the table for how close the factors come.""",
        ),
        (
            "Our entry: a random-key value table",
            """**Idea.** Appendix A is a lookup table that needs one selector
neuron per first token. With d_mlp = d = n_in / 2 we replace the one-hot selectors by dense random *keys*: first
token a switches on a random set K(a) of k of the d - 1 selector neurons, all at a common level C, and switches the
others off (E1 = -M). The second token b adds values x[b, i], so a fact's summed selector activation is
kC + sum_(i in K(a)) x[b, i]. We demand that this equal L(a, b) + 1. For each second token b that is one linear
equation per fact containing b, with row 1_K(a), in the d - 1 unknowns x[b]: random binary rows are independent,
so we solve it exactly (minimum-norm least squares) whenever b occurs in at most d - 1 facts, and store a random
d - 1 of its facts when it occurs more often. C and M are then set just large enough that key neurons stay on and
the rest stay off. The readout is Appendix A's parabola (U = c + 1 on the selectors, -(c + 1)^2 / 2 - kC(c + 1) on
the always-on neuron), which returns the label nearest to the stored value, so every fact has a +-1/2 tolerance.
`transpose` swaps the roles of the positions; we use the orientation whose busiest value token is least busy.

**Why it stores so much.** Every value weight E2[b, i] (2d (d - 1) of them) carries about one fact, so the table
holds up to ~2d^2 facts, limited at acc = 1 by the busiest second token (it must appear in <= d - 1 facts) and at
acc >= 0.9 by how many facts overflow their token's d - 1 slots. The trained model's ~a d^2 / ln d is below that at
these sizes. The published construction instead spends its weights on *silencing* guards: every fact must leave S
neurons exactly at zero, and a wrong label wins whenever its S guards are silent by accident, which gets likely as
facts pile up.

**Caveats.** (1) This is a magnitude code with exact cancellations: unlike trained models (Figures 6-8 below) only
k + 1 neurons fire per fact and their summed value, not their pattern, carries the label. It explains *that* this
architecture can hold this many facts, not how trained models do it. (2) It is precision-hungry: the exact solutions of near-square 0/1 systems
are large, so the weights grow with d (in a diagnostic run at 2,192 facts for d = 32 and 8,512 for d = 64, the
best draw's max |E| was about 6e2 and 2.6e3, and the always-on neuron's U entries reach ~1e6). All accuracies here
are computed in float32, as the model runs; at d = 64 rounding costs some key draws much of their accuracy and
only the best draw counts. Truncating small singular values (rcond 1e-3..3e-2) shrinks the weights but loses more
facts than it saves. (3) At
d = 8 (7 selectors) it is weak, since each value token holds at most 7 facts. (4) **It is useless as a hybrid:**
with U trained by Adam for at most 5,000 epochs and patience 100 the parabola readout (curvature and offset fixed
to within 1/(2kC)) is not found, whatever the activation scale (we tried scales 0.03..1 on d = 16: accuracy
<= 0.62 at 128 facts), nor with ridge-shrunk values that bring C down to 2-5 (<= 0.70 at 128 facts, while the
same features with the constructed U are 98-100% right): the label sits in one scalar among a large common offset,
and the readout that decodes it is a narrow target for 5,000 Adam steps from a random start. A hybrid within 2x would need embeddings whose labels are readable by a *large-margin*
linear classifier that Adam finds quickly; we did not find one in the time available.""",
        ),
        (
            "Weights and activations: constructed vs trained (their Figures 6-8)",
            f"""![histograms]({figures["histograms"]})

Rows: the published construction at its acc >= 0.9 capacity (best S, top_fraction); a model trained on the same
facts; a model trained at its own capacity; our key-value table at its capacity. As in the paper, the published
embeddings take only the values -1, 0, +1 and its unembedding only -2 and 0, while trained weights are smeared
out (trimodal at small fact counts, broad at capacity). The share of zero activations is in each activation
panel's title, to compare with the paper's remark that it looks "somewhat flipped" between hand-coded (facts stored
as a few silent guards, most neurons on) and trained models (more neurons off); at d = 16 we find the shares close
to each other rather than flipped. Our table's embeddings are two constants
(C on, -M off) plus continuous values, and only k + 1 neurons fire per fact.""",
        ),
    ]
