"""The agentless arm's configuration record, `PipelineConfig`; its defaults are snaffle/data/agentless.toml's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cache
from types import MappingProxyType
from typing import Any

from snaffle import data
from snaffle.primitives.extract import one_shot_for
from snaffle.types import Mechanisms

DATA_FILE = "agentless.toml"
FROM_DATA = ("samples", "temperature", "top_k", "concurrency", "repair_turns", "reproduce", "stop_after_green")
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


SWITCHES = tuple(f.name for f in fields(Switches))


@cache
def switch_defaults() -> Switches:
    """The packaged [mechanisms] switches (read on first use, never at import)."""
    return data.load_record(Switches, DATA_FILE, "mechanisms")


def _from_data(key: str) -> Any:
    """A field whose default is `key` of the data file, read when a config is made (never at import)."""
    assert key in FROM_DATA, key
    return field(default_factory=lambda: pipeline_defaults()[key])


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
    mechanisms: Mechanisms = field(default_factory=Mechanisms)
    switches: Switches = field(default_factory=switch_defaults)
    """data/agentless.toml [mechanisms]: which execution-grounded mechanisms run (see `uses`)."""

    def uses(self, name: str) -> bool:
        """Whether mechanism `name` of `SWITCHES` runs: switched on in the data, and not ablated."""
        return name in SWITCHES and bool(getattr(self.switches, name)) and bool(getattr(self.mechanisms, name))

    def for_model(self, model: str) -> PipelineConfig:
        """This configuration with the model's measured defaults filled in where none was given."""
        return self if self.one_shot is not None else replace(self, one_shot=one_shot_for(model))

    def ablated(self, mechanisms: Mechanisms) -> PipelineConfig:
        """This configuration with the switched-off mechanisms applied (sampling off: one greedy sample)."""
        return replace(
            self,
            mechanisms=mechanisms,
            samples=self.samples if mechanisms.sampling else 1,
            reproduce=self.reproduce and mechanisms.reproduction,
            stop_after_green=self.stop_after_green and mechanisms.stop_after_green,
        )
