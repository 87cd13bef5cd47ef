"""The model summary printed when a run starts, without a FLOPs column that says 0."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import RichModelSummary
from lightning.pytorch.utilities.model_summary import get_formatted_model_size, get_human_readable_count

_RIGHT = {"Params", "Params per Device", "FLOPs", "In sizes", "Out sizes"}


class RunModelSummary(RichModelSummary):
    """Lightning's rich model summary; the FLOPs column and total only when they were counted."""

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        if total_flops:
            RichModelSummary.summarize(summary_data, total_parameters, trainable_parameters, model_size,
                                       total_training_modes, total_flops, **summarize_kwargs)
            return
        from rich import get_console
        from rich.table import Table

        columns = [(name, values) for name, values in summary_data if name != "FLOPs"]
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for name, _ in columns:
            table.add_column(name, justify="right" if name in _RIGHT else "left", no_wrap=name == "Name",
                             style="dim" if name == " " else None)
        for row in zip(*(values for _, values in columns), strict=True):
            table.add_row(*row)
        totals = Table.grid(expand=True)
        totals.add_column()
        for label, value in (
            ("Trainable params", get_human_readable_count(int(trainable_parameters))),
            ("Non-trainable params", get_human_readable_count(int(total_parameters - trainable_parameters))),
            ("Total params", get_human_readable_count(int(total_parameters))),
            ("Total estimated model params size (MB)", get_formatted_model_size(model_size)),
            ("Modules in train mode", str(total_training_modes["train"])),
            ("Modules in eval mode", str(total_training_modes["eval"])),
        ):
            totals.add_row(f"[bold]{label}[/]: {value}")
        console = get_console()
        console.print(table)
        console.print(totals)
