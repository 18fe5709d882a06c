"""Feedback rounds and decode discipline for one-shot repair samples.

A sample whose patch fails the evidence (any `Evidence`: tests, snippets) is told, in the same conversation (so the
server reuses its KV prefix), what still fails, and asked for the corrected definition again: at most `rounds`
follow-up calls, each a `model_call` and a `feedback` stage in the trajectory, each within the run's caps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from snaffle import prompts
from snaffle.agentless.config import DecodeConfig, PipelineConfig
from snaffle.agentless.evidence import Evidence, Verdict
from snaffle.exceptions import Interrupt
from snaffle.harness import Pricer
from snaffle.model.client import ModelConfig
from snaffle.sandbox import Sandbox
from snaffle.trajectory import model_call_event, stage_event
from snaffle.types import Event, Limits, Message, Model, ModelReply, TrajectorySink, Usage
from snaffle.workspace import Workspace

FENCE = "```"
MAX_FAILURE_CHARS = 1500
"""The most characters of failure text one round shows (a hostile test can print a lot; the prompt stays short)."""

Apply = Callable[[str], tuple[str, str]]
"""Applies one answer to the sample's copy: (status, message), as `repair.apply_answer`."""


@dataclass(frozen=True)
class Rounds:
    """What the feedback rounds of one sample produced: the last answer's status, the usage and calls they cost."""

    status: str
    message: str
    usage: Usage
    calls: int


def judge_all(evidence: Sequence[Evidence], clone: Workspace, sandbox: Sandbox) -> tuple[Verdict, ...]:
    """Every piece of evidence's verdict on `clone`."""
    return tuple(item.judge(clone, sandbox) for item in evidence)


def failure_text(verdicts: Sequence[Verdict]) -> str:
    """The failing verdicts' short texts, one paragraph each, capped at `MAX_FAILURE_CHARS`."""
    parts = [f"{v.evidence}:\n{v.failure.strip() or '(failed)'}" for v in verdicts if v.passed is False]
    text = "\n\n".join(parts)
    return text if len(text) <= MAX_FAILURE_CHARS else text[:MAX_FAILURE_CHARS] + "\n[...]"


def feedback_prompt(failure: str, names: Sequence[str]) -> str:
    """The follow-up request: what still fails with the answer applied, and the corrected definition wanted."""
    target = " or ".join(f"`{n}`" for n in dict.fromkeys(names)) or "the function"
    return prompts.render(prompts.load("feedback.md"), failure=failure, target=target)


def closed_fence(text: str) -> str:
    """The answer with its code block closed: a stop sequence cuts the closing fence off."""
    return text + f"\n{FENCE}" if text.count(FENCE) % 2 else text


def rounds_allowed(config: PipelineConfig, limits: Limits, calls_so_far: int) -> int:
    """Follow-up calls this sample may make: the configured rounds within the sample's turn cap."""
    if not config.feedback:
        return 0
    if limits.max_turns:
        return max(0, min(config.feedback_rounds, limits.max_turns - calls_so_far))
    return max(0, config.feedback_rounds)


def decode_model(model: ModelConfig, config: PipelineConfig, decode: DecodeConfig, target_chars: int) -> ModelConfig:
    """The sample's model settings with the decode switches applied: stop sequences, a max_tokens bound."""
    if config.stop_after_block:
        model = replace(model, stop=decode.stop)
    if config.bound_max_tokens and target_chars > 0:
        bound = decode.max_tokens(target_chars)
        given = model.max_output_tokens
        model = replace(model, max_output_tokens=bound if given is None else min(given, bound))
    return model


@dataclass(frozen=True)
class Conversation:
    """One sample's one-shot conversation so far: its messages and the calls made."""

    messages: tuple[Message, ...]
    reply: ModelReply
    calls: int = 1


def run_rounds(
    conversation: Conversation,
    evidence: Sequence[Evidence],
    clone: Workspace,
    sandbox: Sandbox,
    model: Model,
    apply: Apply,
    names: Sequence[str],
    io: tuple[TrajectorySink, Pricer],
    rounds: int,
    limits: Limits,
) -> Rounds | None:
    """Judge the applied answer; while evidence fails and rounds are left, show the failure and apply the next
    answer. None when no round was run (no evidence, no rounds, or the first answer already passes)."""
    if not evidence or rounds < 1:
        return None
    sink, pricer = io
    messages, reply, calls = list(conversation.messages), conversation.reply, conversation.calls
    usage, result = Usage(), None
    for number in range(1, rounds + 1):
        verdicts = judge_all(evidence, clone, sandbox)
        failure = failure_text(verdicts)
        sink.write(feedback_stage(number, verdicts, failure))
        if not failure or _over_tokens(limits, usage, reply):
            break
        sent = len(messages)
        messages += [
            {"role": "assistant", "content": reply.content},
            {"role": "user", "content": feedback_prompt(failure, names)},
        ]
        try:
            reply = model.complete(messages, [])
        except Interrupt as stop:
            return Rounds(stop.status, stop.message, usage, calls - conversation.calls)
        calls += 1
        cost = reply.usage.with_dollars(pricer(model.name, reply.usage))
        usage += cost
        sink.write(model_call_event(calls, messages, sent, reply, cost, {**usage.as_dict(), "turns": calls}))
        status, message = apply(closed_fence(reply.content))
        result = Rounds(status, f"feedback round {number}: {message}", usage, calls - conversation.calls)
    return result


def _over_tokens(limits: Limits, usage: Usage, reply: ModelReply) -> bool:
    """The token cap leaves no room for another round (0: no cap)."""
    return bool(limits.max_tokens) and usage.total_tokens + reply.usage.total_tokens >= limits.max_tokens


def feedback_stage(number: int, verdicts: Sequence[Verdict], failure: str) -> Event:
    """The `feedback` stage line of one round: each evidence's verdict, and whether the model is asked again."""
    decision = "asked again" if failure else "evidence passes"
    return stage_event(
        "feedback",
        decision,
        round=number,
        verdicts={v.evidence: v.passed for v in verdicts},
        failure=failure,
    )
