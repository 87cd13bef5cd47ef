"""runner's data modules, local data only (no network at run time):

- ``text``: text for causal LMs, as UTF-8 bytes or a saved tokenizer's ids (``tokenizers``, ``encoding``), in packed
  windows (``windows``) or one sequence per document (``documents``), from the Python stdlib source or ``data.path``;
- ``classification``: labelled text for sequence classifiers (``labelled``, ``labels``), padded per batch (``padding``);
- ``images``: an ``ImageFolder``-layout folder or synthetic images, for image classifiers;
- ``synthetic``: Gaussian vectors labelled by a random teacher, for the MLP.

``data.path`` (text files, JSON lines, CSV, Parquet, ``save_to_disk`` folders: ``sources``, ``corpus``) is read
through Hugging Face ``datasets`` into Arrow (``tables``) and tokenized once, on every core, into a store of flat
token arrays named by the data's content and read through memory maps (``store``, ``encoding``; instruction data:
``instruct_prepare``, ``instruct_layout``). Shared by every module: which
part validates, never overlapping training (``splits``), what its batches are (``traits``, ``batch``), what a run
read (``summary``, the ``data/*`` figures), and training loaders that resume mid-epoch at the batch they stopped at
(``resumable``, which a run applies to any data module)."""
