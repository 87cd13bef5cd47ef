"""Preference pairs for a causal LM (``data=preference``, ``objective=dpo|simpo|orpo``; docs/preference.md), read as
instruction data is."""

from runner.data.preference.datamodule import PreferenceDataModule as PreferenceDataModule
