"""`snaffle trace show`: a trajectory turn by turn in the terminal, observations windowed, reasoning folded;
`--follow` renders a file still being written as its lines arrive."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console, RenderableType
from rich.rule import Rule
from rich.text import Text

from snaffle.exceptions import UserError
from snaffle.trace.calls import describe
from snaffle.trace.schema import event_problem
from snaffle.types import Event

WINDOW_HEAD = 12
WINDOW_TAIL = 6
CONTENT_LINES = 30
LINE_CHARS = 400
FOLLOW_POLL_S = 0.2


@dataclass(frozen=True)
class ShowOptions:
    """What to render: every turn or one (of one agentless sample, or of one stage), observations windowed or not."""

    full: bool = False
    turn: int | None = None
    sample: int | None = None
    stage: str | None = None


def window(text: str, full: bool, head: int = WINDOW_HEAD, tail: int = WINDOW_TAIL) -> str:
    """The first `head` and last `tail` lines (each cut to LINE_CHARS), with the number left out; all when `full`."""
    lines = text.splitlines()
    if full:
        return text
    lines = [line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + " …" for line in lines]
    if len(lines) <= head + tail + 1:
        return "\n".join(lines)
    hidden = len(lines) - head - tail
    return "\n".join([*lines[:head], f"… {hidden} lines hidden (--full shows all) …", *lines[-tail:]])


def _indented(text: str, prefix: str = "    │ ", style: str = "dim") -> Text:
    return Text("\n".join(prefix + line for line in text.splitlines()) or prefix, style=style)


def fixed_context_text(e: Event) -> str:
    """`fixed context 56 tokens (reproduce 56, repair 61)`: what every call paid, per kind of call when they differ."""
    fixed = e.get("fixed_context_tokens")
    parts = e.get("fixed_context") or {}
    shown = "unknown" if fixed is None else f"{fixed} tokens"
    detail = ", ".join(f"{k} {v}" for k, v in parts.items()) if isinstance(parts, dict) else ""
    return f"fixed context {shown}" + (f" ({detail})" if detail else "")


def _header(e: Event, o: ShowOptions) -> list[RenderableType]:
    task, caps = e.get("task") or {}, e.get("caps") or {}
    capped = ", ".join(f"{k} {v}" for k, v in caps.items() if v) or "none"
    meta = (
        f"instance {task.get('instance_id', '?')} · arm {e.get('arm', '?')} · model {e.get('model', '?')} · "
        f"caps: {capped} · {fixed_context_text(e)}"
    )
    python = e.get("interpreter") or {}
    if python:
        meta += f" · python {python.get('version', '?')} {python.get('path', '?')} ({python.get('chosen', '?')})"
    issue = str(task.get("issue") or "").strip()  # the one place the issue is printed: every prompt repeats it
    return [Rule(f"{e.get('format', 'trajectory')}"), Text(meta, style="bold"), _indented(issue, "  > ")]


def call_title(e: Event) -> str:
    """How a model call is addressed: `sample 1 · turn 2`, `reproduce · call 1`, or `turn 3` in a loop arm."""
    if e.get("stage"):
        return f"{e.get('stage')} · call {e.get('turn', '?')}"
    if e.get("sample") is not None:
        return f"sample {e.get('sample')} · turn {e.get('turn', '?')}"
    return f"turn {e.get('turn', '?')}"


def _model_call(e: Event, o: ShowOptions) -> list[RenderableType]:
    usage, cumulative = e.get("usage") or {}, e.get("cumulative") or {}
    response = e.get("response") or {}
    meta = (
        f"prompt {usage.get('prompt_tokens', 0)} tok (est {e.get('prompt_estimate', '?')}) · "
        f"cached {usage.get('cached_tokens', 0)} · out {usage.get('completion_tokens', 0)} · "
        f"${(usage.get('dollars') or 0):.6f} · {(e.get('latency_s') or 0):.2f} s · cumulative "
        f"{cumulative.get('prompt_tokens', 0)} in / {cumulative.get('completion_tokens', 0)} out "
        f"${(cumulative.get('dollars') or 0):.6f}"
    )
    parts: list[RenderableType] = [Rule(call_title(e), style="blue"), Text(meta, style="dim")]
    reasoning = str(response.get("reasoning_content") or "")
    if reasoning and o.full:
        parts.append(_indented(reasoning, "  ⋮ ", "italic dim"))
    elif reasoning:
        folded = f"  ▸ reasoning folded: {len(reasoning)} chars, {len(reasoning.splitlines())} lines (--full unfolds)"
        parts.append(Text(folded, style="italic dim"))
    content = str(response.get("content") or "").strip()
    if content:
        parts.append(_indented(window(content, o.full, CONTENT_LINES, 0), "  ", "default"))
    return parts


def _tool_call(e: Event, o: ShowOptions) -> list[RenderableType]:
    name, arguments = str(e.get("name")), e.get("arguments")
    if not e.get("valid", True):
        return [Text(f"  ✗ {describe(name, arguments)}  rejected: {e.get('error')}", style="red")]
    line = Text(f"  → {describe(name, arguments, 160)}", style="cyan")
    if o.full and isinstance(arguments, dict) and set(arguments) - {"command"}:
        return [line, _indented(json.dumps(arguments, indent=2), "    ", "cyan dim")]
    return [line]


def _gate(e: Event, o: ShowOptions) -> list[RenderableType]:
    if e.get("ok"):
        return [Text(f"    ✓ gate {e.get('gate')} passed", style="green")]
    return [Text(f"    ⛔ gate {e.get('gate')}: {e.get('reason', '')}", style="magenta")]


def _tool_result(e: Event, o: ShowOptions) -> list[RenderableType]:
    output = str(e.get("output") or "")
    elapsed = e.get("elapsed_s") or 0
    flags = ["ok" if e.get("ok") else "failed", f"{elapsed:.2f} s", f"{len(output.splitlines())} lines"]
    if e.get("changed"):
        flags.append("changed the repo")
    head = Text(f"    ← {' · '.join(flags)}", style="green" if e.get("ok") else "yellow")
    return [head, _indented(window(output, o.full))]


def _exit(e: Event, o: ShowOptions) -> list[RenderableType]:
    totals = e.get("totals") or {}
    numbers = " · ".join(f"{k} {v}" for k, v in totals.items())
    return [
        Rule("exit", style="bold"),
        Text(f"{e.get('status')}: {e.get('message', '')}", style="bold"),
        Text(numbers, style="dim"),
    ]


def _other(e: Event, o: ShowOptions) -> list[RenderableType]:
    kind = str(e.get("type"))
    fields = {k: v for k, v in e.items() if k not in ("type", "seq", "t")}
    if kind == "retry":
        return [Text(f"  ↻ retry {e.get('attempt')}: {e.get('error')} (waiting {e.get('wait_s')} s)", style="yellow")]
    if kind == "collapse":
        return [Text(f"    ⇢ collapsed {e.get('call_id')}: {e.get('label')}", style="dim")]
    if kind == "compaction":
        sizes = f"{e.get('before_tokens')} → {e.get('after_tokens')} tokens"
        return [
            Text(f"  ⇣ compaction before turn {e.get('turn')}: {sizes}", style="yellow"),
            _indented(window(str(e.get("summary") or ""), o.full)),
        ]
    if kind == "stage" and e.get("stage") == "regression_baseline" and "collected" in e:
        return [_baseline(e)]
    if kind == "stage" and e.get("stage") == "issue_facts":
        return _issue_facts(e, o)
    if kind == "stage":
        return [Text(window(stage_text(e), o.full), style="bold yellow")]
    return [Text(f"  ? {kind}: {window(json.dumps(fields, default=str), o.full)}", style="dim")]


STAGE_HIDDEN = frozenset({"type", "seq", "t", "stage", "decision", "sample", "usage"})
"""Fields a stage line does not repeat (its usage is on the model call it made)."""


def stage_text(e: Event) -> str:
    """`■ stage validate (sample 0): invalid · regressions tests.t::test_mul · test runs 2`."""
    where = f" (sample {e['sample']})" if e.get("sample") is not None else ""
    rest = [f"{k.replace('_', ' ')} {_value(v)}" for k, v in e.items() if k not in STAGE_HIDDEN]
    return f"■ stage {e.get('stage')}{where}: {e.get('decision', '')}" + "".join(f" · {r}" for r in rest)


def _value(value: object) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    if isinstance(value, str) and "\n" in value:
        return "\n" + value
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _baseline(e: Event) -> Text:
    """The baseline's decision with its counts; red when no related test could run (validation is blind)."""
    tally = ", ".join(f"{e.get(k, 0)} {k}" for k in ("collected", "passed", "failed", "errored"))
    decision = str(e.get("decision", ""))
    blind = decision.startswith("no working tests")
    return Text(
        f"■ stage regression_baseline: {decision} ({tally}; python {e.get('python', '?')})",
        style="bold red" if blind else "bold yellow",
    )


def _issue_facts(e: Event, o: ShowOptions) -> list[RenderableType]:
    """The issue's snippets: one line each, what it did on the original tree, and whether that reproduces it."""
    shown: list[RenderableType] = [Text(f"■ stage issue_facts: {e.get('decision', '')}", style="bold yellow")]
    for row in e.get("snippets") or []:
        frame = f" at {row['repo_frames'][-1]}" if row.get("repo_frames") else ""
        reproduces = f" — reproduces ({row['reproduces']})" if row.get("reproduces") else ""
        added = f" [added: {'; '.join(row['imports_added'])}]" if row.get("imports_added") else ""
        text = f"    snippet {row.get('snippet')} ({row.get('kind')}, {row.get('lines')} lines){added}: "
        text += f"{row.get('did')}{frame}"
        shown.append(Text(window(text + reproduces, o.full)))
        for check in row.get("expectations") or []:
            shown.append(Text(f"      expects {check.get('line')} == {check.get('expected')}: met={check.get('met')}"))
    if e.get("ambiguous"):
        shown.append(Text(f"    left out (ambiguous): {window('; '.join(e['ambiguous']), o.full)}", style="dim"))
    return shown


RENDERERS: dict[str, Callable[[Event, ShowOptions], list[RenderableType]]] = {
    "header": _header,
    "model_call": _model_call,
    "tool_call": _tool_call,
    "gate": _gate,
    "tool_result": _tool_result,
    "exit": _exit,
}


def event_stage(event: Event) -> str | None:
    """The agentless stage an event belongs to: its own `stage`, `repair` for a sample's events, else None."""
    if event.get("stage"):
        return str(event["stage"])
    sample = event.get("sample")
    if sample == REPRODUCE_SAMPLE:
        return "reproduce"
    return "repair" if sample is not None else None


REPRODUCE_SAMPLE = -1
"""The `sample` a retry of the reproduction call carries (it belongs to no repair sample)."""


def selected(event: Event, options: ShowOptions) -> bool:
    """Whether `options` (--sample, --stage, --turn) keep this event."""
    if options.sample is not None and event.get("sample") != options.sample:
        return False
    if options.stage is not None and event_stage(event) != options.stage:
        return False
    return options.turn is None or event.get("turn") == options.turn


def render(event: Event, options: ShowOptions) -> list[RenderableType]:
    """One event as terminal renderables (nothing when the options select other events)."""
    if not selected(event, options):
        return []
    return RENDERERS.get(str(event.get("type")), _other)(event, options)


def addresses(events: Iterable[Event]) -> str:
    """What a trajectory's model calls can be addressed by, for an error message: `samples 0, 1: turns 1..2`."""
    turns: dict[str, set[int]] = {}
    for e in events:
        if e.get("type") == "model_call" and isinstance(e.get("turn"), int):
            stage, sample = event_stage(e), e.get("sample")
            where = f"--sample {sample}" if sample is not None else f"--stage {stage}" if stage else "the loop"
            turns.setdefault(where, set()).add(int(e["turn"]))
    if not turns:
        return "it has no model call"
    return "; ".join(f"{where}: turns {min(t)}..{max(t)}" for where, t in turns.items())


def show(events: Iterable[Event], console: Console, options: ShowOptions) -> int:
    """Print the events; returns how many rendered anything."""
    shown = 0
    for event in events:
        parts = render(event, options)
        for part in parts:
            console.print(part)
        shown += bool(parts)
    return shown


class Tail:
    """Reads a trajectory that is still being written: complete lines as they arrive (a bad one is a UserError);
    a partial one waits."""

    def __init__(self, path: Path, poll_s: float = FOLLOW_POLL_S, idle_timeout_s: float = 0.0) -> None:
        self.path, self.poll_s, self.idle_timeout_s = path, poll_s, idle_timeout_s
        self.pending = b""
        self.lines = self.events_read = 0
        self._offset = 0

    def events(self) -> Iterator[Event]:
        """Until the exit line, or `idle_timeout_s` without new bytes (0: wait until interrupted)."""
        last_growth = time.monotonic()
        while True:
            chunk = self._read()
            if chunk:
                last_growth = time.monotonic()
                *lines, self.pending = (self.pending + chunk).split(b"\n")
                for line in lines:
                    event = self._decode(line)
                    if event is not None:
                        yield event
                        if event.get("type") == "exit":
                            return
            elif self.idle_timeout_s and time.monotonic() - last_growth >= self.idle_timeout_s:
                return
            else:
                time.sleep(self.poll_s)

    def _read(self) -> bytes:
        try:
            with self.path.open("rb") as file:
                file.seek(self._offset)
                chunk = file.read()
        except FileNotFoundError:
            return b""
        self._offset += len(chunk)
        return chunk

    def _decode(self, line: bytes) -> Event | None:
        """One complete line, checked as a trajectory file is checked (schema.py); None for a blank line."""
        self.lines += 1
        if not line.strip():
            return None
        where = f"{self.path}:{self.lines}"
        try:
            event = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise UserError(f"{where}: corrupt trajectory line ({getattr(exc, 'msg', exc)})") from exc
        wrong = event_problem(event, first=not self.events_read)
        if wrong is not None:
            raise UserError(f"{where}: {wrong}")
        self.events_read += 1
        return dict(event)

    @property
    def torn(self) -> bool:
        """A partial last line is still pending (the writer died mid-line, or is mid-write)."""
        return bool(self.pending.strip())
