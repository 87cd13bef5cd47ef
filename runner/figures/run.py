"""What the run was and where it ended: ``run/*`` (the run itself), ``train/*`` and ``val/*`` (the losses
it logged, under the names the LightningModule logs them). What it read, ``data/*``: :mod:`runner.figures.data`.

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

RUN_NAME = define("run/name", "the run's name (the config's `name`)")
RUN_RECIPE = define("run/recipe", "the recipe the run was composed from (the config's `recipe`)")
RUN_STEPS = define("run/steps", "optimizer steps trained (a resumed run counts from the first run's start)",
                   label="steps")
RUN_RESUMED_AT_STEP = define("run/resumed_at_step", "the step a resumed run went on from (its checkpoint's); the "
                             "report covers the whole run: steps and compile time count both parts, val/* is the "
                             "resumed part's; absent when the run started at step 0", label="resumed at step")
RUN_WALL_S = define("run/wall_s", "seconds in trainer.fit in this process (a resumed run: since the resume): "
                    "training, validation, compiles", label="wall time [s]")
RUN_PARAMS = define("run/params", "parameters of the module trained")
RUN_DEVICE = define("run/device", "the device the strategy trained on (its root device)")
RUN_PRECISION = define("run/precision", "the precision the run trained in (trainer.precision)")
RUN_TORCH = define("run/torch", "torch's version")
RUN_LAST_CHECKPOINT = define("run/last_checkpoint", "the run's last checkpoint (null: none was written)")
RUN_INTERRUPTED_BY = define("run/interrupted_by",
                            "the signal that stopped the run (SIGINT, SIGTERM); absent when none did")
RUN_INTERRUPTED_AT_STEP = define("run/interrupted_at_step",
                                 "the step at which that signal stopped the run and its checkpoint was written")
RUN_SIGNAL_AFTER_END = define("run/signal_after_end",
                              "a signal (SIGINT, SIGTERM) that arrived after the last training step, too late to stop "
                              "anything: the run had finished and ended as it would have; absent when none did")
RUN_LR_SCHEDULE = define("run/lr_schedule",
                          "what a resume that asked for another trainer.max_steps did to the learning-rate schedule "
                          "(scheduler.on_resume: keep or stretch); absent when none did", label="LR schedule at resume")
RUN_HUB = define("run/hub", "each Hugging Face Hub name the run read: the setting, the name, model or dataset, the "
                 "revision asked, the commit it resolved to, its files and bytes, the setting's value pinned to "
                 "that commit (and a data set's config and split); absent when every path was local",
                 label="Hub sources")
RUN_EXPORT = define("run/export", "the directory the trained model was exported to at the end of the fit "
                    "(<run_dir>/model), or why it was not", label="model export")
RUN_PUSHED_TO = define("run/pushed_to", "where after.push_to_hub pushed the export at the end of the run: the Hugging "
                       "Face Hub repo and the commit of the push, or why it failed and the command that pushes it "
                       "again; absent when after.push_to_hub is unset", label="pushed to the Hub")
RUN_SAMPLE = define("run/sample", "text the trained causal LM wrote at the end of the fit (after.sample_tokens)")
TRAIN_LOSS = define("train/loss", "the last logged training loss", label="train loss")
VAL_LOSS = define("val/loss", "loss over the validation batches at the last validation", label="val loss")
VAL_BPB = define("val/bpb", "the validation loss in bits per byte of text (byte-level text only)",
                 label="val bits per byte")
VAL_ACCURACY = define("val/accuracy", "share of the validation targets predicted (classification data only)",
                      label="val accuracy")
