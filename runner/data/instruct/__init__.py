"""Instruction and chat data for a causal LM, the loss on the answers (``data=instruct``, docs/data.md)."""

from runner.data.instruct.datamodule import InstructDataModule as InstructDataModule
