"""Feedback rounds and decode discipline for one-shot repair samples.

A sample whose patch fails the evidence (any `Evidence`: tests, snippets) is told, in the same conversation (so the
server reuses its KV prefix), what still fails (and whether its last answer was applied, refused or cut), and asked
for the corrected definition again: at most `rounds` follow-up calls, each a `model_call`, a `feedback` stage and an
`answer` gate in the trajectory, each within the run's caps. A follow-up's max_tokens grows with the last answer, so
a corrected definition that explains itself is not cut; an answer that repeats the last one ends the rounds.
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
from snaffle.trajectory import gate_event, model_call_event, stage_event
from snaffle.types import Event, GateResult, Limits, Message, Model, ModelReply, TrajectorySink, Usage
from snaffle.workspace import Workspace

FENCE = "```"
MAX_FAILURE_CHARS = 1500
"""The most characters of failure text one round shows (a hostile test can print a lot; the prompt stays short)."""

Apply = Callable[[str], tuple[str, str]]
"""Applies one answer to the sample's copy: (status, message), as `repair.apply_answer`."""
FollowUp = Callable[[ModelReply], tuple[Model, int | None]]
"""The model for the next follow-up call, given the answer it follows, and its max_tokens (None: not bounded)."""
CUT = "length"
"""The finish reason of an answer the server cut at max_tokens."""


@dataclass(frozen=True)
class Answer:
    """What became of one answer: `submitted` (applied) or `no_edit` and why, and whether max_tokens cut it."""

    status: str
    message: str
    cut: bool = False

    @classmethod
    def of(cls, reply: ModelReply, applied: tuple[str, str]) -> Answer:
        return cls(applied[0], applied[1], reply.finish_reason == CUT)

    def gate(self, max_tokens: int | None) -> GateResult:
        """The `answer` gate line: applied or not, and a cut said as such (a cut answer is never silently lost)."""
        bound = f" ({max_tokens})" if max_tokens else ""
        cut = f"cut at max_tokens{bound} before it ended; " if self.cut else ""
        return GateResult("answer", self.status == "submitted", f"{cut}{self.message}")


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


def feedback_prompt(failure: str, names: Sequence[str], last: Answer | None = None) -> str:
    """The follow-up request: whether the last answer was applied (cut, refused), what still fails, and the
    corrected definition wanted."""
    target = " or ".join(f"`{n}`" for n in dict.fromkeys(names)) or "the function"
    return prompts.render(prompts.load("feedback.md"), state=answer_state(last), failure=failure, target=target)


def answer_state(last: Answer | None) -> str:
    """The sentence that opens a follow-up request: what became of the model's last answer."""
    if last is not None and last.cut:
        return prompts.load("feedback_cut.md").strip()
    if last is not None and last.status != "submitted":
        reason = " ".join(last.message.split())[:MAX_REASON_CHARS]
        return prompts.render(prompts.load("feedback_unapplied.md"), reason=reason).strip()
    return prompts.load("feedback_applied.md").strip()


MAX_REASON_CHARS = 300
"""The most characters of an apply failure's reason a follow-up request shows."""


def closed_fence(text: str) -> str:
    """The answer with its code block closed: a stop sequence cuts the closing fence off."""
    return text + f"\n{FENCE}" if text.count(FENCE) % 2 else text


def rounds_allowed(config: PipelineConfig, limits: Limits, calls_so_far: int) -> int:
    """Follow-up calls this sample may make: the configured rounds within the sample's turn cap."""
    if not (config.feedback or scope(config)):
        return 0
    if limits.max_turns:
        return max(0, min(config.feedback_rounds, limits.max_turns - calls_so_far))
    return max(0, config.feedback_rounds)


SCOPES = {"partial": "no partial fix", "unapplied": "its answer was applied"}
"""The narrower rounds (`feedback_partial`, `feedback_unapplied`), each with the halt said when it does not hold."""


def scope(config: PipelineConfig) -> frozenset[str]:
    """Which narrower rounds the config asks for; empty with `feedback` on (every failing answer gets rounds)."""
    if config.feedback:
        return frozenset()
    return frozenset(
        name for name, on in (("partial", config.feedback_partial), ("unapplied", config.feedback_unapplied)) if on
    )


def decode_model(
    model: ModelConfig, config: PipelineConfig, decode: DecodeConfig, target_chars: int, factor: float = 1.0
) -> ModelConfig:
    """The sample's model settings with the decode switches applied: stop sequences, a max_tokens bound (`factor`
    times the bound from the target's size)."""
    if config.stop_after_block:
        model = replace(model, stop=decode.stop)
    if config.bound_max_tokens and target_chars > 0:
        bound = int(decode.max_tokens(target_chars) * factor)
        given = model.max_output_tokens
        model = replace(model, max_output_tokens=bound if given is None else min(given, bound))
    return model


def follow_up_model(
    model: ModelConfig, config: PipelineConfig, decode: DecodeConfig, target_chars: int, previous: ModelReply
) -> ModelConfig:
    """A feedback round's settings: bounded like the first call from the target's size or the previous answer's,
    whichever is larger, times `follow_up_factor` (the answer repeats the last one, often with an explanation)."""
    size = max(target_chars, len(previous.content)) if target_chars > 0 else 0
    return decode_model(model, config, decode, size, decode.follow_up_factor)


@dataclass(frozen=True)
class Conversation:
    """One sample's one-shot conversation so far: its messages, the calls made, what became of the last answer."""

    messages: tuple[Message, ...]
    reply: ModelReply
    calls: int = 1
    answer: Answer | None = None


def run_rounds(
    conversation: Conversation,
    evidence: Sequence[Evidence],
    clone: Workspace,
    sandbox: Sandbox,
    models: FollowUp,
    apply: Apply,
    names: Sequence[str],
    io: tuple[TrajectorySink, Pricer],
    rounds: int,
    limits: Limits,
    only: frozenset[str] = frozenset(),
) -> Rounds | None:
    """Judge the applied answer; while evidence fails and rounds are left, show the failure and apply the next
    answer; an answer repeating the last one ends the rounds (so does one outside the `only` scopes: no partial fix,
    an answer that was applied). None when no round was run (no evidence, no rounds, or the first answer passes)."""
    if not evidence or rounds < 1:
        return None
    sink, talk, usage, result = io[0], conversation, Usage(), None
    for number in range(1, rounds + 1):
        verdicts = judge_all(evidence, clone, sandbox)
        failure = failure_text(verdicts)
        halt = halt_reason(failure, verdicts, talk.answer, only) or (
            "token cap reached" if _over_tokens(limits, usage, talk.reply) else ""
        )
        if halt:
            sink.write(feedback_stage(number, verdicts, failure, halt))
            break
        model, bound = models(talk.reply)
        sink.write(feedback_stage(number, verdicts, failure, "asked again", bound))
        last = talk.reply
        try:
            talk = follow_up(talk, feedback_prompt(failure, names, talk.answer), model, io, usage)
        except Interrupt as stop:
            return Rounds(stop.status, stop.message, usage, talk.calls - conversation.calls)
        usage += talk.reply.usage.with_dollars(io[1](model.name, talk.reply.usage))
        answer = Answer.of(talk.reply, apply(closed_fence(talk.reply.content)))
        sink.write(gate_event(talk.calls, None, answer.gate(bound)))
        talk = replace(talk, answer=answer)
        result = Rounds(
            answer.status, f"feedback round {number}: {answer.message}", usage, talk.calls - conversation.calls
        )
        if talk.reply.content.strip() == last.content.strip():
            break  # the same answer to the same failure: the next round would ask the same thing again
    return result


def halt_reason(failure: str, verdicts: Sequence[Verdict], answer: Answer | None, only: frozenset[str]) -> str:
    """Why no round is asked on these verdicts ("" to ask): nothing fails, or no scope of `only` holds (a partial
    fix: an expectation the original failed now holds; unapplied: the last answer changed nothing). Empty `only`:
    every failing answer is asked again."""
    if not failure:
        return "evidence passes"
    holds = {
        "partial": any(v.progress for v in verdicts),
        "unapplied": answer is not None and answer.status != "submitted",
    }
    if only and not any(holds[name] for name in only):
        return next(SCOPES[name] for name in SCOPES if name in only)
    return ""


def follow_up(
    talk: Conversation, request: str, model: Model, io: tuple[TrajectorySink, Pricer], spent: Usage
) -> Conversation:
    """One follow-up call: the last answer and the request appended, the reply recorded as a `model_call`."""
    sink, pricer = io
    sent = len(talk.messages)
    assistant: Message = {"role": "assistant", "content": talk.reply.content}
    messages = [*talk.messages, assistant, {"role": "user", "content": request}]
    reply = model.complete(messages, [])
    cost = reply.usage.with_dollars(pricer(model.name, reply.usage))
    calls = talk.calls + 1
    sink.write(model_call_event(calls, messages, sent, reply, cost, {**(spent + cost).as_dict(), "turns": calls}))
    return Conversation(tuple(messages), reply, calls, talk.answer)


def _over_tokens(limits: Limits, usage: Usage, reply: ModelReply) -> bool:
    """The token cap leaves no room for another round (0: no cap)."""
    return bool(limits.max_tokens) and usage.total_tokens + reply.usage.total_tokens >= limits.max_tokens


def feedback_stage(
    number: int, verdicts: Sequence[Verdict], failure: str, decision: str, max_tokens: int | None = None
) -> Event:
    """The `feedback` stage line of one round: each evidence's verdict, and whether the model is asked again (with
    which max_tokens) or why not."""
    return stage_event(
        "feedback",
        decision,
        round=number,
        verdicts={v.evidence: v.passed for v in verdicts},
        failure=failure,
        **({"max_tokens": max_tokens} if decision == "asked again" else {}),
    )
