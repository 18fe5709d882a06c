"""`snaffle trace export --format mini-swe-agent`: snaffle runs as mini-swe-agent trajectories (`*.traj.json`,
format mini-swe-agent-1.1), so `mini-extra inspector OUT` browses them.

One file per conversation: a loop arm's run is one; an agentless run has one for the reproduction call and one per
repair sample. The messages are snaffle's as sent (each call's new messages, then the answer); mini-swe-agent's
bookkeeping (`extra`: the raw usage, the cost, the bash actions, the tool output) is filled from the trajectory.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snaffle.exceptions import UserError
from snaffle.trace.runs import Run
from snaffle.types import Event, Message

MINI_FORMAT = "mini-swe-agent-1.1"
TRAJ_SUFFIX = ".traj.json"
"""The suffix `mini-extra inspector DIR` looks for."""
EXPORT_FORMATS = ("mini-swe-agent",)


@dataclass(frozen=True)
class Conversation:
    """One chain of model calls: a loop arm's whole run, or an agentless run's reproduction call or one sample."""

    name: str
    """'' for a loop run's one conversation, else `reproduce` or `sample-N`."""
    events: tuple[Event, ...]


def conversation_key(event: Event) -> str | None:
    """Which conversation an event belongs to: a sample's, a stage's model call, the loop's ('') or none."""
    sample = event.get("sample")
    if isinstance(sample, int) and sample >= 0:
        return f"sample-{sample}"
    if event.get("type") in ("model_call", "stage") and event.get("stage"):
        return str(event["stage"])  # a stage with no model call (localize, select) is dropped as no conversation
    return "" if event.get("type") in ("model_call", "tool_call", "tool_result") else None


def conversations(events: Sequence[Event]) -> list[Conversation]:
    """The run's conversations in the order they started; each with its calls and their tool results."""
    found: dict[str, list[Event]] = {}
    for event in events:
        key = conversation_key(event)
        if key is not None:
            found.setdefault(key, []).append(event)
    return [Conversation(k, tuple(v)) for k, v in found.items() if any(e.get("type") == "model_call" for e in v)]


def messages(conversation: Conversation) -> list[Message]:
    """The conversation as mini-swe-agent keeps it: what each call sent, its answer, the results that followed."""
    out: list[Message] = []
    pending: list[Event] = []
    for event in conversation.events:
        if event.get("type") == "model_call":
            out.extend(dict(m) for m in event.get("messages_delta") or [])
            out.append(assistant(event))
            pending = []
        elif event.get("type") == "tool_result":
            pending.append(event)
    out.extend(observation(e) for e in pending)  # what the last call's tools returned (no later call sent it)
    return out


def assistant(call: Event) -> Message:
    """A model call's answer as an assistant message, with the usage and cost mini-swe-agent records in `extra`."""
    response, usage = call.get("response") or {}, call.get("usage") or {}
    message: Message = {"role": "assistant", "content": response.get("content") or ""}
    calls = response.get("tool_calls") or []
    if calls and response.get("protocol") == "native":
        message["tool_calls"] = [
            {
                "id": c.get("id"),
                "type": "function",
                "function": {"name": c.get("name"), "arguments": c.get("arguments")},
            }
            for c in calls
        ]
    if response.get("reasoning_content"):
        message["reasoning_content"] = response["reasoning_content"]
    message["extra"] = {
        "actions": [a for a in (_action(c) for c in calls) if a is not None],
        "cost": float(usage.get("dollars") or 0.0),
        "timestamp": call.get("t"),
        "response": {"usage": _wire_usage(usage), "choices": [{"finish_reason": response.get("finish_reason")}]},
        "snaffle": {k: call[k] for k in ("turn", "sample", "stage", "latency_s") if k in call},
    }
    return message


def _action(call: dict[str, Any]) -> dict[str, Any] | None:
    """A bash call as mini-swe-agent's action (`command`); other tools have no such form."""
    try:
        arguments = json.loads(call.get("arguments") or "{}")
    except (TypeError, ValueError):
        return None
    if call.get("name") != "bash" or not isinstance(arguments, dict) or "command" not in arguments:
        return None
    return {"command": arguments["command"], "tool_call_id": call.get("id")}


def _wire_usage(usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.get("prompt_tokens") or 0,
        "completion_tokens": usage.get("completion_tokens") or 0,
        "prompt_tokens_details": {"cached_tokens": usage.get("cached_tokens") or 0},
        "completion_tokens_details": {"reasoning_tokens": usage.get("reasoning_tokens") or 0},
    }


def observation(result: Event) -> Message:
    """A tool result the model never got to read, as a tool message."""
    extra = {"raw_output": result.get("output") or "", "returncode": 0 if result.get("ok") else 1}
    return {
        "role": "tool",
        "tool_call_id": result.get("call_id"),
        "content": result.get("output") or "",
        "extra": extra,
    }


def mini_trajectory(run: Run, conversation: Conversation) -> dict[str, Any]:
    """One conversation of a run as a mini-swe-agent trajectory; the exit line says how the run (or sample) ended."""
    listed = messages(conversation)
    calls = [e for e in conversation.events if e.get("type") == "model_call"]
    stages = [e for e in conversation.events if e.get("type") == "stage"]
    status = str(stages[-1].get("decision")) if stages else str(run.exit.get("status") or "incomplete")
    said = [f"{e.get('stage')}: {e.get('message') or e.get('decision')}" for e in stages]
    message = "; ".join(said) if stages else str(run.exit.get("message") or "")
    listed.append({"role": "exit", "content": message, "extra": {"exit_status": status, "submission": run.patch}})
    return {
        "info": {
            "model_stats": {
                "instance_cost": sum(float((c.get("usage") or {}).get("dollars") or 0.0) for c in calls),
                "api_calls": len(calls),
            },
            "config": {
                "snaffle": dict(run.header.get("config") or {}),
                "agent_type": f"snaffle {run.header.get('arm')}",
            },
            "mini_version": f"snaffle {run.header.get('snaffle_version', '?')}",
            "exit_status": status,
            "submission": run.patch,
            "snaffle": {"run": str(run.path), "instance_id": run.instance_id, "conversation": conversation.name},
        },
        "messages": listed,
        "trajectory_format": MINI_FORMAT,
    }


def export_runs(runs: Sequence[Run], names: Sequence[str], out: Path) -> list[Path]:
    """Write every run's conversations under `out/<run name>/`; returns the files written."""
    written: list[Path] = []
    for run, name in zip(runs, names, strict=True):
        folder = out / name.replace("/", "__")
        for conversation in conversations(run.trajectory.events):
            stem = folder.name + (f".{conversation.name}" if conversation.name else "")
            path = folder / (stem + TRAJ_SUFFIX)
            try:
                folder.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(mini_trajectory(run, conversation), indent=2), encoding="utf-8")
            except OSError as exc:
                raise UserError(f"cannot write {path}: {exc.strerror or exc}") from exc
            written.append(path)
    return written
