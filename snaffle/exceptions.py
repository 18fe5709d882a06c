"""The exception family that drives the loop (each carries its exit status and observation), the user's errors,
and a tool's failure (its message is the observation)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from snaffle.types import GateResult


class Interrupt(Exception):
    """Base of the family, never raised itself: caught by the loop, the agentless pipeline and the one-shot repair,
    which end the run with its `status` and `message`."""

    status = "interrupted"

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class Submitted(Interrupt):
    """Raised by the loop when the model writes DONE (past the one early-DONE refusal), and by the repair's
    stop-after-green `run_test` when the known failing test passes after an accepted edit."""

    status = "submitted"


class LimitsExceeded(Interrupt):
    """Raised with `status` naming the limit: before a model call when a cap is reached (`max_turns_exceeded`,
    `budget_exceeded`, `timeout`; the loop, and the pipeline before a sample); by the loop after too many refused
    repeats in a row (`looping`); by the model client when the wall clock runs out while it waits or retries
    (`timeout`) or the metering shim refuses a call on one of its caps (the shim's status)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


class FormatError(Interrupt):
    """Raised by the loop after `max_malformed_turns` malformed turns in a row (no tool call and no DONE, or every
    call rejected); it ends the run (each malformed turn before it got a message back)."""

    status = "malformed_tool_calls"


class ModelError(Interrupt):
    """Raised by the model client when the endpoint still fails after its retries, or answers an HTTP error that
    is not retried."""

    status = "model_error"


class StateError(Interrupt):
    """Raised when the trajectory cannot be opened or a line cannot be appended to it (by the writer, or by the loop
    when its sink fails with an `OSError`)."""

    status = "state_error"


class UserError(Exception):
    """Raised when the user's input or setup is wrong (arguments, files, endpoint, a missing extra): one line that
    names the fix; the CLI exits non-zero."""


class EndpointError(UserError):
    """Raised by the start-up check of the model endpoint when nothing accepts a connection there (refused, or its
    name does not resolve) or it answers something that is not an OpenAI-compatible API; the CLI exits 3."""


class ToolFailure(Exception):
    """A tool could not do what was asked; the message is the observation (the repo is unchanged), `gates` the
    gate decisions taken before it gave up."""

    def __init__(self, message: str, gates: tuple[GateResult, ...] = ()) -> None:
        super().__init__(message)
        self.gates = gates
