"""Limits enforced from outside the harness: per instance (turns, tokens, dollars, wall-clock) and per run."""

from __future__ import annotations

from dataclasses import dataclass

from snaffle.shim.ledger import Totals
from snaffle.types import Limits


@dataclass(frozen=True)
class Refusal:
    """Why a call is refused; `type` is the exit status the harness maps it to."""

    type: str
    message: str


def check(
    limits: Limits,
    totals: Totals,
    *,
    reserved: int = 0,
    run_dollars: float = 0.0,
    run_max_dollars: float = 0.0,
    started: float | None = None,
    now: float = 0.0,
) -> Refusal | None:
    """The refusal for the next call of an instance, or None to let it through; 0 means off.

    `reserved` counts the instance's calls admitted but not finished, so concurrent calls cannot overrun
    `max_turns`; tokens and dollars are checked against finished calls only (they are known afterwards).
    `started` is when the instance's first call arrived (None: this is the first).
    """
    turns = totals.calls + reserved
    if limits.max_turns and turns >= limits.max_turns:
        return Refusal("max_turns_exceeded", f"{turns} of max {limits.max_turns} turns used")
    if limits.max_tokens and totals.usage.total_tokens >= limits.max_tokens:
        return Refusal("budget_exceeded", f"{totals.usage.total_tokens} of max {limits.max_tokens} tokens used")
    if limits.max_dollars and totals.usage.dollars >= limits.max_dollars:
        return Refusal("budget_exceeded", f"${totals.usage.dollars:.4f} of max ${limits.max_dollars:.4f} spent")
    if run_max_dollars and run_dollars >= run_max_dollars:
        return Refusal("budget_exceeded", f"the run spent ${run_dollars:.4f} of its max ${run_max_dollars:.4f}")
    left = remaining(limits, started, now)
    if left is not None and left <= 0:
        return Refusal("timeout", f"{limits.timeout_s:g} s of wall-clock since the first call have passed")
    return None


def remaining(limits: Limits, started: float | None, now: float) -> float | None:
    """Seconds of wall-clock the instance has left (from its first call), or None if unlimited."""
    if not limits.timeout_s:
        return None
    return (now if started is None else started) + limits.timeout_s - now
