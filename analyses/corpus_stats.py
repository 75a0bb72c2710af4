"""Count character unigrams and bigrams of a text corpus for the triggered-bigram ("birth") task.

    python analyses/corpus_stats.py ../shared/data/tinyshakespeare.txt \
        --out src/mechmem/data/tinyshakespeare_stats.json

Writes only the counts (vocabulary, unigram and bigram counts), never the text, so the result can be shipped.
"""

from pathlib import Path

from mechmem.cli import ArgumentParser, run_script, write_json
from mechmem.papers.birth.corpus import stats_from_corpus


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", help="UTF-8 text file to count")
    parser.add_argument(
        "--out",
        default="src/mechmem/data/tinyshakespeare_stats.json",
        help="JSON file to write the counts to",
    )
    args = parser.parse_args(argv)
    stats = stats_from_corpus(args.corpus)
    write_json(Path(args.out), stats.to_dict())
    top = stats.unigram.argsort(descending=True)[:5].tolist()
    print(
        f"{stats.n_tokens} characters, {int(stats.unigram.sum())} tokens; most frequent: "
        + ", ".join(repr(stats.chars[i]) for i in top)
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
