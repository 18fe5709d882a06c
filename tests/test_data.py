"""snaffle.data: packaged tables read into records with required keys; every packaged file loads."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from snaffle import data
from snaffle.agentless.config import PipelineConfig
from snaffle.agentless.localize import Weights
from snaffle.primitives.extract import repair_table
from snaffle.types import Limits


@dataclass(frozen=True)
class Knobs:
    """A record for the loader's tests."""

    depth: int
    share: float = 0.5


def test_a_record_takes_every_field_from_the_data() -> None:
    assert data.record(Knobs, {"depth": 2, "share": 0.25}, "t") == Knobs(2, 0.25)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"depth": 2}, r"t \[knobs\] lacks the required key 'share'"),  # a field's default in code is not used
        ({"depth": 2, "share": 0.5, "shares": 1.0}, r"unknown key 'shares' \(known: depth, share\)"),
    ],
)
def test_a_missing_or_unknown_key_is_an_error_naming_it(values: dict[str, float], message: str) -> None:
    with pytest.raises(data.DataError, match=message):
        data.record(Knobs, values, "t [knobs]")


def test_a_missing_table_is_an_error_naming_it() -> None:
    with pytest.raises(data.DataError, match=r"limits.toml lacks the required table \[nightly\]"):
        data.load_record(Limits, "limits.toml", "nightly")


@pytest.mark.parametrize(("table", "expected"), [("run", Limits(max_turns=30)), ("demo", Limits(12, 0, 0.0, 600))])
def test_the_default_caps_are_data(table: str, expected: Limits) -> None:
    assert data.load_record(Limits, "limits.toml", table) == expected


def test_every_packaged_table_loads() -> None:
    assert Weights.load().weights["bm25"] == 2.0
    assert repair_table().auto_max_lines == 80
    assert PipelineConfig().samples == 3
