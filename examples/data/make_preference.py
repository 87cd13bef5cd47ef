"""Writes the small preference sets docs/preference.md trains on: questions with a right answer a program computes
(chosen) and a wrong one (rejected), so every preference is right and the files are this script's own output.

    python examples/data/make_preference.py     # preference.jsonl (prompt, chosen, rejected), preference_chat.jsonl

Each task's right answer follows from its question by a rule a small model can pick up (copy a word of the question,
write it in capitals, compare two numbers, tell a number's parity, name the first of a list), so a tiny model's
preference accuracy on pairs it never saw rises well above chance in a short run.

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
         "engine", "pencil", "rocket", "summer", "winter", "island", "market", "candle", "butter", "mirror"]
Task = Callable[[random.Random], tuple[str, str, str]]


def repeat(rng: random.Random) -> tuple[str, str, str]:
    word, other = rng.sample(WORDS, 2)
    return f'Repeat the word "{word}".', word, other


def capitals(rng: random.Random) -> tuple[str, str, str]:
    words = " ".join(rng.sample(WORDS, rng.randint(1, 2)))
    return f'Write "{words}" in capital letters.', words.upper(), words


def larger(rng: random.Random) -> tuple[str, str, str]:
    a, b = rng.sample(range(10, 100), 2)
    return f"Which is larger, {a} or {b}?", str(max(a, b)), str(min(a, b))


def parity(rng: random.Random) -> tuple[str, str, str]:
    n = rng.randint(10, 999)
    right, wrong = ("even", "odd") if n % 2 == 0 else ("odd", "even")
    return f"Is {n} even or odd?", f"{n} is {right}.", f"{n} is {wrong}."


def first(rng: random.Random) -> tuple[str, str, str]:
    words = rng.sample(WORDS, 3)
    return f'What is the first word of "{" ".join(words)}"?', words[0], rng.choice(words[1:])


TASKS: list[Task] = [repeat, capitals, larger, parity, first]


def pairs(n: int, seed: int = 0) -> list[dict[str, str]]:
    """``n`` questions with a right and a wrong answer, the tasks in turn."""
    rng = random.Random(seed)
    return [dict(zip(("prompt", "chosen", "rejected"), TASKS[i % len(TASKS)](rng), strict=True)) for i in range(n)]


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
