"""The agentless arm's command-line options, shared by `snaffle solve` and `snaffle swebench run`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from snaffle.exceptions import UserError

if TYPE_CHECKING:  # the pipeline loads on first use, so --help starts fast
    from snaffle.agentless.pipeline import PipelineConfig


def add_pipeline_args(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("agentless arm")
    group.add_argument("--samples", type=int, default=3, help="repair samples: 1 greedy + N-1 at --sample-temperature")
    group.add_argument("--sample-temperature", type=float, default=0.8)
    group.add_argument("--top-k", type=int, default=3, help="localized entities shown to the model")
    group.add_argument("--concurrency", type=int, default=1, help="samples run at once")
    mode = group.add_mutually_exclusive_group()
    mode.add_argument("--one-shot", action="store_true", default=None,
                      help="no tools: one call per sample, edit extracted (default for models measured to do better "
                      "so: see data/edit_formats.toml)")  # fmt: skip
    mode.add_argument(
        "--loop", dest="one_shot", action="store_false", default=None, help="a capped tool loop per sample"
    )
    group.add_argument(
        "--edit-format",
        choices=("rewrite", "search_replace", "auto"),
        default=None,
        help="one-shot answer form; default: the model's measured entry in data/edit_formats.toml",
    )
    group.add_argument("--repair-turns", type=int, default=8, help="model calls per sample")
    group.add_argument("--no-reproduce", action="store_true", help="don't ask for a reproduction test")


def pipeline_config(args: argparse.Namespace) -> PipelineConfig:
    from snaffle.agentless.pipeline import PipelineConfig

    if args.samples < 1 or args.top_k < 1 or args.concurrency < 1 or args.repair_turns < 1:
        raise UserError("--samples, --top-k, --concurrency and --repair-turns must be at least 1")
    return PipelineConfig(samples=args.samples, temperature=args.sample_temperature, top_k=args.top_k,
                          concurrency=args.concurrency, one_shot=args.one_shot, edit_format=args.edit_format,
                          repair_turns=args.repair_turns, reproduce=not args.no_reproduce)  # fmt: skip
