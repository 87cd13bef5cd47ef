"""Writes the small instruction sets docs/data.md fine-tunes on: questions whose answers a program computes
(arithmetic, words, Python expressions evaluated here, small functions), so every answer is right and the files
are this script's own output.

    python examples/data/make_instruct.py     # instruct.jsonl (prompt, response), instruct_chat.jsonl (messages)

``instruct.jsonl``: 2,000 rows of ``{"prompt", "response"}``. ``instruct_chat.jsonl``: 500 conversations of two
user turns and two assistant turns (``{"messages": [{"role", "content"}, ...]}``). Seeded: the same bytes every
time.
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
NAMES = ["square", "double", "half", "negate", "increment", "triple", "cube", "is_even"]
BODIES = {"square": "x * x", "double": "2 * x", "half": "x / 2", "negate": "-x", "increment": "x + 1",
          "triple": "3 * x", "cube": "x ** 3", "is_even": "x % 2 == 0"}
RETURNS = {"square": "the square of x", "double": "twice x", "half": "half of x", "negate": "minus x",
           "increment": "x plus one", "triple": "three times x", "cube": "the cube of x",
           "is_even": "whether x is even"}
Task = Callable[[random.Random], tuple[str, str]]


def arithmetic(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    op = rng.choice("+-*")
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    return f"What is {a} {op} {b}?", f"{a} {op} {b} = {value}."


def reverse(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(WORDS)
    return f'Reverse the word "{word}".', word[::-1]


def capitals(rng: random.Random) -> tuple[str, str]:
    words = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
    return f'Write "{words}" in capital letters.', words.upper()


def count(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(WORDS)
    letter = rng.choice(word)
    return (f'How many times does the letter "{letter}" appear in "{word}"?',
            f'"{letter}" appears {word.count(letter)} time{"s" if word.count(letter) > 1 else ""} in "{word}".')


def sort(rng: random.Random) -> tuple[str, str]:
    numbers = rng.sample(range(1, 100), rng.randint(3, 7))
    return (f"Sort these numbers from smallest to largest: {', '.join(map(str, numbers))}.",
            ", ".join(map(str, sorted(numbers))))


def expression(rng: random.Random) -> tuple[str, str]:
    word = rng.choice(WORDS)
    numbers = rng.sample(range(1, 20), 4)
    source = rng.choice([f"len({word!r})", f"{word!r}.upper()", f"sorted({numbers})", f"max({numbers})",
                         f"{numbers[0]} // {numbers[1]}", f"{numbers[0]} % {numbers[1]}", f"{word!r}[::-1]",
                         f"'-'.join({list(word[:3])})", f"list(range({numbers[2] % 6 + 1}))",
                         f"sum({numbers})", f"{word!r}.count({word[0]!r})", f"{word!r}[1:4]"])
    return f"What does the Python expression {source} evaluate to?", repr(eval(source))  # noqa: S307 - our own text


def function(rng: random.Random) -> tuple[str, str]:
    name = rng.choice(NAMES)
    return (f"Write a Python function {name}(x) that returns {RETURNS[name]}.",
            f"def {name}(x):\n    return {BODIES[name]}")


TASKS: list[Task] = [arithmetic, reverse, capitals, count, sort, expression, function]


def pairs(n: int, seed: int = 0) -> list[dict[str, str]]:
    """``n`` questions and their answers, the tasks in turn."""
    rng = random.Random(seed)
    return [dict(zip(("prompt", "response"), TASKS[i % len(TASKS)](rng), strict=True)) for i in range(n)]


def chats(n: int, seed: int = 1) -> list[dict[str, list[dict[str, str]]]]:
    """``n`` conversations of two questions, each answered."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        messages = []
        for _ in range(2):
            question, answer = rng.choice(TASKS)(rng)
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        out.append({"messages": messages})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.parse_args()
    (HERE / "instruct.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs(ROWS)))
    (HERE / "instruct_chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chats(CHATS)))


if __name__ == "__main__":
    main()
