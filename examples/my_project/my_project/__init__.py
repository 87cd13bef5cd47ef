"""An example project trained with runner: its own model, config option and recipe."""
