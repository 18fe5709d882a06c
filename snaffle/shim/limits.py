"""Limits enforced from outside the harness: per instance (turns, tokens, dollars, wall-clock) and per run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from snaffle.shim.ledger import Totals
from snaffle.types import Limits


@dataclass(frozen=True)
class Refusal:
    """Why a call is refused; `type` is the exit status the harness maps it to."""

    type: str
    message: str


@dataclass(frozen=True)
class Hold:
    """What calls admitted but not finished may still spend: a turn each, and their worst-case tokens and dollars."""

    turns: int = 0
    tokens: int = 0
    dollars: float = 0.0

    def __add__(self, other: Hold) -> Hold:
        return Hold(self.turns + other.turns, self.tokens + other.tokens, self.dollars + other.dollars)

    def __sub__(self, other: Hold) -> Hold:
        left = Hold(self.turns - other.turns, self.tokens - other.tokens, self.dollars - other.dollars)
        return left if left.turns > 0 else Hold()  # nothing in flight: no float dust left behind


def check(
    limits: Limits,
    totals: Totals,
    *,
    held: Hold = Hold(),
    worst: Hold = Hold(),
    run_dollars: float = 0.0,
    run_max_dollars: float = 0.0,
    started: float | None = None,
    now: float = 0.0,
) -> Refusal | None:
    """The refusal for the next call of an instance, or None to let it through; 0 means off.

    `held` is what the instance's calls in flight may still spend, `run_dollars` what the run's finished calls
    spent plus what its calls in flight may; `worst` is the most this call may spend. A call is refused when the
    finished and held usage reached a limit, or when its worst case does not fit in what is left, so concurrent
    calls cannot overrun a limit between them (as far as the prompt estimate is right and `max_tokens` is obeyed).
    `started` is when the instance's first call arrived (None: this is the first).
    """
    turns = totals.calls + held.turns
    if limits.max_turns and turns >= limits.max_turns:
        return Refusal("max_turns_exceeded", f"{turns} of max {limits.max_turns} turns used")
    dollars = totals.usage.dollars + held.dollars
    refusal = _budget(totals.usage.total_tokens + held.tokens, worst.tokens, limits.max_tokens, _tokens)
    refusal = refusal or _budget(dollars, worst.dollars, limits.max_dollars, _dollars)
    refusal = refusal or _budget(run_dollars, worst.dollars, run_max_dollars, _dollars, " for the run")
    if refusal is not None:
        return refusal
    left = remaining(limits, started, now)
    if left is not None and left <= 0:
        return Refusal("timeout", f"{limits.timeout_s:g} s of wall-clock since the first call have passed")
    return None


def _budget(used: float, worst: float, cap: float, unit: Callable[[float], str], scope: str = "") -> Refusal | None:
    """Refuse when `used` (finished and in flight) reached `cap`, or when this call's `worst` case would pass it."""
    if not cap or (used < cap and used + worst <= cap):
        return None
    if used >= cap:
        return Refusal("budget_exceeded", f"{unit(used)} used or held by calls in flight, of max {unit(cap)}{scope}")
    message = (
        f"this call may use {unit(worst)} (its prompt estimate plus its max_tokens, else the shim's "
        f"--reserve-output-tokens), more than the {unit(cap - used)} left of max {unit(cap)}{scope}: "
        "send a smaller max_tokens or raise the limit"
    )
    return Refusal("budget_exceeded", message)


def _tokens(amount: float) -> str:
    return f"{amount:.0f} tokens"


def _dollars(amount: float) -> str:
    return f"${amount:.6f}"


def remaining(limits: Limits, started: float | None, now: float) -> float | None:
    """Seconds of wall-clock the instance has left (from its first call), or None if unlimited."""
    if not limits.timeout_s:
        return None
    return (now if started is None else started) + limits.timeout_s - now
