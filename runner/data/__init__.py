"""runner's data modules, local data only (no network at run time). Each data kind is a package whose ``__init__``
exports its data module (the ``_target_`` its ``conf/data`` option names); the parts they share are packages below
them, and the modules every data module uses are at the top:

- ``text``: text for causal LMs (``TextDataModule``, ``TokenizedTextDataModule``), in packed windows or one sequence
  per document, from the Python stdlib source or ``data.path``;
- ``classification``: labelled text for sequence classifiers (``TextClassificationDataModule``);
- ``instruct``: instruction and chat data, the loss on the answers (``InstructDataModule``);
- ``preference``: preference pairs for DPO, SimPO and ORPO (``PreferenceDataModule``), read as instruction data is;
- ``images``: an ``ImageFolder``-layout folder or synthetic images, for image classifiers;
- ``synthetic``: Gaussian vectors labelled by a random teacher, for the MLP.

What they are built from: ``reading`` (what ``data.path`` names: files, folders, globs; text files and tables read
through Hugging Face ``datasets`` into Arrow), ``tokens`` (text as ids: bytes or a saved tokenizer, tokenized once on
every core), ``store`` (flat token arrays named by the data's content, prepared once, read through memory maps) and
``sequences`` (ids as training sequences: windows, packed rows, padded batches). Shared by every data module: which
part validates, never overlapping training (``splits``), what its batches are (``traits``, ``batch``), what a run
read (``summary``, the ``data/*`` figures; ``fingerprint``, what a resume compares), and training loaders that resume
mid-epoch at the batch they stopped at (``resumable``, which a run applies to any data module).

Layers (import-linter, pyproject.toml): ``preference -> instruct | text | classification | images | synthetic |
fingerprint | resumable -> tokens -> reading -> store | sequences | summary | splits | traits | batch``."""
