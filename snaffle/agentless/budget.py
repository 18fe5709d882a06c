"""The run's caps shared by repair samples that run at once: what has been spent, and what each sample may spend.

A starting sample gets an equal part of what is left and not held by the samples still running, so samples that
run together stay within the run's caps (turns, tokens, dollars) as one sample does: each checks its share before
each of its calls, and a call may end past it. The wall-clock cap is one deadline for all. One sample at a time
gets all that is left, as before samples ran together.
"""

from __future__ import annotations

import threading
import time

from snaffle.exceptions import LimitsExceeded
from snaffle.types import Limits, Usage


class Budget:
    """What a run has spent and what its running samples hold; thread-safe."""

    def __init__(self, limits: Limits, deadline: float | None) -> None:
        self.limits, self.deadline = limits, deadline
        self._lock = threading.Lock()
        self._usage, self._turns = Usage(), 0
        self._held, self._running = Limits(), 0

    @property
    def usage(self) -> Usage:
        with self._lock:
            return self._usage

    @property
    def turns(self) -> int:
        with self._lock:
            return self._turns

    def spend(self, usage: Usage, turns: int) -> None:
        """Add what a call or a sample spent."""
        with self._lock:
            self._usage += usage
            self._turns += turns

    def share(self, slots: int, turns_per_sample: int) -> Limits:
        """The caps of one more sample among `slots` running at once; LimitsExceeded when a cap is already reached
        (nothing is left of it beside what the running samples hold). Give it back with `release`."""
        with self._lock:
            free = max(1, slots - self._running)
            share = self._split(free, turns_per_sample)
            self._held = _plus(self._held, share)
            self._running += 1
            return share

    def release(self, share: Limits) -> None:
        """A sample ended (after its spending was added): what it held is free again."""
        with self._lock:
            self._held = _plus(self._held, share, -1)
            self._running -= 1

    def _split(self, free: int, turns_per_sample: int) -> Limits:
        limits, held, used = self.limits, self._held, self._usage
        turns = _left(limits.max_turns, self._turns + held.max_turns, free)
        if turns is not None and turns < 1:
            raise LimitsExceeded("max_turns_exceeded", f"turn cap reached ({limits.max_turns})")
        tokens = _left(limits.max_tokens, used.total_tokens + held.max_tokens, free)
        if tokens is not None and tokens < 1:
            raise LimitsExceeded("budget_exceeded", f"token cap reached ({used.total_tokens} of {limits.max_tokens})")
        dollars = (limits.max_dollars - used.dollars - held.max_dollars) / free if limits.max_dollars else None
        if dollars is not None and dollars <= 0:
            raise LimitsExceeded("budget_exceeded", f"dollar cap reached (${used.dollars:.4f})")
        timeout = self.deadline - time.monotonic() if self.deadline is not None else None
        if timeout is not None and timeout <= 0:
            raise LimitsExceeded("timeout", f"wall-clock cap reached ({limits.timeout_s:g} s)")
        return Limits(
            turns_per_sample if turns is None else min(turns_per_sample, turns),
            tokens or 0,
            dollars or 0.0,
            timeout or 0.0,
        )


def _left(cap: int, spent_or_held: int, free: int) -> int | None:
    """An equal part for each of `free` samples of what is left of `cap` (at least 1 while any is left, so the
    first samples run when there is less than one each); None when the cap is off."""
    if not cap:
        return None
    left = cap - spent_or_held
    return max(1, left // free) if left >= 1 else 0


def _plus(held: Limits, share: Limits, sign: int = 1) -> Limits:
    return Limits(
        held.max_turns + sign * share.max_turns,
        held.max_tokens + sign * share.max_tokens,
        held.max_dollars + sign * share.max_dollars,
        0.0,
    )
