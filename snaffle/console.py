"""What `snaffle solve` shows while it works and when it ends, drawn from the run's trajectory events: a line per
stage, sample and model call (plain when piped, with a live status below on a terminal), then a summary."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.syntax import Syntax
from rich.text import Text

from snaffle.types import Event

MODES = ("live", "lines", "quiet", "json")
"""How `solve` reports: a live status and lines (a terminal), lines (piped), nothing, or one JSON line at the end."""
DIFF_LINES_SHOWN = 60
"""A longer patch is not printed in the summary, only where it is."""
ARGUMENTS_SHOWN = 100
CANDIDATES_SHOWN = 3
NEXT_PHASE = {
    "localize": "tests before",
    "regression_baseline": "repair",
    "reproduce": "repair",
    "repair": "repair",
    "validate": "validate",
    "select": "finishing",
}
"""What the agentless pipeline does after each stage line (the status names the work under way)."""


def choose_mode(quiet: bool, as_json: bool, is_terminal: bool) -> str:
    """`--json` wins over `--quiet`; otherwise a terminal gets the live status and anything else plain lines."""
    if as_json:
        return "json"
    if quiet:
        return "quiet"
    return "live" if is_terminal else "lines"


@dataclass
class RunState:
    """What a run's events said so far: caps, phase, sample and turn, calls and tokens, the stages' decisions."""

    started: float
    caps: Mapping[str, Any] = field(default_factory=dict)
    pipeline: bool = False
    samples: int = 0
    phase: str = "starting"
    sample: int | None = None
    turn: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    dollars: float | None = 0.0
    stages: dict[str, Event] = field(default_factory=dict)
    validations: dict[int, Event] = field(default_factory=dict)

    def update(self, event: Event) -> None:
        kind = event.get("type")
        if kind == "header":
            self.caps = event.get("caps") or {}
            pipeline = (event.get("config") or {}).get("pipeline")
            self.pipeline = isinstance(pipeline, Mapping)
            self.samples = int(pipeline.get("samples", 0)) if isinstance(pipeline, Mapping) else 0
            self.phase = "localize" if pipeline else "loop"
        elif kind == "model_call":
            self.count_call(event)
        elif kind == "stage":
            self.stages[str(event.get("stage"))] = event
            if event.get("stage") == "validate" and isinstance(event.get("sample"), int):
                self.validations[event["sample"]] = event
            self.phase = NEXT_PHASE.get(str(event.get("stage")), self.phase)
            if event.get("stage") == "repair" and int(event.get("sample") or 0) + 1 >= self.samples:
                self.phase = "validate"  # validation starts once the last sample is repaired
        elif kind == "exit":
            self.phase = "done"

    def count_call(self, event: Event) -> None:
        usage = event.get("usage") or {}
        self.calls += 1
        self.turn = int(event.get("turn") or 0)
        self.sample = event.get("sample") if isinstance(event.get("sample"), int) else None
        self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.completion_tokens += int(usage.get("completion_tokens") or 0)
        priced = usage.get("dollars")
        self.dollars = None if self.dollars is None or priced is None else self.dollars + float(priced)

    def caps_left(self, now: float) -> str:
        """What is left of each cap that is on (0 = off): turns, tokens, dollars, time."""
        caps, left = self.caps, []
        if caps.get("max_turns"):
            left.append(f"{max(0, int(caps['max_turns']) - self.calls)} turns")
        if caps.get("max_tokens"):
            left.append(f"{max(0, int(caps['max_tokens']) - self.prompt_tokens - self.completion_tokens):,} tokens")
        if caps.get("max_dollars") and self.dollars is not None:
            left.append(f"${max(0.0, float(caps['max_dollars']) - self.dollars):.4f}")
        if caps.get("timeout_s"):
            left.append(f"{max(0.0, float(caps['timeout_s']) - (now - self.started)):.0f}s")
        return ", ".join(left) or "no caps"

    def status(self, now: float) -> str:
        """The live status line: phase, sample, turn, tokens, dollars, elapsed, caps left."""
        parts = [self.phase]
        if self.sample is not None and self.sample >= 0:
            parts.append(f"sample {self.sample} of {self.samples}" if self.samples else f"sample {self.sample}")
        parts += [
            f"turn {self.turn}",
            f"{self.prompt_tokens + self.completion_tokens:,} tokens",
            money(self.dollars),
            f"{now - self.started:.0f}s",
            f"left: {self.caps_left(now)}",
        ]
        return " · ".join(parts)


def money(dollars: float | None) -> str:
    return "$ unknown" if dollars is None else f"${dollars:.4f}"


def call_line(event: Event) -> str:
    """One model call: where it was made (the reproduction call, a sample's turn), its tokens and seconds."""
    usage = event.get("usage") or {}
    if event.get("stage"):
        where = f"{event['stage']} call {event.get('turn')}"
    else:
        sample = f"sample {event['sample']} " if isinstance(event.get("sample"), int) else ""
        where = f"{sample}turn {event.get('turn')}"
    return (
        f"{where}: {usage.get('prompt_tokens', 0)} prompt + "
        f"{usage.get('completion_tokens', 0)} output tokens, {float(event.get('latency_s') or 0):.1f}s"
    )


def event_line(event: Event) -> str | None:
    """The progress line of one event (None: the event gets no line of its own)."""
    kind = event.get("type")
    if kind == "header":
        task = event.get("task") or {}
        return f"solve {task.get('instance_id')}: arm {event.get('arm')}, model {event.get('model')}"
    if kind == "stage":
        return stage_line(event)
    if kind == "model_call":
        return call_line(event)
    if kind == "tool_call":
        return f"  {event.get('name')} {str(event.get('arguments'))[:ARGUMENTS_SHOWN]}"
    if kind == "retry":
        return f"  retry {event.get('attempt')}: {event.get('error')} (waiting {event.get('wait_s')}s)"
    return None


def stage_line(event: Event) -> str:
    stage, decision = event.get("stage"), event.get("decision")
    if stage == "localize":
        candidates = list(event.get("candidates") or [])
        shown = ", ".join(candidates[:CANDIDATES_SHOWN]) + (" …" if len(candidates) > CANDIDATES_SHOWN else "")
        return f"localize: {decision}" + (f" ({shown})" if shown else "")
    if stage == "regression_baseline":
        return f"tests before: {decision}"
    if stage == "repair":
        lines = event.get("patch_lines")
        return f"sample {event.get('sample')}: {decision}" + (f", {lines} changed lines" if lines is not None else "")
    if stage == "validate":
        return f"sample {event.get('sample')} validation: {decision} ({validation_facts(event)})"
    return f"{stage}: {decision}"


def validation_facts(event: Event) -> str:
    """What a sample's validation found: regressions, the failing test, the reproduction, newly passing tests."""
    regressions = list(event.get("regressions") or [])
    facts = [f"{len(regressions)} regressions" + (f": {', '.join(regressions[:3])}" if regressions else "")]
    verdicts = {True: "passes", False: "fails", None: None}
    for key, name in (("fixes_failing", "the failing test"), ("reproduces", "the reproduction test")):
        verdict = verdicts.get(event.get(key))
        if verdict:
            facts.append(f"{name} {verdict}")
    if event.get("fixed"):
        facts.append(f"{event['fixed']} newly passing")
    return "; ".join(facts)


class Progress:
    """The observer `solve` hands its trajectory writer: a line per event worth one, and on a terminal a live
    status under them (phase, sample, turn, tokens, dollars, elapsed, caps left)."""

    def __init__(self, mode: str, stream: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self.mode, self.clock = mode, clock
        self.console = Console(file=stream, force_terminal=mode == "live", highlight=False, soft_wrap=True)
        self.state = RunState(clock())
        self.spinner = Spinner("dots")

    def __call__(self, event: Event) -> None:
        self.state.update(event)
        line = event_line(event) if self.mode in ("live", "lines") else None
        if line is not None:
            self.console.print(Text(f"[{self.clock() - self.state.started:6.1f}s] {line}"))

    def status(self) -> Spinner:
        self.spinner.update(text=Text(self.state.status(self.clock()), style="bold"))
        return self.spinner

    @contextmanager
    def live(self) -> Iterator[None]:
        """Show the live status while the block runs (only in `live` mode); it is gone when the block ends."""
        if self.mode != "live":
            yield
            return
        with Live(get_renderable=self.status, console=self.console, refresh_per_second=4, transient=True):
            yield

    def summary(self, result: Mapping[str, Any], run_dir: Path, patch: str) -> None:
        """The end of the run: exit status and why, the diff, tests, calls, tokens, dollars, time, where things are."""
        if self.mode not in ("live", "lines"):
            return
        console = self.console
        console.print()
        console.print(Text(f"exit status: {result.get('exit_status')} — {result.get('message')}", style="bold"))
        console.print(Text(patch_heading(patch, run_dir)))
        if patch.strip() and len(patch.splitlines()) <= DIFF_LINES_SHOWN:
            console.print(Syntax(patch, "diff", theme="ansi_dark") if self.mode == "live" else Text(patch.rstrip()))
        for line in (*tests_lines(self.state), usage_line(result, self.state), *where_lines(run_dir)):
            console.print(Text(line))


def patch_heading(patch: str, run_dir: Path) -> str:
    if not patch.strip():
        return "patch: none (the repository is unchanged)"
    changed = sum(1 for line in patch.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---"))
    return f"patch: {changed} changed lines, in {run_dir / 'patch.diff'}"


def tests_lines(state: RunState) -> list[str]:
    """Tests before (the regression baseline) and after (the selected sample's validation)."""
    before = state.stages.get("regression_baseline")
    if before is None and state.pipeline:
        return ["tests: not run (the run ended before its regression baseline)"]
    if before is None:
        return ["tests: this arm runs no tests of its own (the model's test runs are in the trajectory)"]
    lines = [f"tests before: {before.get('decision')}"]
    select = state.stages.get("select") or {}
    decision = str(select.get("decision") or "")
    chosen = int(decision.split()[-1]) if decision.startswith("sample ") and decision.split()[-1].isdigit() else None
    if chosen is not None and chosen in state.validations:
        lines.append(f"tests after: {validation_facts(state.validations[chosen])} (sample {chosen})")
    else:
        lines.append(f"tests after: no sample passed validation ({len(state.validations)} validated)")
    return lines


def usage_line(result: Mapping[str, Any], state: RunState) -> str:
    """Model calls, tokens and dollars (the metering shim's figures when it metered the run), and wall time."""
    totals = result.get("totals") or {}
    shim = result.get("shim") or {}
    metered = "calls" in shim
    figures = shim if metered else totals
    calls = shim["calls"] if metered else state.calls
    dollars = figures.get("dollars")
    return (
        f"model calls {calls} · tokens {int(figures.get('prompt_tokens') or 0):,} prompt + "
        f"{int(figures.get('completion_tokens') or 0):,} output · cost {money(dollars)} · "
        f"wall time {float(totals.get('elapsed_s') or 0):.1f}s" + (" (metered by the shim)" if metered else "")
    )


def where_lines(run_dir: Path) -> Sequence[str]:
    run = run_dir.resolve()
    return (
        f"run dir: {run} (trajectory.jsonl, patch.diff, result.json)",
        f"report: snaffle trace html {run} -o {run / 'report.html'}",
    )
