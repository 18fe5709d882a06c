"""THE loop: prepare -> model decision -> validate & dispatch -> observe -> save, with caps before every call.

Every arm runs this loop with its own prompt, tools and gates. Termination is data: an `Interrupt` carries the
exit status, and the trajectory records it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from snaffle.exceptions import FormatError, Interrupt, LimitsExceeded, StateError, Submitted, ToolFailure
from snaffle.model.messages import assistant_message, observation_messages
from snaffle.observations import ObservationPolicy, PolicyConfig, estimate_context
from snaffle.trajectory import gate_event, model_call_event, tool_call_event, tool_result_event
from snaffle.types import (
    Event,
    GateResult,
    Limits,
    Message,
    Model,
    ModelReply,
    Toolbox,
    ToolCall,
    ToolResult,
    ToolRun,
    TrajectorySink,
    Usage,
)

DONE_RE = re.compile(r"^\s*DONE\s*$", re.MULTILINE)
MAX_MALFORMED_TURNS = 3
MAX_REFUSALS_IN_A_ROW = 3
NO_CALL_MESSAGE = (
    "Your reply had no tool call. Call one tool, or write DONE on a line of its own when the fix is verified."
)
EARLY_DONE_MESSAGE = (
    "Not done yet: you have not read any code or changed anything. Explore the repository and fix the issue first."
)
REPEAT_MESSAGE = (
    "Refused: this exact call already ran and nothing has changed since, so its result stands. Try something else."
)

Pricer = Callable[[str, Usage], float | None]
"""Dollars of one call; None when the model's price is unknown (recorded as unknown, never as $0)."""
Fingerprint = Callable[[], str]


@dataclass(frozen=True)
class LoopConfig:
    """How one arm drives the loop."""

    arm: str
    limits: Limits
    max_malformed_turns: int = MAX_MALFORMED_TURNS
    max_refusals: int = MAX_REFUSALS_IN_A_ROW
    refuse_early_done: bool = True
    observations: PolicyConfig = field(default_factory=PolicyConfig)


@dataclass(frozen=True)
class Outcome:
    """How a loop ended, and what it used."""

    status: str
    message: str
    usage: Usage
    turns: int
    elapsed_s: float
    counters: dict[str, int] = field(default_factory=dict)


class Loop:
    """One run of the loop over a message history that only ever grows (a stable prefix for the KV cache)."""

    def __init__(
        self,
        model: Model,
        toolbox: Toolbox,
        sink: TrajectorySink,
        config: LoopConfig,
        fingerprint: Fingerprint,
        pricer: Pricer,
    ) -> None:
        self.model, self.toolbox, self.sink, self.config = model, toolbox, sink, config
        self.fingerprint, self.pricer = fingerprint, pricer
        self.messages: list[Message] = []
        self.usage = Usage()
        self.turn = 0
        self.sent = 0
        self.started = time.monotonic()
        self.counters = {"tool_calls": 0, "rejected_calls": 0, "malformed_turns": 0, "refusals": 0}
        self._malformed_in_a_row = 0
        self._refusals_in_a_row = 0
        self._seen: dict[str, str] = {}
        self._state = ""
        self._worked = False
        self._early_done_refused = False
        self.policy = ObservationPolicy(config.observations)

    @property
    def deadline(self) -> float | None:
        timeout = self.config.limits.timeout_s
        return self.started + timeout if timeout else None

    def run(self, messages: Sequence[Message]) -> Outcome:
        """Run until an `Interrupt` (or Ctrl-C) ends it; never raises for a model, tool or state failure."""
        self.messages = list(messages)
        self._state = self.fingerprint()
        try:
            while True:
                self.step()
        except Interrupt as stop:
            status, message = stop.status, stop.message
        except KeyboardInterrupt:
            status, message = "interrupted", "interrupted by the user"
        return Outcome(status, message, self.usage, self.turn, time.monotonic() - self.started, dict(self.counters))

    def step(self) -> None:
        self.check_caps()
        for event in self.policy.compact(self.messages, self.turn, estimate_context):
            self.save(event)
        reply = self.model.complete(self.messages, self.toolbox.schemas())
        self.turn += 1
        if reply.protocol == "text":
            calls = tuple(dataclasses.replace(c, id=f"call_{self.turn}_{i}") for i, c in enumerate(reply.tool_calls))
            reply = dataclasses.replace(reply, tool_calls=calls)
        self.record_call(reply)
        self.messages.append(assistant_message(reply))
        self.dispatch(reply)

    def check_caps(self) -> None:
        """Deterministic halts, checked before every model call; 0 means off."""
        limits, used = self.config.limits, self.usage
        if limits.max_turns and self.turn >= limits.max_turns:
            raise LimitsExceeded("max_turns_exceeded", f"turn cap reached ({limits.max_turns} model calls)")
        if limits.max_tokens and used.total_tokens >= limits.max_tokens:
            raise LimitsExceeded("budget_exceeded", f"token cap reached ({used.total_tokens} >= {limits.max_tokens})")
        if limits.max_dollars and used.dollars >= limits.max_dollars:
            raise LimitsExceeded("budget_exceeded", f"dollar cap reached (${used.dollars:.4f})")
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise LimitsExceeded("timeout", f"wall-clock cap reached ({limits.timeout_s:g} s)")

    def record_call(self, reply: ModelReply) -> None:
        usage = reply.usage.with_dollars(self.pricer(self.model.name, reply.usage))
        self.usage += usage
        cumulative = {**self.usage.as_dict(), "turns": self.turn}
        self.save(model_call_event(self.turn, self.messages, self.sent, reply, usage, cumulative))
        self.sent = len(self.messages) + 1

    def dispatch(self, reply: ModelReply) -> None:
        done = bool(DONE_RE.search(reply.content))
        if not reply.tool_calls:
            if done:
                self.finish()
                return
            self.malformed_turn(NO_CALL_MESSAGE)
            return
        rejected_before = self.counters["rejected_calls"]
        results = [self.execute(call) for call in reply.tool_calls]
        self.policy.track(len(self.messages), reply.tool_calls, results, reply.protocol == "native")
        self.messages.extend(observation_messages(reply, results))
        for event in self.policy.collapse(self.messages, self.turn):
            self.save(event)
        if self.counters["rejected_calls"] - rejected_before == len(results):
            self.count_malformed()
        else:
            self._malformed_in_a_row = 0
        if done:
            self.finish()

    def finish(self) -> None:
        """DONE ends the run, except once when nothing was read or changed yet."""
        if self.config.refuse_early_done and not self._worked and not self._early_done_refused:
            self._early_done_refused = True
            self.save(gate_event(self.turn, None, GateResult("early_done", False, EARLY_DONE_MESSAGE)))
            self.messages.append({"role": "user", "content": EARLY_DONE_MESSAGE})
            return
        raise Submitted("the model wrote DONE")

    def malformed_turn(self, message: str) -> None:
        self.messages.append({"role": "user", "content": message})
        self.save(gate_event(self.turn, None, GateResult("format", False, message)))
        self.count_malformed()

    def count_malformed(self) -> None:
        self.counters["malformed_turns"] += 1
        self._malformed_in_a_row += 1
        if self._malformed_in_a_row >= self.config.max_malformed_turns:
            raise FormatError(f"{self._malformed_in_a_row} malformed turns in a row")

    def execute(self, call: ToolCall) -> ToolResult:
        """Check, gate and run one call; a rejected call becomes an observation and changes nothing."""
        self.counters["tool_calls"] += 1
        problem = self.toolbox.check(call)
        self.save(tool_call_event(self.turn, call, problem))
        if problem is not None:
            self.counters["rejected_calls"] += 1
            return self.observe(ToolResult(call.id, call.name, f"Rejected: {problem}", ok=False), 0.0)
        key = json.dumps([call.name, call.arguments], sort_keys=True)
        if self._seen.get(key) == self._state:
            return self.refuse(call)
        self._refusals_in_a_row = 0
        started = time.monotonic()
        try:
            run, ok = self.toolbox.run(call), True
        except ToolFailure as failure:
            run, ok = ToolRun(f"Error: {failure}", failure.gates), False
        except Interrupt as stop:  # a tool may end the run (stop-after-green); its observation is kept
            self.observe(ToolResult(call.id, call.name, stop.message, True), time.monotonic() - started)
            raise
        for gate in run.gates:
            self.save(gate_event(self.turn, call.id, gate))
        state = self.fingerprint()
        changed, self._state, self._seen[key] = state != self._state, state, state
        self._worked = self._worked or ok or changed
        return self.observe(ToolResult(call.id, call.name, run.output, ok, changed), time.monotonic() - started)

    def refuse(self, call: ToolCall) -> ToolResult:
        self.counters["refusals"] += 1
        self._refusals_in_a_row += 1
        self.save(gate_event(self.turn, call.id, GateResult("repeat", False, REPEAT_MESSAGE)))
        if self._refusals_in_a_row >= self.config.max_refusals:
            raise LimitsExceeded("looping", f"{self._refusals_in_a_row} refused repeats in a row")
        return self.observe(ToolResult(call.id, call.name, REPEAT_MESSAGE, ok=False), 0.0)

    def observe(self, result: ToolResult, elapsed_s: float) -> ToolResult:
        self.save(tool_result_event(self.turn, result, elapsed_s))
        return result

    def save(self, event: Event) -> None:
        """Append to the trajectory before going on; a failure stops the run with `state_error` (a sink raises it
        itself, or an `OSError` that becomes one)."""
        try:
            self.sink.write(event)
        except OSError as exc:
            raise StateError(f"cannot save the trajectory: {exc}") from exc
