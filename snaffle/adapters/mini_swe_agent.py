"""mini-swe-agent (PyPI `mini-swe-agent`) as an adapter: its `mini` CLI in a subprocess, pointed at `base_url`.

The run directory gets mini-swe-agent's own files (`mini.traj.json`, `mini.config.yaml`, `mini.log`) and snaffle's
(`trajectory.jsonl` converted, `patch.diff` from snaffle's workspace, `result.json`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from snaffle.adapters.base import AdapterSpec, write_external_result
from snaffle.adapters.mini_trajectory import MiniConverter, exit_status
from snaffle.exceptions import StateError, UserError
from snaffle.model import tokens
from snaffle.trajectory import TRAJECTORY_FILE, TrajectoryWriter, exit_event, header_event
from snaffle.types import Attempt, Event, Limits, Task, Usage
from snaffle.workspace import Workspace

TRAJ_FILE = "mini.traj.json"
CONFIG_FILE = "mini.config.yaml"
LOG_FILE = "mini.log"
GRACE_S = 30.0
"""Extra wall-clock for the subprocess past the run's timeout (mini-swe-agent checks its own cap between steps)."""
COMMAND_TIMEOUT_S = 60
MODEL_RETRIES = "3"
OFFLINE_ENV = {
    "MSWEA_CONFIGURED": "true",  # no first-run setup prompt
    "MSWEA_SILENT_STARTUP": "1",
    "MSWEA_COST_TRACKING": "ignore_errors",  # local and unknown models have no price; the shim meters
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm would fetch its price map from the network
    "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": MODEL_RETRIES,
}


class MiniSweAgentAdapter:
    """Runs `python -m minisweagent.run.mini` non-interactively on one task."""

    def __init__(self, spec: AdapterSpec, out: Path) -> None:
        self.name = "mini-swe-agent"
        self.spec, self.out = spec, out

    def run(self, task: Task, workdir: Path, limits: Limits, base_url: str) -> Attempt:
        require_mini()
        self.out.mkdir(parents=True, exist_ok=True)
        with Workspace.open(workdir) as workspace:
            config = self.out / CONFIG_FILE
            config.write_text(yaml.safe_dump(mini_config(self.spec, task, workdir, limits, base_url)), "utf-8")
            started = time.monotonic()
            timed_out = self.launch(config, limits)
            patch = workspace.patch()
        data = read_traj(self.out / TRAJ_FILE)
        status, message = outcome(data, timed_out, limits)
        return self.record(task, data, status, message, patch, base_url, limits, time.monotonic() - started)

    def launch(self, config: Path, limits: Limits) -> bool:
        """Run the CLI to the end (or past the timeout); True when it had to be killed."""
        command = [
            sys.executable,
            "-m",
            "minisweagent.run.mini",
            "-c",
            mini_base_config(self.spec),
            "-c",
            str(config),
            "-o",
            str(self.out / TRAJ_FILE),
            "--yolo",
            "--exit-immediately",
        ]
        timeout = limits.timeout_s + GRACE_S if limits.timeout_s else None
        with tempfile.TemporaryDirectory(prefix="snaffle-mini-") as home, (self.out / LOG_FILE).open("wb") as log:
            env = {**os.environ, **OFFLINE_ENV, "MSWEA_GLOBAL_CONFIG_DIR": home, "OPENAI_API_KEY": self.spec.api_key()}
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            try:
                proc.wait(timeout=timeout)
                return False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return True
            except BaseException:
                os.killpg(proc.pid, signal.SIGKILL)
                raise

    def record(
        self,
        task: Task,
        data: Mapping[str, Any],
        status: str,
        message: str,
        patch: str,
        base_url: str,
        limits: Limits,
        elapsed_s: float,
    ) -> Attempt:
        """Write trajectory.jsonl (converted), patch.diff and result.json."""
        events = [header(self.spec, task, base_url, limits, data), *MiniConverter(data.get("messages") or []).convert()]
        usage = sum(
            (Usage(**{k: v for k, v in e["usage"].items()}) for e in events if e["type"] == "model_call"), Usage()
        )
        counts = {
            "turns": sum(e["type"] == "model_call" for e in events),
            "elapsed_s": round(elapsed_s, 3),
            "tool_calls": sum(e["type"] == "tool_call" for e in events),
            "rejected_calls": 0,
            "malformed_turns": sum(e["type"] == "gate" for e in events),
        }
        writer = TrajectoryWriter(self.out / TRAJECTORY_FILE, (self.spec.api_key(),))
        try:
            for event in [*events, exit_event(status, message, patch, {**usage.as_dict(), **counts})]:
                writer.write(event)
        except StateError as exc:
            status, message = "state_error", str(exc)
        finally:
            writer.close()
        write_external_result(self.out, self.spec, task.instance_id, status, message, patch, usage, counts)
        return Attempt(patch, status, self.out / TRAJECTORY_FILE, usage)


def require_mini() -> None:
    if importlib.util.find_spec("minisweagent") is None:
        raise UserError("the mini-swe-agent adapter needs its package: pip install 'snaffle[swebench]'")


def mini_base_config(spec: AdapterSpec) -> str:
    """mini-swe-agent's packaged config: tool calls, or fenced bash blocks for servers without tool calling."""
    return "mini_textbased.yaml" if spec.tool_protocol == "text" else "mini.yaml"


def mini_config(spec: AdapterSpec, task: Task, workdir: Path, limits: Limits, base_url: str) -> dict[str, Any]:
    """The settings layered over the packaged config: task, caps, endpoint, working directory."""
    kwargs: dict[str, Any] = {"api_base": base_url, "drop_params": True}
    if spec.temperature is not None:
        kwargs["temperature"] = spec.temperature
    if spec.max_output_tokens is not None:
        kwargs["max_tokens"] = spec.max_output_tokens
    model: dict[str, Any] = {
        "model_name": f"openai/{spec.model}",
        "model_kwargs": kwargs,
        "cost_tracking": "ignore_errors",
    }
    if spec.tool_protocol == "text":
        model["model_class"] = "litellm_textbased"
    agent = {
        "mode": "yolo",
        "confirm_exit": False,
        "step_limit": limits.max_turns,
        "cost_limit": limits.max_dollars,
        "wall_time_limit_seconds": int(limits.timeout_s),
    }
    environment = {"cwd": str(workdir), "timeout": COMMAND_TIMEOUT_S}
    return {"run": {"task": task.issue}, "agent": agent, "model": model, "environment": environment}


def read_traj(path: Path) -> dict[str, Any]:
    """mini-swe-agent's saved trajectory, or an empty one when it never got to save."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def outcome(data: Mapping[str, Any], timed_out: bool, limits: Limits) -> tuple[str, str]:
    if timed_out:
        return "timeout", f"mini-swe-agent ran past the wall-clock cap ({limits.timeout_s:g} s) and was killed"
    if not data:
        return "model_error", f"mini-swe-agent saved no trajectory (see {LOG_FILE})"
    info = data.get("info") or {}
    messages = data.get("messages") or [{}]
    extra = messages[-1].get("extra") or {}
    exception = f"{extra.get('exception_str') or ''} {messages[-1].get('content') or ''}"
    status = exit_status(info, exception, limits.max_turns)
    return status, f"mini-swe-agent exit status {info.get('exit_status') or 'unknown'}: {exception.strip()[:500]}"


def header(spec: AdapterSpec, task: Task, base_url: str, limits: Limits, data: Mapping[str, Any]) -> Event:
    messages = data.get("messages") or []
    system = str(messages[0].get("content") or "") if messages else ""
    config = {
        "adapter": "mini-swe-agent",
        "mini_version": mini_version(),
        "tool_protocol": spec.tool_protocol,
        "mini_exit_status": (data.get("info") or {}).get("exit_status"),
    }
    return header_event(task, "mini-swe-agent", spec.model, base_url, limits, tokens.count(system), config)


def mini_version() -> str | None:
    try:
        return metadata.version("mini-swe-agent")
    except metadata.PackageNotFoundError:
        return None
