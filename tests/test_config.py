"""The agentless arm's configuration: defaults from snaffle/data/agentless.toml, required keys, option defaults."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from snaffle import data
from snaffle.agentless.config import DATA_FILE, FROM_DATA, PipelineConfig, pipeline_table
from snaffle.agentless.options import add_pipeline_args, pipeline_config

NOT_FROM_DATA = {"one_shot", "edit_format", "mechanisms", "switches", "snippets"}
"""Fields that mean "not given" by default (the model's entry in edit_formats.toml; all mechanisms on; the packaged
[snippets]), and the [mechanisms] table's record (test_switches_are_the_data_files)."""


def test_every_default_is_the_data_files() -> None:
    packaged = data.load(DATA_FILE)["pipeline"]
    config = PipelineConfig()
    assert {key: getattr(config, key) for key in FROM_DATA} == packaged
    assert (config.samples, config.temperature, config.repair_turns) == (3, 0.8, 8)
    assert {f.name for f in fields(PipelineConfig)} == {*FROM_DATA, *NOT_FROM_DATA}


def test_switches_are_the_data_files_and_an_ablation_turns_one_off() -> None:
    config = PipelineConfig()
    assert {f.name: getattr(config.switches, f.name) for f in fields(config.switches)} == data.load(DATA_FILE)[
        "mechanisms"
    ]
    assert config.uses("issue_facts") and not config.ablated(config.mechanisms.without("issue_facts")).uses(
        "issue_facts"
    )


def test_a_given_value_beats_the_data() -> None:
    config = PipelineConfig(samples=1, reproduce=False)
    assert (config.samples, config.reproduce, config.top_k) == (1, False, PipelineConfig().top_k)


@pytest.mark.parametrize("key", FROM_DATA)
def test_a_missing_key_is_an_error_naming_it(key: str) -> None:
    tables = data.load(DATA_FILE)
    del tables["pipeline"][key]
    with pytest.raises(data.DataError, match=rf"agentless.toml \[pipeline\] lacks the required key '{key}'"):
        pipeline_table(tables)


def test_an_unknown_key_is_an_error_naming_it() -> None:
    tables = data.load(DATA_FILE)
    tables["pipeline"]["sample"] = 2
    with pytest.raises(data.DataError, match="unknown key 'sample'"):
        pipeline_table(tables)


def test_the_options_default_to_the_record() -> None:
    parser = argparse.ArgumentParser()
    add_pipeline_args(parser)
    assert pipeline_config(parser.parse_args([])) == PipelineConfig()
    assert pipeline_config(parser.parse_args(["--no-reproduce", "--samples", "5"])) == PipelineConfig(
        samples=5, reproduce=False
    )
    assert "(default 3)" in " ".join(parser.format_help().split())
