"""``runner export | eval | generate RUN_DIR ...`` (docs/after-training.md). Every refusal is one paragraph on
stderr with exit code 2 before anything is written; Ctrl-C exits 130 with nothing half-written."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from runner.atomic_files import atomic_write_bytes
from runner.config import ConfigError
from runner.config.errors import close_matches

_USAGE = {
    "export": ("python -m runner export RUN_DIR [--ckpt last|best|PATH] [--out DIR] [--force] [--merge [--dequantize]] "
               "[--push-to-hub ORG/NAME [--private]]"),
    "eval": ("python -m runner eval RUN_DIR [--ckpt last|best|PATH] [--out FILE] [--data FILE] [--generate "
             "[--max-new-tokens N] [--regex PATTERN] [--limit N]] [data.KEY=VALUE ...]"),
    "generate": ("python -m runner generate RUN_DIR|EXPORT_DIR --prompt TEXT | --prompts-file FILE "
                 "[--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--compile] "
                 "[--ckpt last|best|PATH]"),
}


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose refusals (a bad value, no run directory) are ``ConfigError``: one paragraph, exit 2."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message}. Usage: {self.usage}")


def refuse(problem: str | None) -> None:
    """Raise the refusal ``problem`` says, if any (one paragraph, exit code 2)."""
    if problem is not None:
        raise ConfigError(problem)


def _parser(command: str) -> argparse.ArgumentParser:
    # No abbreviations: a flag is given whole, as a config key is (--max-new-token is refused, not read as a prefix).
    p = _Parser(prog=f"runner {command}", usage=_USAGE[command], allow_abbrev=False)
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="a run directory (outputs/<date>/<time>-<name>)")
    p.add_argument("--ckpt", default="last", help="last (default), best, or a checkpoint file")
    if command == "export":
        p.add_argument("--out", type=Path, help="the directory to write (default: RUN_DIR/model)")
        p.add_argument("--force", action="store_true", help="replace --out when it exists and is not empty")
        p.add_argument("--merge", action="store_true", help="a LoRA run: the adapter merged into its base, one model")
        p.add_argument("--dequantize", action="store_true", help="with --merge, a QLoRA run: merge into its NF4 "
                       "base weights dequantized")
        p.add_argument("--push-to-hub", metavar="ORG/NAME", help="push the export to this Hugging Face Hub model repo, "
                       "with a model card (without --out the export is written to a temporary folder)")
        p.add_argument("--private", action="store_true", help="with --push-to-hub: the repo it creates is private")
    if command == "eval":
        p.add_argument("--out", type=Path, help="the JSON file to write (default: RUN_DIR/eval.json)")
        p.add_argument("--data", type=Path, help="score this file in place of the run's validation split (the same "
                       "format and columns as its data; data.val_path=FILE says the same)")
        p.add_argument("--generate", action="store_true", help="an instruction run: answer each held-out prompt "
                       "(the run's template) and score the answers against the data's (docs/after-training.md)")
        p.add_argument("--max-new-tokens", type=int, default=128, help="with --generate: the longest answer, in tokens")
        p.add_argument("--regex", help="with --generate: also score the first match of PATTERN in each answer (its "
                       "group 1 when it has one) against the reference")
        p.add_argument("--limit", type=int, help="with --generate: the first N held-out examples only")
    if command == "generate":
        from runner.after.generate import Sampling

        p.add_argument("--prompt", default=None, help="the text to continue (default: a new line)")
        p.add_argument("--prompts-file", type=Path, help="a text file, one prompt a line: all of them written at once")
        p.add_argument("--max-new-tokens", type=int, default=Sampling.max_new_tokens)
        p.add_argument("--temperature", type=float, default=Sampling.temperature, help="0: greedy")
        p.add_argument("--top-k", type=int, default=Sampling.top_k, help="0: every token")
        p.add_argument("--top-p", type=float, default=Sampling.top_p, help="1: every token")
        p.add_argument("--seed", type=int, default=Sampling.seed)
        p.add_argument("--compile", action="store_true", help="the prefill and each step through torch.compile, "
                       "with the run's compile.backend (an export's: inductor); docs/generate.md says when it pays")
    return p


def main(argv: Sequence[str]) -> int:
    """Run ``argv[0]`` (export, eval or generate) with the rest of ``argv``; the exit code."""
    from runner.quiet import quiet_transformers_bars

    command, rest = argv[0], list(argv[1:])
    parser = _parser(command)
    try:
        args, overrides = parser.parse_known_args(rest)
        refuse(arguments_error(command, overrides, parser_flags(parser), _USAGE[command]))
        with quiet_transformers_bars():
            if command == "export":
                return export(args)
            if command == "eval":
                return evaluate(args, overrides)
            return generate(args)
    except ConfigError as e:
        print(f"runner {command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C while loading: nothing is written before the end (an export is whole or absent)
        from runner.reliability.signals import exit_code

        print(f"runner {command}: interrupted before it finished; its files are written whole at the end, so none "
              "is half-written.", file=sys.stderr)
        return exit_code(signal.SIGINT)


def parser_flags(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag ``parser`` knows (``--out``, ``-h``, ...)."""
    return sorted(parser._option_string_actions)  # argparse keeps them there, public in all but name


def arguments_error(command: str, unknown: Sequence[str], flags: Sequence[str], usage: str) -> str | None:
    """Why the arguments the parser did not take are refused (an unknown flag, or anything but eval's overrides)."""
    real = [f for f in flags if f.startswith("--") and f != "--help"]
    for arg in unknown:
        if arg.startswith("-"):
            flag = arg.split("=", 1)[0]
            by_name = {f.lstrip("-"): f for f in real}
            matches = [f for f in real if f.startswith(flag)] or [  # a prefix: the flag it abbreviates
                by_name[m] for m in close_matches(flag.lstrip("-"), by_name)]
            fix = f": did you mean {' or '.join(matches)}?" if matches else "."
            return f"{flag} is not a flag of runner {command}{fix} Its flags: {', '.join(real)}. Usage: {usage}"
        if command != "eval" or "=" not in arg:
            takes = "flags and data.KEY=VALUE overrides" if command == "eval" else "flags only"
            return (f"{arg!r} is no argument of runner {command}: after RUN_DIR it takes {takes}. Usage: {usage}")
    return None


def export(args: Any) -> int:
    from runner.after.source import open_trained, run_dir_error

    refuse(run_dir_error(args.run_dir))
    push, where = args.push_to_hub, f"--push-to-hub {args.push_to_hub}"
    if args.private and push is None:
        raise ConfigError("--private goes with --push-to-hub ORG/NAME: it makes the repo the push creates private. "
                          f"Usage: {_USAGE['export']}")
    if push is not None:
        from runner.config.checks.push import repo_id_error, token_error

        refuse(repo_id_error(push, where) or token_error(where))
    from runner.after.adapter_export import merge_error
    from runner.after.export import EXPORT_DIR, export_error, export_model
    from runner.after.source import checkpoint_path, run_config
    from runner.config.paths import last_checkpoint_path
    from runner.peft import merge_peft

    # Pushed without --out: written to a temporary folder in the run, removed after the push (RUN_DIR/model stays).
    out = args.out or (None if push else args.run_dir / EXPORT_DIR)
    if out is not None:
        export_error(out, args.force)
    if push is not None and args.ckpt == "last" and not last_checkpoint_path(args.run_dir).is_file():
        return _push_own_export(args, args.run_dir / EXPORT_DIR, where)
    checkpoint_path(args.run_dir, args.ckpt)  # a missing checkpoint is named before the config is composed
    cfg = run_config(args.run_dir)
    refuse(merge_error(cfg, args.run_dir, args.merge, args.dequantize))
    if push is not None:
        from runner.after.push import open_repo

        open_repo(push, args.private, where)  # the Hub's refusals (a token, the right to write) before the build
    trained = open_trained(args.run_dir, args.ckpt, cfg)
    extra = {"merged": merge_peft(trained.model), "dequantized": args.dequantize} if args.merge else None
    with contextlib.ExitStack() as stack:
        target = out or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=".push-", dir=args.run_dir))) \
            / EXPORT_DIR
        export_model(trained.model, trained.cfg, args.run_dir, target, str(trained.checkpoint), trained.step, extra)
        if out is not None:
            print(f"runner export: {out} (step {trained.step} of {trained.checkpoint}); how to load it: "
                  f"{out / 'README.md'}")
        if push is not None:
            _push(args, target, cfg, where, f"step {trained.step} of {trained.checkpoint}")
    return 0


def _push_own_export(args: Any, export: Path, where: str) -> int:
    """``--push-to-hub`` of a run without a checkpoint: the export its fit wrote, as it is, else a refusal."""
    from runner.after.export import METADATA
    from runner.after.source import run_config

    whole = (export / METADATA).is_file()
    if not whole:
        raise ConfigError(f"{where}: {args.run_dir} has no export to push: no checkpoints/last.ckpt to export from "
                          "(the run stopped before its first checkpoint, or its checkpoints were removed) and no whole "
                          f"export in {export} (no {METADATA}; a run writes one there at the end of its fit). Give "
                          f"--ckpt with one of the run's checkpoint files, or train it on (python -m runner resume "
                          f"{args.run_dir}) and push then.")
    if args.merge or args.out is not None:
        flags = " and ".join(f for f, given in (("--merge", args.merge), ("--out", args.out is not None)) if given)
        raise ConfigError(f"{where}: {args.run_dir} has no checkpoints/last.ckpt, and {flags} write a new export from "
                          f"a checkpoint, so there is no export to push. Drop {flags} to push the export its fit wrote "
                          f"({export}) as it is, or give --ckpt with one of the run's checkpoint files.")
    cfg = run_config(args.run_dir)
    print(f"runner export: {args.run_dir} has no checkpoints/last.ckpt; pushing the export its fit wrote, {export}")
    _push(args, export, cfg, where, "the export of the end of the fit")
    return 0


def _push(args: Any, export: Path, cfg: Any, where: str, what: str) -> None:
    from runner.after.push import push_export, read_json

    report = read_json(args.run_dir / "report.json")
    pushed = push_export(export, args.push_to_hub, args.private, cfg, args.run_dir, report, where)
    print(f"runner export: pushed {what} to {pushed.url} (commit {pushed.commit}, {pushed.files} files); its model "
          "card says how to load it by name")


def evaluate(args: Any, overrides: list[str]) -> int:
    from runner.after import evaluate as ev
    from runner.after.eval_data import data_error, overrides_error
    from runner.after.family import label_names
    from runner.after.source import check, checkpoint_path, open_trained, run_config, run_dir_error
    from runner.build import build_datamodule
    from runner.data.store.progress import Progress
    from runner.reliability.signals import exit_code

    refuse(overrides_error(overrides))
    refuse(_generate_flags_error(args, overrides))
    if args.data is not None:  # the file validates in place of the run's split: every row of it is scored
        overrides = [*overrides, f"data.val_path={args.data}"]
    run_dir = args.run_dir
    refuse(run_dir_error(run_dir))
    checkpoint_path(run_dir, args.ckpt)  # a missing checkpoint is named before the config is composed
    cfg = run_config(run_dir, overrides, validated=False)
    if overrides:
        refuse(data_error(run_config(run_dir, validated=False), cfg, run_dir))
    check(cfg)  # then the data family's own checks of the files named, as a run's
    if args.generate:
        refuse(answers_error(cfg, run_dir))
    trained = open_trained(run_dir, args.ckpt, cfg)
    datamodule: Any = build_datamodule(trained.cfg)
    datamodule.setup("validate")
    if args.generate:
        return _answer(args, trained, datamodule, overrides)
    loader = datamodule.val_dataloader()
    report = run_dir / "report.json"  # none when a failure stopped the run
    compiled, mode = ev.resolve_mode(trained.cfg, json.loads(report.read_text()) if report.is_file() else {},
                                     len(loader))
    classes = getattr(trained.cfg.data, "num_classes", None)  # None for a language model's data
    labels = label_names(run_dir, classes if isinstance(classes, int) else 0)
    data = "the validation split of " + (" ".join(overrides) or "the run's data")
    out = args.out or run_dir / "eval.json"
    progress = Progress(f"scoring {data}", len(loader), unit="batches", topic="eval")  # after 5 s, as data's
    try:
        scored = (ev.run_pairs(trained.module, datamodule, trained.cfg, compiled, progress)
                  if trained.cfg.objective.loss.preference
                  else ev.run_pass(trained.module, loader, trained.cfg, labels, compiled, progress))
    except KeyboardInterrupt:  # Ctrl-C: what was scored, and that figures of part of the split are not written
        print(f"runner eval: interrupted after scoring {progress.done:,} of {progress.total:,} batches of {data}: "
              f"nothing written ({out} is written for a whole pass only). Run it again to score them all.",
              file=sys.stderr)
        return exit_code(signal.SIGINT)
    figures = {"eval/checkpoint": str(trained.checkpoint), "eval/step": trained.step, "eval/data": data,
               "eval/mode": mode, **scored}
    written = ev.write_eval(figures, out)
    print(format_eval(figures, f"runner eval: {run_dir}"))
    print("written: " + ", ".join(map(str, written)))
    return 0


def _generate_flags_error(args: Any, overrides: list[str]) -> str | None:
    """Why eval's flags do not go together, or None: --generate's own flags without it, values out of range."""
    given = [flag for flag, value in (("--regex", args.regex), ("--limit", args.limit),
                                      ("--max-new-tokens", args.max_new_tokens != 128)) if value]
    if given and not args.generate:
        return (f"{' and '.join(given)} go with --generate (they set how answers are written and scored); add "
                f"--generate, or drop {given[0]}. Usage: {_USAGE['eval']}")
    if args.data is not None and any(o.lstrip("+").startswith("data.val_path=") for o in overrides):
        return "--data FILE and data.val_path=... name the same thing: give one of them."
    if args.max_new_tokens < 1 or (args.limit is not None and args.limit < 1):
        flag, value = ("--limit", args.limit) if args.max_new_tokens >= 1 else ("--max-new-tokens", args.max_new_tokens)
        return f"{flag} {value}: give a number, at least 1."
    if args.regex is not None:
        import re

        try:
            re.compile(args.regex)
        except re.error as e:
            return (f"--regex {args.regex!r} is not a regular expression ({e}); give one in Python's re syntax, e.g. "
                    "'answer: (\\w+)'.")
    return None


def answers_error(cfg: Any, run_dir: Path) -> str | None:
    """Why ``runner eval --generate`` cannot score ``cfg``'s run by its answers, or None."""
    from runner.config.schema.data import InstructDataSchema

    if isinstance(cfg.data, InstructDataSchema):
        return None
    what = type(cfg.data).__name__.removesuffix("Schema").removesuffix("Data").lower() or "its"
    return (f"{run_dir} trained on {what} data: --generate answers held-out instructions and scores them against the "
            "data's answers, so it needs a run on instruction data (data=instruct, a prompt and a response per row, "
            "or a chat). Without --generate, runner eval scores the run's validation loss.")


def _answer(args: Any, trained: Any, datamodule: Any, overrides: list[str]) -> int:
    """``runner eval --generate``: the held-out prompts answered and scored; eval.json and the answers beside it."""
    import re

    from runner.after.answers import answer_questions, questions
    from runner.after.evaluate import write_eval
    from runner.after.family import tokens_of
    from runner.models.decode import Sampling

    tokens = tokens_of(trained.cfg)
    assert tokens is not None, "instruction data reads text"
    dataset = datamodule.val_dataloader().dataset
    examples = getattr(dataset, "examples", dataset)  # a packed split keeps its examples whole beneath the packs
    eos = datamodule.prompt_format.get("eos_id")
    asked, skipped = questions(examples, tokens, eos, args.limit)
    if not asked:
        raise ConfigError(f"no held-out example of {args.data or args.run_dir} has an answer to score (each prompt "
                          f"fills data.seq_len={trained.cfg.data.seq_len}): raise data.seq_len, or give shorter "
                          "prompts.")
    sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=0, eos_ids=() if eos is None else (int(eos),))
    compiles = trained.cfg.compile.scope.row.compiles
    figures, rows = answer_questions(trained.model, tokens, asked, sampling,
                                     re.compile(args.regex) if args.regex else None,
                                     trained.cfg.compile.backend if compiles else None)
    kind = datamodule.prompt_format.get("kind")
    data = "the validation split of " + (str(args.data) if args.data else " ".join(overrides) or "the run's data")
    figures = {"eval/checkpoint": str(trained.checkpoint), "eval/step": trained.step, "eval/data": data,
               "eval/answers/template": f"the run's {kind} prompt format (prompt.json)",
               "eval/answers/no_answer": skipped, **figures}
    out = args.out or args.run_dir / "eval.json"
    written = write_eval(figures, out)
    answers = out.with_name(f"{out.stem}_answers.jsonl")
    atomic_write_bytes("".join(json.dumps(r) + "\n" for r in rows).encode(), answers, one_writer=False)
    print(format_eval(figures, f"runner eval --generate: {args.run_dir}"))
    print("written: " + ", ".join(map(str, [*written, answers])))
    return 0


def format_eval(figures: dict[str, Any], title: str) -> str:
    """The figures as text tables: the scalars, then a classifier's per-class precision and recall."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from runner.metrics import metric

    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        if not isinstance(value, list):
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
            table.add_row(Text(metric(key).label or key), Text(shown))
    tables = [table]
    if "eval/precision" in figures:
        per_class = Table(title="per class")
        for name in ("class", "precision", "recall", "examples"):
            per_class.add_column(name, justify="left" if name == "class" else "right")
        columns = ("eval/labels", "eval/precision", "eval/recall", "eval/support")
        for row in zip(*(figures[key] for key in columns), strict=True):
            per_class.add_row(Text(row[0]), Text(f"{row[1]:.4f}"), Text(f"{row[2]:.4f}"), Text(str(row[3])))
        tables.append(per_class)
    console = Console(width=110, record=True, force_terminal=False, color_system=None)
    with console.capture() as capture:
        for t in tables:
            console.print(t)
    return capture.get()


def generate(args: Any) -> int:
    from runner.after.export import METADATA
    from runner.after.family import tokens_of
    from runner.after.generate import Sampling, generation_error, open_export, write_texts
    from runner.after.prompting import asked, prompt_of
    from runner.after.source import open_trained, run_dir_error

    sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                        top_p=args.top_p, seed=args.seed)
    refuse(sampling.error())
    texts = _prompts(args)
    backend = "inductor"  # an export's: a run compiles with its own compile.backend
    if (args.run_dir / METADATA).is_file():  # an export directory
        model, tokens = open_export(args.run_dir)
    else:
        refuse(run_dir_error(args.run_dir))
        trained = open_trained(args.run_dir, args.ckpt)
        refuse(generation_error(trained.model, f"{args.run_dir}"))
        model, found, backend = trained.model, tokens_of(trained.cfg), trained.cfg.compile.backend
        assert found is not None, "a causal LM reads text"
        tokens = found
    info = prompt_of(args.run_dir)
    asks = [asked(info, text, tokens, sampling) for text in texts]  # as the run trained: its template, its EOS
    answers, out = write_texts(model, tokens, [a.prompt for a in asks], asks[0].sampling, asks[0].special,
                               backend=backend if args.compile else None)
    for ask, answer in zip(asks, answers, strict=True):
        print(ask.prompt + answer + ("\n" if len(asks) > 1 else ""))
    compiled = f"; compiled {', '.join(out.compiled)}" if out.compiled else ""
    print(f"{sum(map(len, out.tokens))} tokens for {len(asks)} prompt(s) in {out.seconds:.2f} s "
          f"({out.tokens_per_s:.1f} tokens/s), the first after {out.first_token_s:.3f} s{compiled}", file=sys.stderr)
    return 0


def _prompts(args: Any) -> list[str]:
    """``--prompt``, or each line of ``--prompts-file``; one paragraph naming the fix when neither holds a prompt."""
    if args.prompts_file is None:
        return ["\n" if args.prompt is None else args.prompt]
    if args.prompt is not None:
        raise ConfigError("--prompt and --prompts-file: give one of them (a file's lines are its prompts).")
    try:
        lines = [line for line in args.prompts_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--prompts-file {args.prompts_file}: {e}. Give a UTF-8 text file, one prompt a line.") from e
    if not lines:
        raise ConfigError(f"--prompts-file {args.prompts_file} holds no prompt: write one prompt a line.")
    return lines
