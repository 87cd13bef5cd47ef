"""The data schemas: one base for what every data module takes, every default the data module's own, and what
each family's batches are declared by the data module (its validation metric, padding, varying shapes)."""

from __future__ import annotations

import dataclasses
import inspect
from enum import Enum
from typing import Any

import pytest
from omegaconf import OmegaConf

from runner import hydra_internals
from runner.build import data_traits
from runner.config.schema.data import DataSchema
from runner.config.schema.targets import target_schemas
from runner.data.traits import DataTraits, ValMetric

SCHEMAS = target_schemas()["data"]


def _default(f: dataclasses.Field[Any]) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default  # type: ignore[misc]


@pytest.mark.parametrize("option", sorted(SCHEMAS))
def test_every_data_schema_default_is_its_data_modules(option: str) -> None:
    """A schema default that differs from the constructor's would make ``python -m runner`` and a data module built
    in Python read different data; an interpolated default (the model's tokenizer) is compared resolved, as it
    is without a model.path."""
    schema = SCHEMAS[option]
    assert issubclass(schema, DataSchema)
    params = inspect.signature(hydra_internals.locate(schema._target_)).parameters
    resolved = OmegaConf.to_container(OmegaConf.create({"model": {"path": None}, "data": OmegaConf.structured(schema)}),
                                      resolve=True)["data"]  # type: ignore[index]
    for f in dataclasses.fields(schema):
        if f.name == "_target_" or f.name in DataSchema.NOT_ARGUMENTS:
            continue
        assert f.name in params, f"{option}: data.{f.name} is no argument of {schema._target_}"
        default, expected = _default(f), params[f.name].default
        if isinstance(default, str) and default.startswith("${"):
            default = resolved[f.name]
        if isinstance(default, Enum):
            default = default.value
            expected = expected.value if isinstance(expected, Enum) else expected
        if isinstance(expected, tuple):
            expected = list(expected)
        assert default == expected, f"{option}: data.{f.name} defaults to {default!r}, its constructor to {expected!r}"


def test_what_every_data_module_takes_is_declared_once() -> None:
    shared = {f.name for f in dataclasses.fields(DataSchema)}
    assert shared == {"_target_", "batch_size", "val_fraction", "seed", "num_workers", *DataSchema.NOT_ARGUMENTS}
    for schema in SCHEMAS.values():
        own = set(vars(schema).get("__annotations__", {}))
        assert not own & shared - {"_target_", "batch_size", "val_fraction"}, schema  # only a different default


@pytest.mark.parametrize(("option", "fields", "traits"), [
    ("text", {"tokenizer": None}, DataTraits(ValMetric.bits_per_byte, pads_per_batch=False, shapes_vary=False)),
    ("text", {"tokenizer": "bytes", "batching": "documents"},
     DataTraits(ValMetric.bits_per_byte, pads_per_batch=True, shapes_vary=True)),
    ("text", {"tokenizer": "/a/tokenizer"}, DataTraits(ValMetric.none, pads_per_batch=False, shapes_vary=False)),
    ("text", {"tokenizer": "bytes", "batching": "documents", "packing": True},
     DataTraits(ValMetric.bits_per_byte, pads_per_batch=False, shapes_vary=False)),  # packed rows: one shape
    ("instruct", {"tokenizer": None}, DataTraits(ValMetric.bits_per_byte, pads_per_batch=True, shapes_vary=True)),
    ("instruct", {"tokenizer": None, "packing": True}, DataTraits(ValMetric.bits_per_byte, False, False)),
    ("tokenized_text", {"tokenizer": "/a/tokenizer"}, DataTraits(ValMetric.none, False, False)),
    ("text_classification", {}, DataTraits(ValMetric.accuracy, pads_per_batch=True, shapes_vary=True)),
    ("images", {}, DataTraits(ValMetric.accuracy, pads_per_batch=False, shapes_vary=False)),
    ("synthetic", {}, DataTraits(ValMetric.accuracy, pads_per_batch=False, shapes_vary=False)),
])
def test_each_data_module_declares_what_its_batches_are(option: str, fields: dict[str, Any],
                                                        traits: DataTraits) -> None:
    class Config:  # what data_traits reads: the data node (as loaded: interpolations resolved)
        data = dataclasses.replace(SCHEMAS[option](), **fields)

    assert data_traits(Config) == traits  # type: ignore[arg-type]


def test_a_data_module_that_declares_nothing_may_vary_and_reports_no_metric() -> None:
    class Config:
        data = {"_target_": "lightning.LightningDataModule"}

    assert data_traits(Config) == DataTraits(ValMetric.none, pads_per_batch=False, shapes_vary=True)  # type: ignore[arg-type]
