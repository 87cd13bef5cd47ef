"""Text for causal language models (``data=text``, ``data=text_documents``, ``data=tokenized_text``)."""

from runner.data.text.datamodule import TextDataModule as TextDataModule
from runner.data.text.datamodule import TokenizedTextDataModule as TokenizedTextDataModule
