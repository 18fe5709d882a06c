"""State boundary: `trajectory.jsonl` written one flushed line per event, read back tolerating a torn last line;
the one builder of each event type.

The format is `FORMAT`, described in docs/trajectory.md.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from snaffle.exceptions import StateError
from snaffle.model import tokens
from snaffle.types import Event, GateResult, Limits, Message, ModelReply, Task, ToolCall, ToolResult, Usage
from snaffle.version import __version__

FORMAT = "snaffle-trajectory/1"
RESULT_FORMAT = "snaffle-result/1"
TRAJECTORY_FILE = "trajectory.jsonl"
PATCH_FILE = "patch.diff"
RESULT_FILE = "result.json"
REDACTED = "[redacted]"
MIN_SECRET_CHARS = 4
"""Shorter values are not redacted (replacing every "abc" would mangle the record and hide nothing)."""


GENERIC_DIR_NAMES = frozenset(
    {"repo", "repository", "checkout", "src", "source", "code", "work", "workspace", "testbed"}
)
"""Directory names that say nothing about what is checked out: an instance is named after the nearest other one."""


def instance_name(repo: Path) -> str:
    """The name a run gives the instance in a repository: its directory's, or the nearest parent's that is not
    a generic name like `repo` (so `.../requests/repo` is `requests`)."""
    resolved = repo.resolve()
    for part in (resolved, *resolved.parents):
        if part.name and part.name.lower() not in GENERIC_DIR_NAMES:
            return part.name
    return resolved.name or "task"


def secret_values(*values: str | None) -> tuple[str, ...]:
    """The values worth redacting, longest first (so a secret containing another is replaced whole)."""
    kept = {v for v in values if v is not None and len(v) >= MIN_SECRET_CHARS}
    return tuple(sorted(kept, key=len, reverse=True))


def environment_secrets(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The API keys of an environment (variables named `*API_KEY`), for a writer that was not handed the key."""
    return secret_values(*(value for name, value in environ.items() if name.upper().endswith("API_KEY")))


def redact(text: str, secrets: Sequence[str]) -> str:
    """The one redaction of everything snaffle writes: every secret (an API key) replaced by `[redacted]`."""
    for secret in secret_values(*secrets):
        text = text.replace(secret, REDACTED)
    return text


def redact_bytes(data: bytes, secrets: Sequence[str]) -> bytes:
    """`redact` for a file's bytes (a shipped run directory may hold binary files)."""
    for secret in secret_values(*secrets):
        data = data.replace(secret.encode("utf-8", "surrogateescape"), REDACTED.encode())
    return data


def write_patch(run_dir: Path, patch: str, secrets: Sequence[str] = ()) -> str:
    """Write patch.diff (redacted) and return what was written."""
    written = redact(patch, secrets)
    (run_dir / PATCH_FILE).write_text(written, encoding="utf-8")
    return written


class TrajectoryWriter:
    """Appends events as JSON lines, flushing each; numbers them with `seq` and stamps `t`."""

    def __init__(
        self, path: Path, secrets: tuple[str, ...] = (), observer: Callable[[Event], None] | None = None
    ) -> None:
        self.path = path
        self.observer = observer
        self.secrets = secret_values(*secrets)
        self._seq = 0
        self._file: IO[str] | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("x", encoding="utf-8")  # one run, one header: never appended to
        except FileExistsError as exc:
            raise StateError(f"{path} exists: a run directory holds one run (pick another --out)") from exc
        except OSError as exc:
            raise StateError(f"cannot open trajectory {path}: {exc}") from exc

    def write(self, event: Event) -> None:
        line = redact(
            json.dumps({"type": event["type"], "seq": self._seq, "t": round(time.time(), 3), **event}), self.secrets
        )
        try:
            assert self._file is not None, "trajectory writer is closed"
            self._file.write(line + "\n")
            self._file.flush()
        except (OSError, ValueError, AssertionError) as exc:
            raise StateError(f"cannot append to trajectory {self.path}: {exc}") from exc
        self._seq += 1
        if self.observer is not None:
            self.observer(event)

    def close(self) -> None:
        """Close; a flush failure here was already reported by `write` as a StateError."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None


@dataclass(frozen=True)
class Trajectory:
    """The events of a trajectory file, and whether its last line was torn (and skipped)."""

    events: tuple[Event, ...]
    torn: bool

    @property
    def header(self) -> Event | None:
        return self.events[0] if self.events and self.events[0].get("type") == "header" else None

    @property
    def exit(self) -> Event | None:
        return next((e for e in reversed(self.events) if e.get("type") == "exit"), None)

    def of_type(self, kind: str) -> Iterator[Event]:
        return (e for e in self.events if e.get("type") == kind)


def read_trajectory(path: Path) -> Trajectory:
    """Parse every complete line; a torn final line is skipped and reported, a torn middle line is an error."""
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    events: list[Event] = []
    torn = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if any(rest.strip() for rest in lines[number:]):
                raise ValueError(f"{path}:{number}: corrupt trajectory line ({exc.msg})") from exc
            torn = True
    return Trajectory(tuple(events), torn)


def write_result(run_dir: Path, result: Mapping[str, Any], secrets: Sequence[str] = ()) -> Path:
    """Write result.json atomically (temp file, then rename), redacted."""
    path = run_dir / RESULT_FILE
    tmp = path.with_suffix(".json.tmp")
    text = json.dumps({"format": RESULT_FORMAT, **result}, indent=2) + "\n"
    tmp.write_text(redact(text, secrets), encoding="utf-8")
    tmp.replace(path)
    return path


def header_event(
    task: Task,
    arm: str,
    model: str,
    base_url: str,
    limits: Limits,
    fixed_context_tokens: int | None,
    config: Mapping[str, object],
    settings: Mapping[str, object] | None = None,
    fixed_context: Mapping[str, int] | None = None,
    interpreter: Mapping[str, str] | None = None,
) -> Event:
    """The first line: the format, what runs on which task and model, under which caps (and, from the command line,
    the resolved settings with where each came from); `fixed_context` breaks the fixed context down by kind of call
    when the calls differ (agentless: `reproduce`, `repair`); `interpreter`: the one that runs the repository's code
    (path, version, how it was chosen)."""
    parts = {} if fixed_context is None else {"fixed_context": dict(fixed_context)}
    return {
        "type": "header",
        "format": FORMAT,
        "snaffle_version": __version__,
        "task": {"instance_id": task.instance_id, "repo": str(task.repo), "issue": task.issue},
        "arm": arm,
        "model": model,
        "base_url": base_url,
        "caps": {
            "max_turns": limits.max_turns,
            "max_tokens": limits.max_tokens,
            "max_dollars": limits.max_dollars,
            "timeout_s": limits.timeout_s,
        },
        "fixed_context_tokens": fixed_context_tokens,
        **parts,
        "python": platform.python_version(),
        **({"interpreter": dict(interpreter)} if interpreter is not None else {}),
        "config": dict(config),
        **({"settings": dict(settings)} if settings else {}),
    }


def model_call_event(
    turn: int,
    messages: Sequence[Message],
    sent: int,
    reply: ModelReply,
    usage: Usage,
    cumulative: Mapping[str, object],
    stage: str | None = None,
) -> Event:
    """A `model_call` line: what was appended since the last call (`messages[sent:]`), the reply, its usage;
    `stage` names the agentless stage that made a call outside a repair sample (`reproduce`)."""
    return {
        "type": "model_call",
        **({} if stage is None else {"stage": stage}),
        "turn": turn,
        "messages_delta": list(messages[sent:]),
        "n_messages": len(messages),
        "messages_digest": digest(messages),
        "prompt_estimate": tokens.count_messages(messages),
        "response": response_record(reply),
        "usage": usage.as_dict(),
        "latency_s": round(reply.latency_s, 3),
        "cumulative": dict(cumulative),
        "shim": dict(reply.shim),
    }


def response_record(reply: ModelReply) -> dict[str, object]:
    """A reply as the trajectory keeps it: tool calls with their arguments as the model wrote them."""
    return {
        "content": reply.content,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.raw_arguments} for c in reply.tool_calls],
        "reasoning_content": reply.reasoning,
        "finish_reason": reply.finish_reason,
        "protocol": reply.protocol,
    }


def digest(messages: Sequence[Message]) -> str:
    """A short sha256 of the whole message list sent."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


def retry_event(attempt: int, error: str, wait_s: float, sample: int | None = None) -> Event:
    """A `retry` line, written before the model call is retried; `sample` for an agentless sample's call."""
    where = {} if sample is None else {"sample": sample}
    return {"type": "retry", **where, "attempt": attempt, "error": error, "wait_s": round(wait_s, 3)}


def tool_call_event(turn: int, call: ToolCall, problem: str | None) -> Event:
    """A `tool_call` line; a call rejected for `problem` keeps its arguments as the model wrote them."""
    arguments = dict(call.arguments) if problem is None else call.raw_arguments
    return {
        "type": "tool_call",
        "turn": turn,
        "id": call.id,
        "name": call.name,
        "arguments": arguments,
        "valid": problem is None,
        "error": problem,
    }


def tool_result_event(turn: int, result: ToolResult, elapsed_s: float) -> Event:
    """A `tool_result` line: the observation as the model sees it."""
    return {
        "type": "tool_result",
        "turn": turn,
        "call_id": result.call_id,
        "name": result.name,
        "output": result.output,
        "ok": result.ok,
        "changed": result.changed,
        "elapsed_s": round(elapsed_s, 3),
    }


def gate_event(turn: int, call_id: str | None, gate: GateResult) -> Event:
    """A `gate` line: one gate's decision, bound to the call it was about (None: about the whole turn)."""
    return {"type": "gate", "turn": turn, "call_id": call_id, "gate": gate.gate, "ok": gate.ok, "reason": gate.reason}


def collapse_event(turn: int, call_id: str, name: str, label: str) -> Event:
    """A `collapse` line: an older observation replaced by its one-line label."""
    return {"type": "collapse", "call_id": call_id, "name": name, "label": label, "turn": turn}


def compaction_event(turn: int, before_tokens: int, after_tokens: int, summary: str) -> Event:
    """A `compaction` line: the context shrunk because it neared the window."""
    return {
        "type": "compaction",
        "before_tokens": before_tokens,
        "after_tokens": after_tokens,
        "summary": summary,
        "turn": turn,
    }


def stage_event(stage: str, decision: str, **fields: object) -> Event:
    """A `stage` line of the agentless pipeline: its decision and stage-specific fields."""
    return {"type": "stage", "stage": stage, "decision": decision, **fields}


def exit_event(status: str, message: str, patch: str, totals: Mapping[str, object]) -> Event:
    """The last line: how the run ended, its patch and its totals."""
    return {"type": "exit", "status": status, "message": message, "patch": patch, "totals": dict(totals)}
