"""Writes the small labelled data sets docs/data.md trains on, one per format: product reviews whose words say
whether they are ``bad``, ``good`` or ``great`` (a classifier can learn them; a causal LM reads their text).

    python examples/data/make_examples.py            # reviews.jsonl, reviews.csv, reviews.parquet, reviews.tsv
    python examples/data/make_examples.py --saved    # also saved/, a datasets save_to_disk folder

The files beside this script are its output (seeded: the same bytes every time).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROWS = 300
THINGS = ["battery", "screen", "keyboard", "camera", "speaker", "case", "charger", "display", "hinge", "fan"]
WORDS = {
    "bad": ["broke after a week", "is flimsy", "stopped working", "feels cheap", "is too dim", "rattles"],
    "good": ["works as described", "is fine for the price", "does the job", "is solid", "holds up well"],
    "great": ["is superb", "exceeded every hope", "is the best I have owned", "is brilliant", "is flawless"],
}


def reviews(n: int = ROWS) -> list[dict[str, str]]:
    """``n`` reviews of two to four sentences, labelled by what their sentences say."""
    rng = random.Random(0)
    out = []
    for i in range(n):
        label = list(WORDS)[i % len(WORDS)]
        sentences = [f"The {rng.choice(THINGS)} {rng.choice(WORDS[label])}." for _ in range(rng.randint(2, 4))]
        out.append({"review": " ".join(sentences), "stars": label})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saved", action="store_true", help="also write saved/ (datasets' save_to_disk)")
    args = parser.parse_args()
    rows = reviews()
    (HERE / "reviews.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (HERE / "reviews.tsv").write_text("".join(f"{r['stars']}\t{r['review']}\n" for r in rows))
    import pandas as pd

    frame = pd.DataFrame(rows)
    frame.to_csv(HERE / "reviews.csv", index=False)
    frame.to_parquet(HERE / "reviews.parquet", index=False)
    if args.saved:
        import datasets

        datasets.Dataset.from_pandas(frame).save_to_disk(str(HERE / "saved"))


if __name__ == "__main__":
    main()
