"""What ``runner eval`` measured: ``eval/*``, written to ``eval.json`` (docs/after-training.md).

A language model's figures are over every target position of the data evaluated (the run's ``val/loss`` is a
mean of per-batch means); a classifier's over every example, from torchmetrics.
"""

from __future__ import annotations

from runner.figures.registry import define

EVAL_CHECKPOINT = define("eval/checkpoint", "the checkpoint evaluated", label="checkpoint")
EVAL_STEP = define("eval/step", "the training step it was saved at", label="step")
EVAL_DATA = define("eval/data", "the data evaluated: the run's validation split, or the overrides given",
                   label="data")
EVAL_MODE = define("eval/mode", "eager or compiled, and why", label="mode")
EVAL_EXAMPLES = define("eval/examples", "sequences or examples evaluated", label="examples")
EVAL_TOKENS = define("eval/tokens", "target positions scored (language models)", label="tokens")
EVAL_LOSS = define("eval/loss", "mean cross-entropy over every target, in nats", label="loss")
EVAL_PERPLEXITY = define("eval/perplexity", "exp(loss): the perplexity per token (language models)",
                         label="perplexity")
EVAL_BPB = define("eval/bpb", "the loss in bits per byte (byte-level text only)", label="bits per byte")
EVAL_ACCURACY = define("eval/accuracy", "share of the examples classified right", label="accuracy")
EVAL_MACRO_F1 = define("eval/macro_f1", "F1 per class, averaged over the classes", label="macro-F1")
EVAL_LABELS = define("eval/labels", "the class names, by class id (labels.json, else the ids)")
EVAL_PRECISION = define("eval/precision", "precision per class, by class id")
EVAL_RECALL = define("eval/recall", "recall per class, by class id")
EVAL_SUPPORT = define("eval/support", "examples per class, by class id")
EVAL_CONFUSION = define("eval/confusion", "confusion matrix: rows the true class, columns the predicted one")
EVAL_PAIRS = define("eval/pairs", "preference pairs evaluated", label="pairs")
EVAL_REWARDS_ACCURACIES = define("eval/rewards/accuracies", "share of the pairs whose chosen reward is above the "
                                 "rejected one's: the preference accuracy (a tie counts as wrong, as in TRL)",
                                 label="rewards/accuracies")
EVAL_REWARDS_MARGINS = define("eval/rewards/margins", "mean of chosen minus rejected reward over the pairs",
                              label="rewards/margins")
EVAL_REWARDS_CHOSEN = define("eval/rewards/chosen", "mean reward of the chosen completions (val/rewards/chosen's "
                             "meaning)", label="rewards/chosen")
EVAL_REWARDS_REJECTED = define("eval/rewards/rejected", "mean reward of the rejected completions",
                               label="rewards/rejected")
EVAL_LOGPS_CHOSEN = define("eval/logps/chosen", "mean log-probability of the chosen completions (summed over their "
                           "tokens; SimPO, ORPO: per token)", label="logps/chosen")
EVAL_LOGPS_REJECTED = define("eval/logps/rejected", "the same for the rejected completions", label="logps/rejected")
