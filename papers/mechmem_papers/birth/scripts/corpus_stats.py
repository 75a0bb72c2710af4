"""Count character unigrams and bigrams of a text corpus for the triggered-bigram ("birth") task.

    # the shipped counts
    python -m mechmem_papers.birth.scripts.corpus_stats ../shared/data/tinyshakespeare.txt
    python -m mechmem_papers.birth.scripts.corpus_stats my_corpus.txt --out runs/my_corpus_stats.json

Without --out the counts replace the shipped file (`tinyshakespeare_stats.json` in this paper's package).

Writes only the counts (vocabulary, unigram and bigram counts), never the text, so the result can be shipped.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

from pathlib import Path

from mechmem.cli import ArgumentParser, input_file, run_script, write_json


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=input_file, help="UTF-8 text file to count")
    parser.add_argument(
        "--out", help="JSON file to write the counts to (default: the shipped counts of this package)"
    )
    args = parser.parse_args(argv)
    from mechmem.tasks.birth.corpus import SHIPPED, stats_from_corpus  # torch is imported from here on

    out = Path(args.out or Path(__file__).resolve().parents[1] / SHIPPED)
    stats = stats_from_corpus(args.corpus)
    write_json(out, stats.to_dict())
    top = stats.unigram.argsort(descending=True)[:5].tolist()
    print(
        f"{stats.n_tokens} characters, {int(stats.unigram.sum())} tokens; most frequent: "
        + ", ".join(repr(stats.chars[i]) for i in top)
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
