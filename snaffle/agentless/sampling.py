"""How many repair samples to draw: stop once one is validated, draw more while none is and something can tell.

The fixed plan draws `samples` and validates them together. The adaptive plan validates each batch (as many samples
as run at once) before drawing the next: with `early_stop` it draws no more once the selected candidate is
`validated` (a test or snippet shows the fix: on the A/B bench that status has been right every time), and with
`extra_samples` it goes on past `samples`, up to `max_samples`, while no candidate is validated and the run has
evidence that could validate one (the given failing test, a kept reproduction test, a reproducing snippet, or
related tests that fail on the original). A sample it cannot start within the caps ends the extra draws, not the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from snaffle.agentless.validate import CandidatePatch, ending, select


@dataclass(frozen=True)
class SamplingPlan:
    """The sampling switches of a run: the base count, the ceiling, the batch and the two rules."""

    samples: int
    max_samples: int
    batch: int
    early_stop: bool
    extra_samples: bool

    @property
    def adaptive(self) -> bool:
        """Whether batches are validated before the next is drawn (else every sample, then validation)."""
        return self.early_stop or self.extra_samples

    def ceiling(self, can_validate: bool) -> int:
        """How many samples may be drawn in all."""
        return max(self.samples, self.max_samples) if self.extra_samples and can_validate else self.samples

    def next_batch(self, candidates: Sequence[CandidatePatch], can_validate: bool) -> range | None:
        """The sample numbers to draw next, or None: enough (a validated candidate, with `early_stop` or once
        `samples` are drawn; or the ceiling reached)."""
        drawn, fixed = len(candidates), validated_choice(candidates) is not None
        if fixed and (self.early_stop or drawn >= self.samples):
            return None
        ceiling = self.samples if fixed else self.ceiling(can_validate)
        if drawn >= ceiling:
            return None
        return range(drawn, min(drawn + max(1, self.batch), ceiling))

    def decision(self, candidates: Sequence[CandidatePatch], can_validate: bool, capped: str = "") -> str:
        """The `sampling` stage's one line: how many were drawn of how many, and why it stopped."""
        drawn, ceiling = len(candidates), self.ceiling(can_validate)
        if capped:
            return f"{drawn} of {ceiling} samples: {capped}"
        chosen = validated_choice(candidates)
        if chosen is not None:
            return f"{drawn} of {ceiling} samples: sample {chosen.sample} is validated"
        why = "no sample is validated" if can_validate else "nothing could validate more"
        return f"{drawn} of {ceiling} samples: {why}"


def validated_choice(candidates: Sequence[CandidatePatch]) -> CandidatePatch | None:
    """The candidate selection would choose, if it is `validated` (a test or snippet shows the fix)."""
    chosen = select(candidates)
    return chosen if ending(chosen, len(candidates), veto=True).status == "validated" else None
