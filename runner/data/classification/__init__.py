"""Labelled text for sequence classifiers (``data=text_classification``)."""

from runner.data.classification.datamodule import TextClassificationDataModule as TextClassificationDataModule
