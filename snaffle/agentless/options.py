"""Command-line options shared by `snaffle solve` and `snaffle swebench run`: the caps and the agentless arm's.

Their defaults are the data's (snaffle/data/limits.toml, snaffle/data/agentless.toml), so `--help` shows what runs.
"""

from __future__ import annotations

import argparse

from snaffle import data
from snaffle.agentless.config import (
    EVIDENCE_SWITCHES,
    EXECUTION_SWITCHES,
    LINE_SWITCHES,
    MAX_LINE_PASSES,
    ONE_ENTITY_SCOPES,
    PROMPT_SWITCHES,
    SAMPLING_SWITCHES,
    ZERO_TOKEN_SWITCHES,
    PipelineConfig,
)
from snaffle.exceptions import UserError
from snaffle.primitives.extract import EDIT_FORMAT_CHOICES
from snaffle.types import Limits


def add_cap_args(p: argparse.ArgumentParser, unit: str = "") -> None:
    """--max-turns, --max-tokens, --max-dollars, --timeout; `unit` says what they are counted per."""
    caps = data.load_record(Limits, "limits.toml", "run")
    off = "0 = no cap; default %(default)s"
    p.add_argument("--max-turns", type=int, default=caps.max_turns, help=f"model calls{unit} ({off})")
    p.add_argument("--max-tokens", type=int, default=caps.max_tokens, help=f"prompt + completion tokens{unit} ({off})")
    p.add_argument("--max-dollars", type=float, default=caps.max_dollars, help=f"dollars{unit} ({off})")
    p.add_argument("--timeout", type=float, default=caps.timeout_s, help=f"wall-clock seconds{unit} ({off})")


def add_pipeline_args(p: argparse.ArgumentParser) -> None:
    defaults = PipelineConfig()
    group = p.add_argument_group("agentless arm")
    samples = "repair samples: 1 greedy + N-1 at --sample-temperature (default %(default)s)"
    group.add_argument("--samples", type=int, default=defaults.samples, help=samples)
    temperature = "temperature of every sample but the first (default %(default)s)"
    group.add_argument("--sample-temperature", type=float, default=defaults.temperature, help=temperature)
    top_k = "localized entities shown to the model (default %(default)s)"
    group.add_argument("--top-k", type=int, default=defaults.top_k, help=top_k)
    concurrency = (
        "samples run at once; 0: as many as the endpoint has slots (llama-server), else 1 (default %(default)s)"
    )
    group.add_argument("--concurrency", type=int, default=defaults.concurrency, help=concurrency)
    mode = group.add_mutually_exclusive_group()
    mode.add_argument(
        "--one-shot",
        action="store_true",
        default=None,
        help="no tools: one call per sample, edit extracted (default for models measured to do better "
        "so: see data/edit_formats.toml)",
    )
    mode.add_argument(
        "--loop", dest="one_shot", action="store_false", default=None, help="a capped tool loop per sample"
    )
    group.add_argument(
        "--edit-format",
        choices=EDIT_FORMAT_CHOICES,
        default=None,
        help="one-shot answer form; default: the model's measured entry in data/edit_formats.toml",
    )
    turns = "model calls per sample (default %(default)s)"
    group.add_argument("--repair-turns", type=int, default=defaults.repair_turns, help=turns)
    reproduce = "don't ask for a reproduction test"
    group.add_argument(
        "--no-reproduce", dest="reproduce", action="store_false", default=defaults.reproduce, help=reproduce
    )
    for name in SWITCHES:
        flag, default = "--" + name.replace("_", "-"), getattr(defaults, name)
        help_text = f"{SWITCH_HELP[name]} (default: {'on' if default else 'off'}; data/agentless.toml)"
        group.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_text)
    scope = "with --one-entity, which samples target one candidate: every one, the greedy one, the ones after it "
    group.add_argument(
        "--one-entity-scope",
        choices=ONE_ENTITY_SCOPES,
        default=defaults.one_entity_scope,
        help=scope + "(default %(default)s)",
    )
    ceiling = "the most samples --extra-samples draws (default %(default)s)"
    group.add_argument("--max-samples", type=int, default=defaults.max_samples, help=ceiling)
    entities = "with --line-repair: the first candidates whose statements are asked about (default %(default)s)"
    group.add_argument("--line-entities", type=int, default=defaults.line_entities, help=entities)
    failing = "related tests failing on the original are evidence up to this many (default %(default)s)"
    group.add_argument("--max-existing-failures", type=int, default=defaults.max_existing_failures, help=failing)
    survivors = "the seconds the validation of screened mutants and line corrections may take (default %(default)s)"
    group.add_argument(
        "--survivor-validation-s", type=float, default=defaults.survivor_validation_s, metavar="S", help=survivors
    )
    passes = "with --line-repair: 1, one greedy call per line; N, each line again at the sample temperature, up to "
    group.add_argument(
        "--line-passes",
        type=int,
        choices=range(1, MAX_LINE_PASSES + 1),
        metavar="N",
        default=defaults.line_passes,
        help=passes + f"N-1 times, while nothing is decisive (1 to {MAX_LINE_PASSES}; default %(default)s)",
    )


SWITCHES = (
    *EXECUTION_SWITCHES,
    *SAMPLING_SWITCHES,
    *PROMPT_SWITCHES,
    *ZERO_TOKEN_SWITCHES,
    *LINE_SWITCHES,
    *EVIDENCE_SWITCHES,
)
"""The [pipeline] switches a run may set: `--NAME` / `--no-NAME`, or `-c NAME=true`."""
SWITCH_HELP = {
    "feedback": "a one-shot sample whose patch fails the evidence is told the failure and asked again",
    "feedback_partial": "feedback rounds only for a partial fix: one stated expectation now holds, another fails",
    "feedback_unapplied": "feedback rounds only for an answer that was not applied (unchanged code, a refused edit)",
    "one_entity": "sample i rewrites candidate i; the other candidates are shown as signatures only",
    "stop_after_block": "generation stops after the answer's first complete code block",
    "bound_max_tokens": "max_tokens from the size of the definition to rewrite",
    "evidence_veto": "a patch leaving reproduced evidence failing is dropped, not kept as a best guess",
    "early_stop": "draw no more samples once the selected one is validated",
    "extra_samples": "while no sample is validated and evidence could tell, draw up to --max-samples",
    "docstrings_apart": "one-shot rewrites see each candidate's docstring above its code, not in it",
    "mutation": "one-point mutants of the localized code are screened against the issue's evidence first (no tokens)",
    "handler_least_change": "with --mutation: of validated changes to one except clause, the least is kept",
    "mutation_compose": "with --mutation: a mutant that is part of a fix gets a second point, screened by the tests",
    "line_repair": "each line the evidence ran of the first candidate is called wrong; its corrections are screened",
    "line_insert": "with --line-repair: a last pass asks of each line whether one is missing right after it",
    "line_origin_first": "with --line-repair: the located function a wrong value came from is asked about first",
    "line_nested": "with --line-repair: the lines of a function nested in the asked one are asked about too",
    "line_header_only": "with --line-repair: an answer about an if/for/except header replaces the header only",
    "line_untested": "with --line-repair: a repository with no related test file is screened by the issue alone",
    "doctest_fallback": "where no related test file exists, the located files' docstring examples are the tests",
    "doctest_always": "the located files' docstring examples join the related tests, test files or not",
    "failing_by_function": "related tests failing on the original are capped per test function, not per case",
    "unguarded_submitted": "a shown fix is only submitted when its file's own test module could not be collected",
}


def pipeline_config(args: argparse.Namespace) -> PipelineConfig:
    if args.samples < 1 or args.top_k < 1 or args.repair_turns < 1:
        raise UserError("--samples, --top-k and --repair-turns must be at least 1")
    if args.concurrency < 0:
        raise UserError("--concurrency must be 0 (the endpoint's slots) or more")
    if args.max_samples < 1:
        raise UserError("--max-samples must be at least 1")
    if args.line_entities < 1:
        raise UserError("--line-entities must be at least 1")
    return PipelineConfig(
        samples=args.samples,
        temperature=args.sample_temperature,
        top_k=args.top_k,
        concurrency=args.concurrency,
        one_shot=args.one_shot,
        edit_format=args.edit_format,
        repair_turns=args.repair_turns,
        reproduce=args.reproduce,
        max_samples=args.max_samples,
        line_passes=args.line_passes,
        line_entities=args.line_entities,
        max_existing_failures=args.max_existing_failures,
        survivor_validation_s=args.survivor_validation_s,
        one_entity_scope=args.one_entity_scope,
        **{name: getattr(args, name) for name in SWITCHES},
    )
