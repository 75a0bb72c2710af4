"""The prose of docs/reproductions/constructions.md, filled in from the measured results."""

from mechmem.constructions.experiments import AppendixACheck, CapacityResult, SweepResult


def markdown_sections(result: CapacityResult, check: AppendixACheck, sweep: SweepResult, tables: dict, figures: dict,
                      grid, *, command: str, quick: bool, minutes: float) -> list[tuple[str, str]]:
    return [
        ("", "# Hand-coded memorisation (Linsefors & Bushnaq): reproduction and challenge entry"),
        ("Command", f"`{command}` ({minutes:.1f} min)"),
        ("Appendix A", tables["appendix"]),
        ("Published construction: S x top_fraction sweep", f"![sweep]({figures['sweep']})"),
        ("Capacity", tables["capacity"] + "\n\n" + tables["ratios"] + f"\n\n![capacity]({figures['capacity']})"),
        ("Histograms", f"![histograms]({figures['histograms']})"),
    ]
