"""Prompt templates are data: packaged files, replaceable one by one from $SNAFFLE_PROMPTS."""

from __future__ import annotations

from pathlib import Path

import pytest

from snaffle import prompts
from snaffle.agentless.config import PipelineConfig
from snaffle.model.client import ModelConfig
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.types import Limits, Task
from tests.helpers import CALC_ISSUE, Start


def test_an_override_replaces_only_its_own_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    packaged = prompts.load("oneshot_rewrite.md")
    (tmp_path / "oneshot_rewrite.md").write_text("custom {{issue}}", encoding="utf-8")
    monkeypatch.setenv(prompts.OVERRIDE_ENV, str(tmp_path))
    assert prompts.load("oneshot_rewrite.md") == "custom {{issue}}"
    assert prompts.load("reproduce.md") == (Path(prompts.__file__).parent / "reproduce.md").read_text()
    monkeypatch.setenv(prompts.OVERRIDE_ENV, str(tmp_path / "missing"))
    assert prompts.load("oneshot_rewrite.md") == packaged


def test_a_run_sends_the_overridden_prompt(
    calc_repo: Path, scripted: Start, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    custom = tmp_path / "prompts"
    custom.mkdir()
    (custom / "oneshot_rewrite.md").write_text("TUNED PROMPT\n{{issue}}\n{{context}}\n", encoding="utf-8")
    monkeypatch.setenv(prompts.OVERRIDE_ENV, str(custom))
    fix = "```python\ndef add(a, b):\n    return a + b\n```"
    server = scripted([{"content": fix, "expect_contains": "TUNED PROMPT"}])
    config = SolveConfig(
        "agentless",
        ModelConfig(server.base_url, "scripted"),
        Limits(max_turns=5),
        tmp_path / "out",
        zero_pricer,
        pipeline=PipelineConfig(samples=1, one_shot=True, reproduce=False, line_repair=False, mutation=False),
    )
    attempt = solve(Task(calc_repo, CALC_ISSUE), config)
    assert attempt.exit_status == "validated" and "+    return a + b" in attempt.patch


def test_the_text_protocol_describes_the_tools_and_a_real_call() -> None:
    schemas = [{"name": "bash", "description": "Run a command.", "parameters": {"type": "object"}}]
    example = {"name": "bash", "arguments": {"command": "ls"}}
    assert prompts.system_prompt("  You fix bugs.\n", schemas, "native", example) == "You fix bugs."
    text = prompts.system_prompt("You fix bugs.\n", schemas, "text", example)
    assert text.startswith("You fix bugs.\n\n") and "{{" not in text
    assert '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>' in text
    assert '{"name":"bash","description":"Run a command.","parameters":{"type":"object"}}' in text


def test_a_value_is_filled_in_as_it_is_and_an_unfilled_slot_is_an_error() -> None:
    """An issue may quote Jinja (`{{ x }}`) or a repr may hold `{{call}}`: values are never read as a template."""
    filled = prompts.render("Issue: {{issue}}\n{{call}}", issue="use {{ x }} and {{call}}", call="f() returned 1")
    assert filled == "Issue: use {{ x }} and {{call}}\nf() returned 1"
    with pytest.raises(KeyError, match="unfilled template slot near '{{call}}'"):
        prompts.render("Issue: {{issue}}\n{{call}}", issue="x")
