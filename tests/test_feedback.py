"""Feedback rounds, one-entity samples, stop/max_tokens and the evidence veto, driven through real agentless runs
with the scripted model (real git, pytest and bubblewrap)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from snaffle.agentless.config import PipelineConfig, decode_config
from snaffle.agentless.evidence import TestEvidence, Verdict, short_failure
from snaffle.agentless.feedback import closed_fence, failure_text
from snaffle.exceptions import UserError
from snaffle.sandbox import Sandbox
from snaffle.testing.scripted_server import count_tokens
from snaffle.trajectory import read_trajectory
from snaffle.workspace import Workspace
from tests.helpers import Start, repo_tests_pass
from tests.test_pipeline import TRACEBACK_ISSUE, agentless, stages

REPRO = "```python\nfrom calc import add\n\n\ndef test_add_sums():\n    assert add(2, 3) == 5\n```"
WRONG = "```python\ndef add(a, b):\n    return b - a\n```"
COSMETIC = "```python\ndef add(a, b):\n    return -(b - a)\n```"
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"
ONE_SHOT: dict[str, Any] = {"one_shot": True, "samples": 1, "top_k": 1}


def shown(prompt: str) -> str:
    """The candidates' part of a one-shot prompt."""
    return prompt.split("The code most likely involved:\n\n")[1].split("\n\nFind the bug")[0]


def events(out: Path, kind: str) -> list[dict[str, Any]]:
    return [dict(e) for e in read_trajectory(out / "trajectory.jsonl").of_type(kind)]


def test_a_feedback_round_sends_the_failure_and_its_answer_is_applied(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    server = scripted([{"content": REPRO}, {"content": WRONG}, {"content": RIGHT}])
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, **ONE_SHOT, feedback=True, feedback_rounds=2)
    assert attempt.exit_status == "validated", stages(out)
    assert "+    return a + b\n" in attempt.patch and repo_tests_pass(calc_repo)
    follow_up = server.requests[2].body["messages"]
    assert follow_up[:2] == server.requests[1].body["messages"] + [{"role": "assistant", "content": WRONG}]
    assert "assert 1 == 5" in follow_up[-1]["content"] and "`add`" in follow_up[-1]["content"]
    rounds = [e for e in events(out, "stage") if e["stage"] == "feedback"]
    assert [r["decision"] for r in rounds] == ["asked again", "evidence passes"]
    assert rounds[0]["verdicts"] == {"reproduction": False} and rounds[1]["verdicts"] == {"reproduction": True}
    calls = [(e.get("stage"), e["turn"]) for e in events(out, "model_call")]
    assert calls == [("reproduce", 1), (None, 1), (None, 2)]  # the reproduction call, the repair call, one round


def test_feedback_rounds_stop_at_their_cap(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"content": REPRO}, {"content": WRONG}, {"content": WRONG}, {"content": RIGHT}])
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, **ONE_SHOT, feedback=True, feedback_rounds=1)
    assert len(server.requests) == 3 and attempt.exit_status == "no_valid_patch", stages(out)


def test_without_feedback_no_round_is_asked(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"content": REPRO}, {"content": WRONG}, {"content": RIGHT}])
    out = tmp_path / "run"
    agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, **ONE_SHOT, feedback=False)
    assert len(server.requests) == 2 and not [e for e in events(out, "stage") if e["stage"] == "feedback"]


@pytest.mark.parametrize("veto", [True, False])
def test_a_patch_leaving_the_reproduced_failure_is_not_submitted_as_a_fix(
    calc_repo: Path, scripted: Start, tmp_path: Path, veto: bool
) -> None:
    server = scripted([{"content": REPRO}, {"content": COSMETIC}])
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, **ONE_SHOT, evidence_veto=veto)
    assert attempt.exit_status == "no_valid_patch", stages(out)  # whatever the veto: the status is the evidence's
    validate = [e for e in events(out, "stage") if e["stage"] == "validate"][0]
    assert validate["against"] == ["reproduction"] and validate["reproduces"] is False
    assert (attempt.patch == "") is veto  # without it the best guess stays in patch.diff, never applied
    assert "return a - b" in (calc_repo / "calc" / "__init__.py").read_text()


EXPLAINED = (
    "The bug is in `add`: it subtracts its second argument from its first where the issue and the test want the sum. "
    * 6
    + "Here is the corrected definition:\n\n"
    + RIGHT
    + "\n\nThis returns 5 for add(2, 3), as the reproduction test expects.\n"
)
DECODED = {"stop_after_block": True, "bound_max_tokens": True, "feedback": True}


def answer_gates(out: Path) -> list[tuple[bool, str]]:
    return [(g["ok"], g["reason"]) for g in events(out, "gate") if g["gate"] == "answer"]


def test_a_round_answer_longer_than_the_first_bound_is_applied(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    script = [{"content": REPRO}, {"content": WRONG, "obey_limits": True}, {"content": EXPLAINED, "obey_limits": True}]
    server = scripted(script)
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, **ONE_SHOT, **DECODED, feedback_rounds=1)
    assert attempt.exit_status == "validated" and "+    return a + b\n" in attempt.patch, stages(out)
    first, round_one = (r.body["max_tokens"] for r in server.requests[1:])
    decoded = EXPLAINED.split(decode_config().stop[0])[0]  # what the server sends: cut before the stop sequence
    assert first < count_tokens(decoded) <= round_one  # the first call's bound would have cut it
    rounds = [e for e in events(out, "stage") if e["stage"] == "feedback"]
    assert rounds[0]["max_tokens"] == round_one and answer_gates(out) == [
        (True, "applied a rewrite of calc/__init__.py::add")
    ]


def test_a_cut_or_refused_answer_is_recorded_and_the_next_round_says_so(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    rambling = "Let me think about `add` step by step. " * 200 + RIGHT
    script = [{"content": REPRO}, {"content": "The function looks fine to me."}]
    script += [{"content": rambling, "obey_limits": True}, {"content": RIGHT, "obey_limits": True}]
    server = scripted(script)
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, **ONE_SHOT, **DECODED, feedback_rounds=2)
    assert attempt.exit_status == "validated", stages(out)
    asked = [r.body["messages"][-1]["content"] for r in server.requests[2:]]
    assert asked[0].startswith("Your answer could not be applied (no edit found in the answer)")
    assert asked[1].startswith("Your answer was cut off") and "assert -1 == 5" in asked[1]
    cut, applied = answer_gates(out)
    bound = server.requests[2].body["max_tokens"]
    assert cut == (False, f"cut at max_tokens ({bound}) before it ended; no edit found in the answer")
    assert applied[0] is True
    assert [e["response"]["finish_reason"] for e in events(out, "model_call")][1:] == ["stop", "length", "stop"]


def test_a_repeated_answer_ends_the_rounds(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"content": REPRO}, {"content": WRONG}, {"content": WRONG}, {"content": RIGHT}])
    out = tmp_path / "run"
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, **ONE_SHOT, feedback=True, feedback_rounds=3)
    assert len(server.requests) == 3 and attempt.exit_status == "no_valid_patch", stages(out)
    assert answer_gates(out) == [(False, "the answer repeats the definitions unchanged")]


def test_one_entity_samples_each_target_one_candidate(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"content": RIGHT}, {"content": "```python\ndef mul(a, b):\n    return b * a\n```"}])
    out = tmp_path / "run"
    options = {"one_shot": True, "samples": 2, "top_k": 2, "reproduce": False, "one_entity": True, "early_stop": False}
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, **options, one_entity_scope="all")
    first, second = (shown(r.body["messages"][0]["content"]) for r in server.requests)
    assert "return a - b" in first and "def mul(a, b):\n    ..." in first and "return a * b" not in first
    assert "return a * b" in second and "def add(a, b):\n    ..." in second and "return a - b" not in second
    assert attempt.exit_status == "validated" and "return a + b" in attempt.patch, stages(out)


@pytest.mark.parametrize(("scope", "focused"), [("greedy", (True, False)), ("temperature", (False, True))])
def test_one_entity_scope_says_which_samples_target_one_candidate(
    calc_repo: Path, scripted: Start, tmp_path: Path, scope: str, focused: tuple[bool, bool]
) -> None:
    wrong = "```python\ndef add(a, b):\n    return b - a\n```"
    server = scripted([{"content": wrong}, {"content": "```python\ndef mul(a, b):\n    return b * a\n```"}])
    out = tmp_path / "run"
    options = {"one_shot": True, "samples": 2, "top_k": 2, "reproduce": False, "early_stop": False}
    attempt = agentless(
        calc_repo, TRACEBACK_ISSUE, server.base_url, out, **options, one_entity=True, one_entity_scope=scope
    )
    prompts = [shown(r.body["messages"][0]["content"]) for r in server.requests]
    whole = ("return a - b", "return a * b")
    assert [sum(code in prompt for code in whole) == 1 for prompt in prompts] == list(focused)
    assert "return a * b" in prompts[1] and len(server.requests) == 2, stages(out)
    assert attempt.exit_status != "validated"


def test_by_default_only_the_greedy_sample_targets_one_candidate() -> None:
    """Session 21's A/B: the same resolves as every sample seeing all candidates, 0.92x output tokens."""
    packaged = PipelineConfig()
    assert [packaged.targets_one(sample) for sample in range(4)] == [True, False, False, False]


def test_an_unknown_one_entity_scope_is_one_clear_error() -> None:
    with pytest.raises(UserError, match="one_entity_scope = 'first': expected one of all, greedy, temperature"):
        PipelineConfig(one_entity_scope="first")


def test_stop_and_max_tokens_are_sent_and_a_cut_fence_is_closed(
    calc_repo: Path, scripted: Start, tmp_path: Path
) -> None:
    cut = "```python\ndef add(a, b):\n    return a + b"  # the server stopped before the closing fence
    server = scripted([{"content": cut}])
    out = tmp_path / "run"
    options = {**ONE_SHOT, "reproduce": False, "stop_after_block": True, "bound_max_tokens": True}
    options["docstrings_apart"] = False  # the bound is sized from the target as the file has it, shown so here
    attempt = agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, out, **options)
    body = server.requests[0].body
    assert body["stop"] == list(decode_config().stop) == ["\n```\n"]
    assert body["max_tokens"] == decode_config().max_tokens(len(shown(body["messages"][0]["content"]))) < 400
    assert attempt.exit_status == "validated", stages(out)


def test_without_the_decode_switches_neither_is_sent(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    server = scripted([{"content": RIGHT}])
    off = {"stop_after_block": False, "bound_max_tokens": False}
    agentless(calc_repo, TRACEBACK_ISSUE, server.base_url, tmp_path / "run", **ONE_SHOT, **off, reproduce=False)
    assert "stop" not in server.requests[0].body and "max_tokens" not in server.requests[0].body


def test_test_evidence_judges_a_clone_and_says_what_fails(calc_repo: Path, tmp_path: Path) -> None:
    sandbox = Sandbox.create(tmp_path / "scratch")
    verdict = TestEvidence("failing_test", ("tests/test_calc.py::test_add",)).judge(Workspace.open(calc_repo), sandbox)
    assert verdict.passed is False and "assert -1 == 5" in verdict.failure


def test_failure_text_is_short_and_names_its_evidence() -> None:
    long = "E   " + "x" * 5000
    text = failure_text([Verdict("snippet", False, long), Verdict("reproduction", True), Verdict("t", None, "?")])
    assert text.startswith("snippet:\n") and len(text) < 1600 and "reproduction" not in text
    assert short_failure("noise\nE   assert 1 == 5\nFAILED t.py::x - assert 1 == 5\n") == (
        "E   assert 1 == 5\nFAILED t.py::x - assert 1 == 5"
    )
    assert closed_fence("```python\nx = 1") == "```python\nx = 1\n```" and closed_fence(RIGHT) == RIGHT


def test_prompt_lookup_needs_all_logits_and_is_off_by_default() -> None:
    from snaffle.model import local

    plain = local.server_command(Path("/m.gguf"), "alias", 8123, 2, 4096)
    lookup = local.server_command(Path("/m.gguf"), "alias", 8123, 2, 4096, prompt_lookup=True, draft_tokens=7)
    assert plain[plain.index("--logits_all") + 1] == "false" and "--draft_model" not in plain
    assert lookup[lookup.index("--logits_all") + 1] == "true"
    assert lookup[lookup.index("--draft_model") + 1] == "prompt-lookup-decoding"
    assert lookup[lookup.index("--draft_model_num_pred_tokens") + 1] == "7"
    assert local.lookup_choice(None) == (False, 10) and local.lookup_choice(True) == (True, 10)


def test_feedback_rounds_are_data_per_model() -> None:
    from snaffle.agentless.config import PipelineConfig, model_overrides

    assert model_overrides("Qwen2.5-Coder-1.5B-Instruct-Q4_K_M") == {"feedback_rounds": 2}
    assert model_overrides("gpt-4o") == {}
    assert PipelineConfig(feedback_rounds=5).for_model("gpt-4o").feedback_rounds == 5
