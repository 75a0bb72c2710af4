"""The comparison with the authors' E7 scaling logs: their Any per model and d, their schedule per d, our
scaling rows that ran at it, and fits of ours beside theirs over the same d."""

import math
from dataclasses import dataclass
from typing import Any

from mechmem_papers.memorisation.fits import ScalingFit, fit_scaling


def e7_any(record: dict[str, Any]) -> dict[str, dict[int, int]]:
    """Scaling model -> d -> the authors' E7 Any (published values file)."""
    models = record["published"]["e7_any"]["models"]
    return {name: {p["d"]: p["any"] for p in points} for name, points in models.items()}


def e7_schedule(record: dict[str, Any], d: int) -> tuple[int, int] | None:
    """(epochs per lr phase, patience) of the authors' E7 at d, or None for a d E7 did not run."""
    pub = record["published"]["scaling_schedule"]["value"]
    epochs = pub["max_epochs"].get(str(d))
    return (epochs, pub["patience"]) if epochs else None


def rows_at_e7(record: dict[str, Any]) -> dict[str, dict[int, dict[str, Any]]]:
    """Scaling model -> d -> its row at the authors' E7 schedule for that d (searches still running too)."""
    every = record["scaling"] + record.get("scaling_other", []) + record.get("scaling_running", [])
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for r in every:
        if e7_schedule(record, r["d"]) == (r["schedule"]["max_epochs"], r["schedule"]["patience"]):
            out.setdefault(r["variant"], {})[r["d"]] = r
    return out


def authors_fits(record: dict[str, Any]) -> dict[str, ScalingFit]:
    """Scaling model -> the authors' E7 Any fitted over every d they ran."""
    return {
        name: fit_scaling(sorted(by_d), [by_d[d] for d in sorted(by_d)])
        for name, by_d in e7_any(record).items()
    }


@dataclass(frozen=True)
class E7Fit:
    """One scaled model's Any at the E7 schedule over the d its searches finished, and the authors' E7 Any
    fitted over the same d (None where E7 lacks one of them)."""

    model: str
    ours: ScalingFit
    authors: ScalingFit | None

    @property
    def law_exponent(self) -> float:
        """The secant exponent of d^2 / ln d itself between the first and last d."""
        lo, hi = self.ours.d[0], self.ours.d[-1]
        return 2 - math.log(math.log(hi) / math.log(lo)) / math.log(hi / lo)


def e7_fits(record: dict[str, Any]) -> list[E7Fit]:
    """The scaled models with 2+ finished sizes at the E7 schedule, each fitted beside E7's values."""
    e7, out = e7_any(record), []
    for variant, at in rows_at_e7(record).items():
        ds = sorted(d for d, r in at.items() if r["any"] is not None)
        if len(ds) < 2:
            continue
        pub = e7.get(variant, {})
        authors = fit_scaling(ds, [pub[d] for d in ds]) if all(d in pub for d in ds) else None
        out.append(E7Fit(variant, fit_scaling(ds, [at[d]["any"] for d in ds]), authors))
    return out
