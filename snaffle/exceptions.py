"""The exception family that drives the loop; each instance carries its exit status and observation."""

from __future__ import annotations


class Interrupt(Exception):
    """Base: ends or redirects the loop. `status` is the exit status recorded when it ends the run."""

    status = "interrupted"

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class Submitted(Interrupt):
    """The model declared the task done."""

    status = "submitted"


class LimitsExceeded(Interrupt):
    """A cap was reached before a model call; `status` is set per cap."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


class FormatError(Interrupt):
    """The model's reply could not be turned into valid tool calls; the message goes back to it."""

    status = "malformed_tool_calls"


class GateRejected(Interrupt):
    """A gate refused a change; the message is the observation."""

    status = "gate_rejected"


class ModelError(Interrupt):
    """The model endpoint failed after retries, or refused permanently."""

    status = "model_error"


class StateError(Interrupt):
    """The trajectory could not be saved."""

    status = "state_error"


class UserError(Exception):
    """Bad input from the user: one line that names the fix; the CLI exits non-zero."""
