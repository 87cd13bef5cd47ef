"""Writes the small preference sets docs/preference.md trains on: questions with a right answer a program computes
(chosen) and a wrong one (rejected), so every preference is right and the files are this script's own output.

    python examples/data/make_preference.py     # preference.jsonl (prompt, chosen, rejected), preference_chat.jsonl

Each task's right answer follows from its question by a rule (write words in capital or in small letters, a number
in digits or in words, pick the larger of two numbers); the wrong answer breaks it (the other case, the other form,
the smaller number). Every row is different (validation reads pairs
training never saw), and all but the last rule show in the answer's form, which a tiny model picks up in a short
run: its preference accuracy on the validation pairs rises well above chance (docs/preference.md shows a run).

``preference.jsonl``: 2,000 rows of ``{"prompt", "chosen", "rejected"}`` (TRL's explicit-prompt shape).
``preference_chat.jsonl``: 500 rows of ``{"chosen", "rejected"}``, each a conversation (``[{"role", "content"},
...]``) of one or two user turns whose last assistant turn differs: the prompt is the turns they share (TRL's
implicit-prompt shape, UltraFeedback's binarized one). Seeded: the same bytes every time.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROWS = 2000
CHATS = 500
WORDS = ["garden", "python", "window", "river", "planet", "silver", "orange", "castle", "bridge", "forest",
         "engine", "pencil", "rocket", "summer", "winter", "island", "market", "candle", "butter", "mirror",
         "cat", "sun", "map", "owl", "tree", "lamp", "frog", "ship", "cloud", "stone", "bread", "chair", "tiger",
         "music", "ocean", "apple", "yellow", "kitten", "basket", "dragon", "blanket", "diamond", "kitchen",
         "library", "monster", "rainbow", "teacher", "volcano", "elephant", "mountain", "sandwich", "umbrella",
         "dinosaur", "notebook", "computer", "keyboard", "hospital", "painting", "bicycle", "airplane"]
Task = Callable[[random.Random], tuple[str, str, str]]


ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
        "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def spelled(n: int) -> str:
    """``n`` (0-999) in words: 42 -> forty-two, 305 -> three hundred and five."""
    if n >= 100:
        return ONES[n // 100] + " hundred" + (" and " + spelled(n % 100) if n % 100 else "")
    if n < 20:
        return ONES[n]
    return TENS[n // 10] + ("-" + ONES[n % 10] if n % 10 else "")


def phrase(rng: random.Random) -> str:
    return " ".join(rng.sample(WORDS, rng.randint(1, 3)))


def capitals(rng: random.Random) -> tuple[str, str, str]:
    words = phrase(rng)
    return f'Write "{words}" in capital letters.', words.upper(), words


def small_letters(rng: random.Random) -> tuple[str, str, str]:
    words = phrase(rng).upper()
    return f'Write "{words}" in small letters.', words.lower(), words


def digits(rng: random.Random) -> tuple[str, str, str]:
    n = rng.randint(0, 999)
    return f"Write {spelled(n)} in digits.", str(n), spelled(n)


def in_words(rng: random.Random) -> tuple[str, str, str]:
    n = rng.randint(0, 999)
    return f"Write {n} in words.", spelled(n), str(n)


def larger(rng: random.Random) -> tuple[str, str, str]:
    a, b = rng.sample(range(10, 100), 2)
    return f"Which is larger, {a} or {b}?", str(max(a, b)), str(min(a, b))


TASKS: list[Task] = [capitals, small_letters, digits, in_words, larger]


def pairs(n: int, seed: int = 0) -> list[dict[str, str]]:
    """``n`` different questions-and-answers pairs (no row twice: validation reads rows training never does), the
    tasks in turn; a task whose pairs run out leaves its turn to the others."""
    rng = random.Random(seed)
    seen: set[tuple[str, str, str]] = set()
    out: list[dict[str, str]] = []
    tasks, misses = list(TASKS), dict.fromkeys(TASKS, 0)
    i = 0
    while len(out) < n and tasks:
        task = tasks[i % len(tasks)]
        i += 1
        row = task(rng)
        if row in seen:
            misses[task] += 1
            if misses[task] > 1000:  # this task has (almost) no new pair left: the others take its turns
                tasks.remove(task)
            continue
        misses[task] = 0
        seen.add(row)
        out.append(dict(zip(("prompt", "chosen", "rejected"), row, strict=True)))
    return out


def chats(n: int, seed: int = 1) -> list[dict[str, list[dict[str, str]]]]:
    """``n`` conversations: an optional first exchange answered right, then a question answered right (chosen)
    or wrong (rejected)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        shared: list[dict[str, str]] = []
        if i % 2:
            question, answer, _ = rng.choice(TASKS)(rng)
            shared = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        question, right, wrong = rng.choice(TASKS)(rng)
        shared = [*shared, {"role": "user", "content": question}]
        out.append({"chosen": [*shared, {"role": "assistant", "content": right}],
                    "rejected": [*shared, {"role": "assistant", "content": wrong}]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.parse_args()
    (HERE / "preference.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs(ROWS)))
    (HERE / "preference_chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chats(CHATS)))


if __name__ == "__main__":
    main()
