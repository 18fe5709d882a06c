"""The agentless arm's configuration record, `PipelineConfig`; its defaults are snaffle/data/agentless.toml's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from snaffle import data
from snaffle.exceptions import UserError
from snaffle.primitives.extract import one_shot_for
from snaffle.types import Mechanisms

if TYPE_CHECKING:
    from snaffle.agentless.facts import SnippetLimits

DATA_FILE = "agentless.toml"
EXECUTION_SWITCHES = (
    "feedback",
    "feedback_partial",
    "feedback_unapplied",
    "one_entity",
    "stop_after_block",
    "bound_max_tokens",
    "evidence_veto",
)
"""Issue 16's repair and decode switches: each a [pipeline] key the A/B bench turns off (or on) to compare."""
PROMPT_SWITCHES = ("docstrings_apart",)
"""How candidates are shown (agentless/docstrings.py): [pipeline] keys the A/B bench turns on (`--on`)."""
SAMPLING_SWITCHES = ("early_stop", "extra_samples")
"""How many samples are drawn (agentless/sampling.py): [pipeline] keys the A/B bench turns on (`--on`)."""
ONE_ENTITY_SCOPES = ("all", "greedy", "temperature")
"""Which samples target one entity when `one_entity` is on: every one, the greedy one (0), the ones after it."""
MAX_LINE_PASSES = 4
"""The most passes over the lines `line_passes` may ask for (each pass is up to `[line_repair] max_lines` calls)."""
ZERO_TOKEN_SWITCHES = ("mutation", "handler_least_change", "mutation_compose")
"""Candidates made without the model (agentless/mutation.py): [pipeline] keys the A/B bench turns on (`--on`)."""
LINE_SWITCHES = (
    "line_repair",
    "line_insert",
    "line_origin_first",
    "line_nested",
    "line_header_only",
    "line_untested",
)
"""The harness names each line, the model corrects it (agentless/line_repair.py): [pipeline] keys for `--on`."""
EVIDENCE_SWITCHES = ("failing_by_function", "unguarded_submitted", "doctest_fallback", "doctest_always")
"""What counts as evidence (agentless/facts.py): [pipeline] keys the A/B bench turns on (`--on`)."""
FROM_DATA = (
    "samples",
    "temperature",
    "top_k",
    "concurrency",
    "repair_turns",
    "reproduce",
    "stop_after_green",
    *EXECUTION_SWITCHES,
    "feedback_rounds",
    "one_entity_scope",
    *SAMPLING_SWITCHES,
    "max_samples",
    *PROMPT_SWITCHES,
    *ZERO_TOKEN_SWITCHES,
    *LINE_SWITCHES,
    *EVIDENCE_SWITCHES,
    "line_passes",
    "line_entities",
    "max_existing_failures",
    "survivor_validation_s",
)
"""The fields whose defaults are the data file's [pipeline] table: each a required key there."""


def pipeline_table(tables: Mapping[str, Any]) -> Mapping[str, Any]:
    """The [pipeline] table of the data file's `tables`: each key of `FROM_DATA`, and no other, else a DataError."""
    where = f"snaffle/data/{DATA_FILE}"
    values = data.required(data.table(tables, "pipeline", where), FROM_DATA, f"{where} [pipeline]")
    return MappingProxyType(values)


@cache
def pipeline_defaults() -> Mapping[str, Any]:
    """The packaged defaults (read on first use, never at import)."""
    return pipeline_table(data.load(DATA_FILE))


@dataclass(frozen=True)
class Switches:
    """Which execution-grounded mechanisms run: snaffle/data/agentless.toml [mechanisms], every key required."""

    issue_facts: bool
    execution_localize: bool
    failing_existing: bool
    snippet_evidence: bool
    snippet_test: bool
    reproduce_facts: bool
    call_trace: bool
    call_expected: bool
    value_origin: bool


SWITCHES = tuple(f.name for f in fields(Switches))


@cache
def switch_defaults() -> Switches:
    """The packaged [mechanisms] switches (read on first use, never at import)."""
    return data.load_record(Switches, DATA_FILE, "mechanisms")


def _from_data(key: str) -> Any:
    """A field whose default is `key` of the data file, read when a config is made (never at import)."""
    assert key in FROM_DATA, key
    return field(default_factory=lambda: pipeline_defaults()[key])


OVERRIDABLE = ("feedback_rounds",)
"""[pipeline] keys a [[models]] row of the data file may set for the models it matches."""


@cache
def _model_rows() -> tuple[Mapping[str, Any], ...]:
    rows = data.load(DATA_FILE).get("models", [])
    where = f"snaffle/data/{DATA_FILE} [[models]]"
    for row in rows:
        unknown = sorted(set(row) - {"match", *OVERRIDABLE})
        if "match" not in row or unknown:
            raise data.DataError(f"{where}: each row needs `match` and may set only {', '.join(OVERRIDABLE)}")
    return tuple(rows)


def model_overrides(model: str) -> dict[str, Any]:
    """The first [[models]] row whose `match` is in the model's name (case-insensitive), without `match`."""
    row = next((r for r in _model_rows() if str(r["match"]).lower() in model.lower()), {})
    return {k: v for k, v in row.items() if k != "match"}


@dataclass(frozen=True)
class DecodeConfig:
    """How a repair answer is cut short: the stop sequences and the max_tokens bound from the target's size."""

    stop: tuple[str, ...]
    chars_per_token: float
    token_factor: float
    token_slack: int
    follow_up_factor: float
    """A feedback round's bound is this many times the first call's (sized from the target or the last answer)."""

    def max_tokens(self, target_chars: int) -> int:
        """Tokens enough to rewrite a definition of `target_chars` characters, grown by the factor, plus slack."""
        return token_bound(target_chars, self.chars_per_token, self.token_factor, self.token_slack)


def token_bound(chars: int, chars_per_token: float, factor: float, slack: int) -> int:
    """An answer's max_tokens: `chars` of code in tokens (`chars_per_token` underestimates code's, so the bound rarely
    cuts), grown by `factor`, plus `slack` for the fence and a short sentence."""
    return int(chars / chars_per_token * factor) + slack


@cache
def decode_config() -> DecodeConfig:
    """The [decode] table of the data file (read on first use)."""
    decode = data.load_record(DecodeConfig, DATA_FILE, "decode")
    return replace(decode, stop=tuple(decode.stop))  # a TOML array reads as a list


@dataclass(frozen=True)
class PipelineConfig:
    """Knobs of the agentless arm (defaults: snaffle/data/agentless.toml; see `snaffle solve --help`)."""

    samples: int = _from_data("samples")
    temperature: float = _from_data("temperature")
    top_k: int = _from_data("top_k")
    concurrency: int = _from_data("concurrency")
    one_shot: bool | None = None
    """One tool-less call per sample, or a capped tool loop; None: the model's entry in data/edit_formats.toml."""
    edit_format: str | None = None
    """rewrite, search_replace or auto; None: the model's entry in snaffle/data/edit_formats.toml."""
    repair_turns: int = _from_data("repair_turns")
    reproduce: bool = _from_data("reproduce")
    stop_after_green: bool = _from_data("stop_after_green")
    feedback: bool = _from_data("feedback")
    """A sample whose patch fails the evidence gets `feedback_rounds` follow-up calls (agentless/feedback.py)."""
    feedback_partial: bool = _from_data("feedback_partial")
    """Feedback rounds only for a partial fix: an expectation that failed on the original holds, another fails."""
    feedback_unapplied: bool = _from_data("feedback_unapplied")
    """Feedback rounds only for an answer that was not applied: it repeats the code unchanged or a gate refused it."""
    feedback_rounds: int = _from_data("feedback_rounds")
    one_entity: bool = _from_data("one_entity")
    """Sample i rewrites candidate i (mod k); the other candidates are shown as signatures only."""
    one_entity_scope: str = _from_data("one_entity_scope")
    """Which samples target one entity (`ONE_ENTITY_SCOPES`); the others see every candidate whole."""
    stop_after_block: bool = _from_data("stop_after_block")
    bound_max_tokens: bool = _from_data("bound_max_tokens")
    evidence_veto: bool = _from_data("evidence_veto")
    """A patch that leaves reproduced evidence failing ends `no_valid_patch`, never `submitted`."""
    early_stop: bool = _from_data("early_stop")
    """No sample is drawn after the selected candidate is `validated` (agentless/sampling.py)."""
    extra_samples: bool = _from_data("extra_samples")
    """While no candidate is validated and evidence could validate one, samples go on up to `max_samples`."""
    max_samples: int = _from_data("max_samples")
    docstrings_apart: bool = _from_data("docstrings_apart")
    """A rewrite's candidates show their docstrings above the code, not in it (agentless/docstrings.py)."""
    mutation: bool = _from_data("mutation")
    """One-point mutants of the localized code are screened against the issue's own evidence before any sample;
    one that validates ends the repair with no model call (agentless/mutation.py)."""
    handler_least_change: bool = _from_data("handler_least_change")
    """Of screened changes to one `except` clause that validate with evidence as good, the ones another keeps more
    of and adds less to are set aside (agentless/mutation.py `least_handler_change`), so they do not tie."""
    mutation_compose: bool = _from_data("mutation_compose")
    """With `mutation`: where the best survivor is part of a fix, a second point is changed on top of it and screened
    by the related tests failing on the original (agentless/pipeline.py `composed`)."""
    line_repair: bool = _from_data("line_repair")
    """Each statement the evidence ran of the first-ranked entity is called wrong in turn and the model corrects
    it; the corrections are screened like mutants, before any sample (agentless/line_repair.py)."""
    line_insert: bool = _from_data("line_insert")
    """With `line_repair`, while nothing is decisive: a last pass asks of each line whether one is missing after it."""
    line_origin_first: bool = _from_data("line_origin_first")
    """With `line_repair`: a located function a reproduced wrong value came from (`value_origin`) is asked about
    first, whatever its rank."""
    line_nested: bool = _from_data("line_nested")
    """With `line_repair`: the statements of a function nested in an asked function are asked about too (its code
    is shown with them; alone it is another candidate)."""
    line_header_only: bool = _from_data("line_header_only")
    """With `line_repair`: an answer about a compound statement's header replaces that header only; the lines the
    answer goes on with (its block, repeated or rewritten) are dropped."""
    line_untested: bool = _from_data("line_untested")
    """With `line_repair`: a repository with no related test file (none shipped) is screened by the issue's own
    evidence alone; where related tests exist but none passes (a broken environment) line repair still refuses."""
    line_passes: int = _from_data("line_passes")
    """1: one greedy call per line; N: while nothing is decisive, each line N - 1 times more at `temperature`."""
    line_entities: int = _from_data("line_entities")
    """The first candidates whose statements are asked about (the functions among them, in rank order)."""
    max_existing_failures: int = _from_data("max_existing_failures")
    """Related tests failing an assertion on the original are evidence up to this many (more: the environment's
    trouble, not the issue's bug) and half the baseline."""
    survivor_validation_s: float = _from_data("survivor_validation_s")
    """The seconds the screened survivors' validation (the related tests, once per survivor) may take, mutants and
    line corrections alike; the survivors not reached then are no candidates, and nothing of that screening is
    decisive."""
    failing_by_function: bool = _from_data("failing_by_function")
    """Related tests failing on the original are capped by test function (a parametrized test's cases once)."""
    unguarded_submitted: bool = _from_data("unguarded_submitted")
    """A fix the evidence shows ends `submitted`, not `validated`, when a patched file's own test module could not be
    collected on the original (`validate.unguarded`): nothing checked what else it changes there."""
    doctest_fallback: bool = _from_data("doctest_fallback")
    """Where no related test file exists, the docstring examples of the located source files are the related tests
    (every pytest run of the run collects doctests: `validate.DOCTEST_ADDOPTS`)."""
    doctest_always: bool = _from_data("doctest_always")
    """The docstring examples of the located source files join the related tests even where test files exist."""
    mechanisms: Mechanisms = field(default_factory=Mechanisms)
    switches: Switches = field(default_factory=switch_defaults)
    """data/agentless.toml [mechanisms]: which execution-grounded mechanisms run (see `uses`)."""
    snippets: SnippetLimits | None = None
    """How the issue's snippets are read and run; None: data/agentless.toml [snippets]."""

    def __post_init__(self) -> None:
        if self.one_entity_scope not in ONE_ENTITY_SCOPES:
            raise UserError(
                f"one_entity_scope = {self.one_entity_scope!r}: expected one of {', '.join(ONE_ENTITY_SCOPES)}"
            )
        if not 1 <= self.line_passes <= MAX_LINE_PASSES:
            raise UserError(f"line_passes = {self.line_passes!r}: expected 1 to {MAX_LINE_PASSES}")
        if self.max_existing_failures < 1:
            raise UserError(f"max_existing_failures = {self.max_existing_failures!r}: expected 1 or more")
        if not self.survivor_validation_s > 0:
            raise UserError(f"survivor_validation_s = {self.survivor_validation_s!r}: expected more than 0")

    def targets_one(self, sample: int) -> bool:
        """Whether sample `sample` rewrites one candidate only, the others shown as signatures."""
        scope = self.one_entity_scope
        return self.one_entity and (scope == "all" or (scope == "greedy") == (sample == 0))

    def uses(self, name: str) -> bool:
        """Whether mechanism `name` of `SWITCHES` runs: switched on in the data, and not ablated."""
        return name in SWITCHES and bool(getattr(self.switches, name)) and bool(getattr(self.mechanisms, name))

    def for_model(self, model: str) -> PipelineConfig:
        """This configuration with the model's measured defaults filled in where none was given."""
        chosen = self if self.one_shot is not None else replace(self, one_shot=one_shot_for(model))
        return replace(chosen, **model_overrides(model))

    def ablated(self, mechanisms: Mechanisms) -> PipelineConfig:
        """This configuration with the switched-off mechanisms applied (sampling off: one greedy sample)."""
        return replace(
            self,
            mechanisms=mechanisms,
            samples=self.samples if mechanisms.sampling else 1,
            reproduce=self.reproduce and mechanisms.reproduction,
            stop_after_green=self.stop_after_green and mechanisms.stop_after_green,
        )
