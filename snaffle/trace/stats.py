"""The efficiency profile of an attempt, computed from its trajectory the same way for every arm and adapter,
and its aggregate over many attempts."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from snaffle.trace import calls
from snaffle.trace.runs import Run, resolved
from snaffle.types import Event

INCOMPLETE = "incomplete"
"""The status of an attempt whose trajectory has no exit line (still running, or killed)."""


@dataclass(frozen=True)
class AttemptStats:
    """One attempt's profile: counts, tokens, time, dollars, and the facts the failure labels read."""

    instance_id: str
    path: str
    arm: str
    model: str
    status: str
    torn: bool
    resolved: bool | None
    calls: int
    fixed_context: int | None
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int
    prompt_per_call: float
    wall_s: float
    model_s: float
    tool_s: float
    tool_calls: int
    test_runs: int
    test_reruns_unchanged: int
    test_file_edits: int
    rejected_calls: int
    malformed_turns: int
    lint_rejections: int
    collapsed: int
    compactions: int
    changed_calls: int
    patch_lines: int
    dollars: float
    dollars_source: str
    turn_cap: int
    longest_repeat: int
    longest_repeat_call: str
    tested_after_last_change: bool
    refusals: Mapping[str, int] = field(default_factory=dict)
    harness_test_runs: int = 0
    """Test runs the harness made itself (the agentless baseline, reproduction and validation), not the model."""
    pipeline: bool = False
    """An agentless run: stages and samples, not one loop (its labels read samples, not turns)."""
    one_shot: bool = False
    """An agentless run whose samples are one tool-less call each (no turns to have left)."""
    samples: int = 0
    edited_samples: int = 0
    """Samples whose repair applied an edit (a non-empty patch)."""
    valid_samples: int = 0
    """Samples whose patch passed validation."""
    regressions: tuple[str, ...] = ()
    """Tests that passed before and failed with some sample's patch (validation's finding), in first-seen order."""

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "refusals": dict(self.refusals), "regressions": list(self.regressions)}


class _Tally:
    """One pass over the events; each handler is small and only counts."""

    def __init__(self) -> None:
        self.n: Counter[str] = Counter()
        self.refusals: Counter[str] = Counter()
        self.turn_calls: dict[int, list[int]] = {}
        self.repeats: Counter[str] = Counter()
        self.longest = (0, "")
        self.tests_since_change: set[str] = set()
        self.test_ids: set[str] = set()
        self.tested_after_change = False
        self.model_s = self.tool_s = 0.0
        self.last_call: Event = {}
        self.regressions: dict[str, None] = {}

    def handlers(self) -> dict[str, Callable[[Event], None]]:
        return {
            "model_call": self.model_call,
            "tool_call": self.tool_call,
            "tool_result": self.tool_result,
            "gate": self.gate,
            "collapse": lambda e: self.n.update(["collapsed"]),
            "compaction": lambda e: self.n.update(["compactions"]),
            "stage": self.stage,
        }

    def stage(self, event: Event) -> None:
        """Agentless stages: the harness's own test runs, and per sample what repair and validation decided."""
        runs = event.get("test_runs")
        self.n["harness_test_runs"] += runs if isinstance(runs, int) else 0
        if event.get("stage") == "repair":
            self.n["samples"] += 1
            self.n["edited_samples"] += bool(event.get("patch_lines"))
        elif event.get("stage") == "validate":
            self.n["valid_samples"] += event.get("decision") == "valid"
            found = event.get("regressions")
            for test in found if isinstance(found, list) else ():
                self.regressions.setdefault(str(test), None)

    def model_call(self, event: Event) -> None:
        usage = event.get("usage") or {}
        self.n["calls"] += 1
        self.n["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
        self.n["output_tokens"] += int(usage.get("completion_tokens") or 0)
        self.n["cached_tokens"] += int(usage.get("cached_tokens") or 0)
        self.model_s += float(event.get("latency_s") or 0.0)
        self.last_call = event

    def tool_call(self, event: Event) -> None:
        self.n["tool_calls"] += 1
        counts = self.turn_calls.setdefault(int(event.get("turn") or 0), [0, 0])
        counts[0] += 1
        if not event.get("valid", True):
            self.n["rejected_calls"] += 1
            counts[1] += 1
            return
        name, arguments = str(event.get("name")), event.get("arguments") or {}
        key = calls.call_key(name, arguments)
        self.repeats[key] += 1
        if self.repeats[key] > self.longest[0]:
            self.longest = (self.repeats[key], calls.describe(name, arguments))
        if isinstance(arguments, Mapping):
            self.count_test_and_edit(str(event.get("id")), name, arguments)

    def count_test_and_edit(self, call_id: str, name: str, arguments: Mapping[str, Any]) -> None:
        test = calls.key_of_test_run(name, arguments)
        if test is not None:
            self.n["test_runs"] += 1
            self.n["test_reruns_unchanged"] += test in self.tests_since_change
            self.tests_since_change.add(test)
            self.test_ids.add(call_id)
        path = calls.edited_path(name, arguments)
        if path is not None and calls.is_test_path(path):
            self.n["test_file_edits"] += 1

    def tool_result(self, event: Event) -> None:
        self.tool_s += float(event.get("elapsed_s") or 0.0)
        if event.get("changed"):
            self.n["changed_calls"] += 1
            self.repeats.clear()
            self.tests_since_change.clear()
            self.tested_after_change = False
        if event.get("call_id") in self.test_ids and calls.output_passes(str(event.get("output") or "")):
            self.tested_after_change = True

    def gate(self, event: Event) -> None:
        if event.get("ok", True):
            return
        name = str(event.get("gate"))
        self.refusals[name] += 1
        self.n["format_gates"] += name == "format"
        self.n["lint_rejections"] += name == "lint"

    def malformed_turns(self) -> int:
        """Turns with no usable call: no call at all (the `format` gate), or every call rejected."""
        all_rejected = sum(1 for made, rejected in self.turn_calls.values() if made and made == rejected)
        return self.n["format_gates"] + all_rejected


def attempt_stats(run: Run, report: Mapping[str, bool] | None = None) -> AttemptStats:
    """Walk the trajectory once and profile the attempt."""
    tally = _Tally()
    handlers = tally.handlers()
    for event in run.trajectory.events:
        handler = handlers.get(str(event.get("type")))
        if handler is not None:
            handler(event)
    n, header = tally.n, run.header
    dollars, source = _dollars(run, tally.last_call)
    return AttemptStats(
        instance_id=run.instance_id,
        path=str(run.path),
        arm=str(header.get("arm") or run.result.get("arm") or "?"),
        model=str(header.get("model") or run.result.get("model") or "?"),
        status=_status(run),
        torn=run.trajectory.torn,
        resolved=resolved(run, report or {}),
        calls=n["calls"],
        fixed_context=_fixed_context(header),
        prompt_tokens=n["prompt_tokens"],
        output_tokens=n["output_tokens"],
        cached_tokens=n["cached_tokens"],
        prompt_per_call=n["prompt_tokens"] / n["calls"] if n["calls"] else 0.0,
        wall_s=_wall_s(run),
        model_s=round(tally.model_s, 3),
        tool_s=round(tally.tool_s, 3),
        tool_calls=n["tool_calls"],
        test_runs=n["test_runs"],
        test_reruns_unchanged=n["test_reruns_unchanged"],
        test_file_edits=n["test_file_edits"],
        rejected_calls=n["rejected_calls"],
        malformed_turns=tally.malformed_turns(),
        lint_rejections=n["lint_rejections"],
        collapsed=n["collapsed"],
        compactions=n["compactions"],
        changed_calls=n["changed_calls"],
        patch_lines=patch_lines(run.patch),
        dollars=dollars,
        dollars_source=source,
        turn_cap=int((header.get("caps") or {}).get("max_turns") or 0),
        longest_repeat=tally.longest[0],
        longest_repeat_call=tally.longest[1],
        tested_after_last_change=tally.tested_after_change,
        refusals=dict(tally.refusals),
        harness_test_runs=n["harness_test_runs"],
        pipeline=_is_pipeline(run),
        one_shot=bool(((header.get("config") or {}).get("pipeline") or {}).get("one_shot")),
        samples=n["samples"],
        edited_samples=n["edited_samples"],
        valid_samples=n["valid_samples"],
        regressions=tuple(tally.regressions),
    )


def _is_pipeline(run: Run) -> bool:
    """Stages in the trajectory, or a pipeline configuration in its header (agentless)."""
    config = run.header.get("config") or {}
    return isinstance(config.get("pipeline"), Mapping) or any(True for _ in run.trajectory.of_type("stage"))


def _status(run: Run) -> str:
    return str(run.exit.get("status") or run.result.get("exit_status") or INCOMPLETE)


def _fixed_context(header: Event) -> int | None:
    value = header.get("fixed_context_tokens")
    return int(value) if isinstance(value, int | float) else None


def _wall_s(run: Run) -> float:
    """The run's own elapsed time when it finished; otherwise the span of the event stamps."""
    totals = run.exit.get("totals") or run.result.get("totals") or {}
    if isinstance(totals.get("elapsed_s"), int | float):
        return float(totals["elapsed_s"])
    stamps = [float(e["t"]) for e in run.trajectory.events if isinstance(e.get("t"), int | float)]
    return round(stamps[-1] - stamps[0], 3) if stamps else 0.0


def _dollars(run: Run, last_call: Event) -> tuple[float, str]:
    """The shim's figures when present (it is the authority), else the harness's own; source `unknown` when a
    model's price was unknown (recorded as null, never as $0)."""
    for shim in (run.result.get("shim"), last_call.get("shim")):
        if isinstance(shim, Mapping) and isinstance(shim.get("dollars"), int | float):
            return float(shim["dollars"]), "shim"
    totals = run.exit.get("totals") or (last_call.get("cumulative") or {})
    if "dollars" in totals and totals["dollars"] is None:
        return 0.0, "unknown"
    return float(totals.get("dollars") or 0.0), "harness"


def patch_lines(patch: str) -> int:
    """Added plus removed lines of a unified diff."""
    return sum(1 for line in patch.splitlines() if line[:1] in "+-" and line and not line.startswith(("+++ ", "--- ")))


METRICS = (
    "calls",
    "fixed_context",
    "prompt_tokens",
    "prompt_per_call",
    "output_tokens",
    "wall_s",
    "test_runs",
    "harness_test_runs",
    "test_reruns_unchanged",
    "test_file_edits",
    "rejected_calls",
    "malformed_turns",
    "lint_rejections",
    "collapsed",
    "compactions",
    "dollars",
)


@dataclass(frozen=True)
class Metric:
    """Total, mean and median of one metric over attempts (None values left out)."""

    total: float
    mean: float
    median: float


@dataclass(frozen=True)
class Summary:
    """Many attempts aggregated: counts, grading, and each metric's total, mean and median."""

    attempts: int
    complete: int
    graded: int
    resolved: int
    dollars_source: str
    metrics: Mapping[str, Metric]
    statuses: Mapping[str, int]

    @property
    def resolve_rate(self) -> float | None:
        return self.resolved / self.graded if self.graded else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "attempts": self.attempts,
            "complete": self.complete,
            "graded": self.graded,
            "resolved": self.resolved,
            "resolve_rate": self.resolve_rate,
            "dollars_source": self.dollars_source,
            "statuses": dict(self.statuses),
            "metrics": {k: asdict(v) for k, v in self.metrics.items()},
        }


def summarize(stats: Sequence[AttemptStats]) -> Summary:
    """Aggregate attempts; prompt tokens per call is pooled (all prompt tokens over all calls)."""
    metrics = {name: _metric([getattr(s, name) for s in stats]) for name in METRICS}
    total_calls = sum(s.calls for s in stats)
    pooled = sum(s.prompt_tokens for s in stats) / total_calls if total_calls else 0.0
    metrics["prompt_per_call"] = Metric(pooled, pooled, metrics["prompt_per_call"].median)
    sources = {s.dollars_source for s in stats}
    return Summary(
        attempts=len(stats),
        complete=sum(s.status != INCOMPLETE for s in stats),
        graded=sum(s.resolved is not None for s in stats),
        resolved=sum(s.resolved is True for s in stats),
        dollars_source="unknown"
        if "unknown" in sources
        else sources.pop()
        if len(sources) == 1
        else "mixed"
        if sources
        else "harness",
        metrics=metrics,
        statuses=dict(Counter(s.status for s in stats)),
    )


def _metric(values: Sequence[float | int | None]) -> Metric:
    present = [float(v) for v in values if v is not None]
    if not present:
        return Metric(0.0, 0.0, 0.0)
    return Metric(sum(present), statistics.fmean(present), statistics.median(present))
