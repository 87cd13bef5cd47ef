"""``runner eval --generate``: an instruction run's held-out prompts, in its template, answered by the compiled
decoder and scored against the data's answers (exact, contains, a regex), with every answer written beside eval.json;
and its refusals, before any model is built."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from runner.after.answers import normalise, score
from runner.after.cli import main
from runner.data.instruct.formats import PAIR_TEMPLATE
from tests.after_runs import train
from tests.test_instruct_run import RECIPE

BEFORE, AFTER = PAIR_TEMPLATE.split("{prompt}")


def _eval(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["eval", *args])
    return code, out.getvalue(), err.getvalue()


def test_normalised_scores() -> None:
    assert normalise("  The Answer, is: 42! ") == "answer is 42"
    assert score("The answer is 42.", "42", None) == {"exact": False, "contains": True}
    assert score("an Apple", "apple", None)["exact"]
    pattern = re.compile(r"answer is (\d+)")
    assert score("so the answer is 42, I think", "42", pattern)["regex"]
    assert not score("no number here", "42", pattern)["regex"]
    assert not score("anything", "", None)["contains"]  # an empty reference is contained in nothing


def test_answers_of_held_out_prompts_are_scored(tmp_path: Path) -> None:
    trained = train(tmp_path / "run", RECIPE)
    run_dir = trained.run_dir
    code, out, err = _eval(str(run_dir), "--generate", "--max-new-tokens", "8", "--limit", "12")
    assert code == 0, err
    figures = json.loads((run_dir / "eval.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "eval_answers.jsonl").read_text().splitlines()]
    assert figures["eval/answers/examples"] == len(rows) == 12
    shipped = {json.loads(line)["prompt"]: json.loads(line)["response"]
               for line in (Path(RECIPE[1].split("=", 1)[1])).read_text().splitlines()}
    # Each prompt in the run's template, its reference the data's own answer, its answer at most 8 ids (bytes: at
    # most 8 characters).
    for row in rows:
        assert row["prompt"].startswith(BEFORE) and row["prompt"].endswith(AFTER)
        assert shipped[row["prompt"][len(BEFORE):-len(AFTER)]] == row["reference"]
        assert len(row["answer"]) <= 8
    assert figures["eval/answers/exact_count"] == sum(r["exact"] for r in rows)
    assert figures["eval/answers/max_new_tokens"] == 8 and "SQuAD" in figures["eval/answers/normalisation"]
    assert figures["eval/answers/decode"].startswith("compiled (aot_eager): the prefill of")
    assert "exact" in out

    # The same prompts with the model's own answers as the references for half of them: those match exactly.
    # (An answer of nothing but spaces is no reference: instruction data refuses such rows.)
    said = [r for r in rows if r["answer"].strip()]
    assert len(said) >= 2
    data = tmp_path / "own.jsonl"
    data.write_text("".join(json.dumps({"prompt": r["prompt"][len(BEFORE):-len(AFTER)],
                                        "response": r["answer"] if i % 2 == 0 else "zzz qqq"}) + "\n"
                            for i, r in enumerate(said)))
    code, _, err = _eval(str(run_dir), "--generate", "--max-new-tokens", "8", "--data", str(data),
                         "--regex", "(.*)", "--out", str(tmp_path / "own.json"))
    assert code == 0, err
    own = json.loads((tmp_path / "own.json").read_text())
    own_rows = (len(said) + 1) // 2
    assert own["eval/answers/examples"] == len(said)
    assert own["eval/answers/exact_count"] == own["eval/answers/regex_count"] == own_rows
    assert own["eval/answers/exact"] == round(own_rows / len(said), 6) and own["eval/data"].endswith(str(data))


@pytest.mark.parametrize(("args", "says"), [
    (["--regex", "x"], "--regex go with --generate"),
    (["--generate", "--limit", "0"], "--limit 0: give a number, at least 1"),
    (["--generate", "--regex", "("], "is not a regular expression"),
    (["--generate", "--data", "a.jsonl", "data.val_path=b.jsonl"], "name the same thing"),
])
def test_refusals_before_anything_is_read(args: list[str], says: str, tmp_path: Path) -> None:
    code, _, err = _eval(str(tmp_path), *args)
    assert code == 2 and says in err


def test_generate_needs_instruction_data(tmp_path: Path) -> None:
    from runner.after.cli import answers_error
    from runner.config import compose
    from runner.config.composing.loading import convert

    def config(overrides: list[str]) -> object:
        return convert(compose(overrides, run_dir=str(tmp_path)))

    assert "needs a run on instruction data" in str(answers_error(config(["+recipe=quickstart"]), Path("r")))
    assert answers_error(config(RECIPE), Path("r")) is None


def test_answers_while_training_are_logged_and_leave_training_graphs_alone(tmp_path: Path) -> None:
    steps = ["trainer.max_steps=4", "trainer.val_check_interval=4", "eval.generate_every_n_steps=2",
             "eval.generate_examples=3", "eval.max_new_tokens=4"]
    trained = train(tmp_path / "run", [*RECIPE, *steps])
    assert trained.figures["dynamic/recompiles"] == 0 and trained.figures["dynamic/graphs"] == 1
    logged = [line for path in trained.run_dir.rglob("metrics.csv") for line in path.read_text().splitlines()]
    header = logged[0].split(",")
    column, step = header.index("eval/answers/exact"), header.index("step")
    scored = [row.split(",") for row in logged[1:] if row.split(",")[column]]
    assert [int(r[step]) for r in scored] == [2, 4]
    assert all(0 <= float(r[column]) <= 1 for r in scored)


def test_answers_while_training_need_instruction_data(tmp_path: Path) -> None:
    from runner.config import ConfigError, compose
    from runner.config.checks.validate import validate
    from runner.config.composing.loading import convert

    with pytest.raises(ConfigError, match="eval.generate_every_n_steps=5: answers are scored against instruction"):
        validate(convert(compose(["+recipe=quickstart", "eval.generate_every_n_steps=5"], run_dir=str(tmp_path))))
