"""What the run read: ``data/*``. The files and rows or documents a data module read, the ids they became, how
they were split, and what was cut or left out (``runner.data.summary.DataSummary`` reports them).

Each constant is its figure's key, a plain ``str``, defined once with what it means
(:func:`runner.figures.registry.define`).
"""

from __future__ import annotations

from runner.figures.registry import define

DATA_SOURCE = define("data/source", "what data.path named: its file, its files (how many, of which format), or "
                     "the Python stdlib source", label="source")
DATA_FILES = define("data/files", "files read (after data.max_bytes)", label="files")
DATA_ROWS = define("data/rows", "rows (tables) or documents (text files) read, validation's included",
                   label="rows / documents")
DATA_TOKENS = define("data/tokens", "token ids those rows became (bytes of byte-level text), validation's included",
                     label="tokens")
DATA_TRAIN_SEQUENCES = define("data/train_sequences", "training sequences: packed windows, document chunks or rows",
                              label="train sequences")
DATA_VAL_SEQUENCES = define("data/val_sequences", "validation sequences, none of them in training",
                            label="val sequences")
DATA_SPLIT = define("data/split", "how validation was chosen: data.val_path, a seeded split by document or row, "
                    "or the last windows of a single document", label="validation")
DATA_TRUNCATED_ROWS = define("data/truncated_rows", "rows longer than data.seq_len tokens, cut there (a warning "
                             "when more than 10%)", label="rows cut at seq_len")
DATA_TRUNCATED_PCT = define("data/truncated_pct", "those rows as a share of the rows used",
                            label="  share cut [%]")
DATA_DROPPED_ROWS = define("data/dropped_rows", "rows or files a cap or filter left out (data.max_bytes, "
                           "data.max_examples, data.min_len, a null text)", label="left out")
DATA_DROPPED_BY = define("data/dropped_by", "what left them out, each setting with its count",
                         label="  by")
DATA_NULL_ROWS = define("data/null_rows", "rows whose text is null (missing), left out: no empty document, no "
                        "row blamed on data.min_len (counted in left out too)", label="  null texts")
DATA_LABEL_COUNTS = define("data/label_counts", "rows per label, by class id (training and validation)",
                           label="label counts")
DATA_UNIGRAM_BPB = define("data/unigram_bpb",
                          "the data's byte entropy: what a model that learned only byte frequencies scores",
                          label="  unigram entropy [bits/byte]")
DATA_CHANGED = define("data/changed", "what changed in the data since the checkpoint this run resumed from (a "
                     "resume refuses it unless after.allow_changed_data=true, or --allow-changed-data)",
                     label="changed since the checkpoint")
DATA_FORMAT = define("data/format", "instruction or preference data: its shape (prompt/response, Alpaca, chat; "
                     "preference pairs or conversations) and columns", label="format")
DATA_EXAMPLES = define("data/examples", "instruction examples used, training and validation (after those left "
                       "out)", label="examples")
DATA_PROMPT_TOKENS = define("data/prompt_tokens", "tokens of those examples outside the answers: prompts, "
                            "templates, a chat's other turns (preference pairs: each pair's prompt once)",
                            label="  prompt tokens")
DATA_ANSWER_TOKENS = define("data/answer_tokens", "tokens of the answers, the EOS after each included",
                            label="  answer tokens")
DATA_LOSS_TOKENS = define("data/loss_tokens", "targets in the loss per epoch: the answers' (data.train_on=answer) "
                          "or every position (all)", label="  tokens in the loss")
DATA_CUT_PART = define("data/cut_part", "what cutting an example at data.seq_len lost", label="  part cut")
DATA_ROLES = define("data/roles", "chat: the turns of each role as written, and the role data.roles or ShareGPT's "
                    "names made of it (human -> user)", label="turns by role")
DATA_TURNS_TRAINED = define("data/turns_trained", "chat: assistant turns with ids in the loss (one data.seq_len cuts "
                            "counts while any of it is left)", label="  assistant turns trained on")
DATA_TURNS_CUT = define("data/turns_cut", "chat: assistant turns not trained on: data.seq_len cut them off whole, or "
                        "left their row out", label="  assistant turns cut off")
DATA_TURNS_PROMPT = define("data/turns_prompt", "chat: turns of the other roles (system, user, a role data.roles "
                           "keeps as it is): prompt, out of the loss unless data.train_on=all",
                           label="  other turns (prompt)")
DATA_PACKS = define("data/packs", "data.packing: training rows of exactly data.seq_len tokens (preference pairs: 2 x "
                    "data.seq_len) the examples were packed into (best fit)", label="packed rows")
DATA_EXAMPLES_PER_PACK = define("data/examples_per_pack", "examples (preference: pairs) per packed row, on average",
                                label="  examples per row")
DATA_PACKING_PADDING_PCT = define("data/packing_padding_pct", "the share of the packed rows' positions that is "
                                  "padding", label="  padding [%]")
DATA_BATCH_SHAPE = define("data/batch_shape", "data.packing: the one shape of every batch, [data.batch_size, "
                          "data.seq_len] (preference pairs: 2 x data.seq_len): the step compiles once, whatever the "
                          "shape policy", label="batch shape")
DATA_PAIRS = define("data/pairs", "preference pairs used, training and validation (after those left out)",
                    label="pairs")
DATA_COMPLETION_TOKENS = define("data/completion_tokens", "tokens of the chosen and rejected completions in the "
                                "loss, the EOS after each included", label="  completion tokens")
