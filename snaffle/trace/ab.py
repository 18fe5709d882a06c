"""`snaffle ab`: two runs side by side (the comparison table), head-to-head on instances graded in both, and a
paired bootstrap confidence interval on the resolve-rate difference."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from snaffle.trace.analysis import Analysis
from snaffle.trace.labels import LABELS
from snaffle.trace.stats import Summary, summarize

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95


@dataclass(frozen=True)
class HeadToHead:
    """Instances graded on both sides, by who resolved them; and instances only one side attempted."""

    both: int
    only_a: int
    only_b: int
    neither: int
    not_in_b: int
    not_in_a: int


@dataclass(frozen=True)
class Interval:
    """A point estimate with a bootstrap confidence interval, over `n` paired instances."""

    estimate: float
    low: float
    high: float
    n: int
    confidence: float = CONFIDENCE


@dataclass(frozen=True)
class Comparison:
    """Run A against run B."""

    names: tuple[str, str]
    summaries: tuple[Summary, Summary]
    labels: tuple[Mapping[str, int], Mapping[str, int]]
    head_to_head: HeadToHead | None
    difference: Interval | None

    def as_dict(self) -> dict[str, Any]:
        sides = zip(self.names, self.summaries, self.labels, strict=True)
        return {
            "runs": {name: {**s.as_dict(), "labels": dict(lab)} for name, s, lab in sides},
            "head_to_head": asdict(self.head_to_head) if self.head_to_head else None,
            "resolve_rate_difference": asdict(self.difference) if self.difference else None,
        }


def compare(a: Sequence[Analysis], b: Sequence[Analysis], names: tuple[str, str] = ("A", "B")) -> Comparison:
    """The table's figures for both sides, head-to-head and the interval (both None when nothing is graded)."""
    outcome_a, outcome_b = _outcomes(a), _outcomes(b)
    common = sorted(set(outcome_a) & set(outcome_b))
    pairs = [(outcome_a[i], outcome_b[i]) for i in common]
    head = None
    if outcome_a or outcome_b:
        counts = Counter(pairs)
        head = HeadToHead(
            counts[True, True],
            counts[True, False],
            counts[False, True],
            counts[False, False],
            len(set(outcome_a) - set(outcome_b)),
            len(set(outcome_b) - set(outcome_a)),
        )
    return Comparison(
        names=names,
        summaries=(summarize([x.stats for x in a]), summarize([x.stats for x in b])),
        labels=(_label_counts(a), _label_counts(b)),
        head_to_head=head,
        difference=bootstrap_difference(pairs) if pairs else None,
    )


def _outcomes(analyses: Sequence[Analysis]) -> dict[str, bool]:
    """Graded instances -> resolved (several attempts at one instance: resolved if any was)."""
    outcomes: dict[str, bool] = {}
    for x in analyses:
        if x.stats.resolved is not None:
            outcomes[x.stats.instance_id] = outcomes.get(x.stats.instance_id, False) or x.stats.resolved
    return outcomes


def _label_counts(analyses: Sequence[Analysis]) -> dict[str, int]:
    counts = Counter(label.name for x in analyses for label in x.labels)
    return {name: counts[name] for name in LABELS}


def bootstrap_difference(
    pairs: Sequence[tuple[bool, bool]], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> Interval:
    """Resolve rate of A minus B over paired instances; percentile interval from resampling the instances."""
    diffs = [int(x) - int(y) for x, y in pairs]
    n = len(diffs)
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    tail = (1 - CONFIDENCE) / 2
    low = means[int(tail * (resamples - 1))]
    high = means[int(round((1 - tail) * (resamples - 1)))]
    return Interval(sum(diffs) / n, low, high, n)


def _money(value: float) -> str:
    return f"${value:.4f}" if value < 10 else f"${value:,.2f}"


def _resolved_cell(s: Summary) -> str:
    if not s.graded:
        return "not graded"
    return f"{s.resolved}/{s.graded} ({100 * (s.resolve_rate or 0):.1f}%)"


def _per_resolved(s: Summary) -> str:
    return _money(s.metrics["dollars"].total / s.resolved) if s.resolved else "—"


def _side_rows(s: Summary, labels: Mapping[str, int]) -> list[str]:
    m = s.metrics
    cells = [
        f"{s.attempts} ({s.complete} finished)",
        _resolved_cell(s),
        _per_resolved(s),
        f"{_money(m['dollars'].mean)} ({s.dollars_source})",
        f"{m['wall_s'].median:.1f}",
        f"{m['calls'].median:g}",
        f"{m['fixed_context'].median:.0f}",
        f"{m['prompt_per_call'].mean:.0f}",
        f"{m['output_tokens'].mean:.0f}",
        f"{m['test_runs'].mean:.2f}",
        f"{m['test_reruns_unchanged'].mean:.2f} ({m['test_reruns_unchanged'].total:g} in all)",
        f"{m['test_file_edits'].mean:.2f} ({m['test_file_edits'].total:g} in all)",
        f"{m['rejected_calls'].mean:.2f}",
        f"{m['malformed_turns'].mean:.2f}",
    ]
    return cells + [_share(labels[name], s.attempts) for name in LABELS]


def _share(count: int, attempts: int) -> str:
    return f"{count} ({100 * count / attempts:.0f}%)" if attempts else str(count)


ROW_NAMES = (
    "attempts",
    "resolved",
    "cost per resolved",
    "cost per attempt",
    "agent time median (s)",
    "calls median",
    "fixed context (tokens)",
    "prompt tokens per call",
    "output tokens (mean)",
    "test runs (mean)",
    "re-runs, nothing changed (mean)",
    "test-file edits (mean)",
    "rejected calls (mean)",
    "malformed turns (mean)",
    *(f"label: {name}" for name in LABELS),
)


def table_rows(c: Comparison) -> list[tuple[str, str, str]]:
    """(metric, A, B) rows of the side-by-side table."""
    a, b = (_side_rows(s, lab) for s, lab in zip(c.summaries, c.labels, strict=True))
    return list(zip(ROW_NAMES, a, b, strict=True))


def verdict_lines(c: Comparison) -> list[str]:
    """Head-to-head and the interval, as sentences."""
    if c.head_to_head is None:
        return ["Not graded: pass --report (a SWE-bench report) for resolved rates and head-to-head."]
    h, (a, b) = c.head_to_head, c.names
    lines = [
        f"Head-to-head on {h.both + h.only_a + h.only_b + h.neither} instances graded in both: "
        f"resolved by both {h.both}, only {a} {h.only_a}, only {b} {h.only_b}, neither {h.neither}."
    ]
    if h.not_in_a or h.not_in_b:
        lines.append(f"Graded in {a} only: {h.not_in_b}; in {b} only: {h.not_in_a} (left out of the pairing).")
    if c.difference is not None:
        d = c.difference
        lines.append(
            f"Resolve-rate difference {a} − {b}: {100 * d.estimate:+.1f} points, "
            f"{100 * d.confidence:.0f}% bootstrap CI [{100 * d.low:+.1f}, {100 * d.high:+.1f}] "
            f"(paired, {d.n} instances, {BOOTSTRAP_RESAMPLES} resamples)."
        )
    return lines


def markdown(c: Comparison) -> str:
    """The table and the verdict as Markdown."""
    a, b = c.names
    out = [f"| metric | {a} | {b} |", "|---|---|---|"]
    out += [f"| {metric} | {x} | {y} |" for metric, x, y in table_rows(c)]
    return "\n".join([*out, "", *verdict_lines(c)]) + "\n"
