"""What every adapter is configured with, and the helpers external adapters share (result.json, patch.diff)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snaffle.sandbox import CallCaps
from snaffle.trajectory import PATCH_FILE, TRAJECTORY_FILE, write_result
from snaffle.types import Usage
from snaffle.workspace import classify_patch

if TYPE_CHECKING:
    from snaffle.agentless.config import PipelineConfig
    from snaffle.interpreter import PythonChoice
    from snaffle.model.client import ModelConfig


@dataclass(frozen=True)
class AdapterSpec:
    """Which harness runs and which model it asks; the endpoint comes per instance (the shim's URL)."""

    name: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float | None = None
    max_output_tokens: int | None = None
    tool_protocol: str = "native"
    pipeline: PipelineConfig | None = None
    """The agentless arm's knobs (None: the defaults)."""
    sandbox: str = "bubblewrap"
    """How snaffle's arms confine model-caused commands (`snaffle.sandbox.MODES`)."""
    caps: CallCaps = field(default_factory=CallCaps)
    """What one model-caused call may use (`--memory-mb`, `--disk-mb`)."""
    python: PythonChoice | None = None
    """The interpreter for the repository's code (a SWE-bench instance's environment); None: `interpreter.choose`."""

    def api_key(self) -> str:
        """The key from the named environment variable; local servers and the shim need none."""
        return os.environ.get(self.api_key_env, "not-needed")

    def model_config(self, base_url: str) -> ModelConfig:
        """The endpoint settings for one instance: this spec's model at `base_url` (usually the shim's)."""
        from snaffle.model.client import ModelConfig

        return ModelConfig(
            base_url, self.model, self.api_key(), self.temperature, self.max_output_tokens, self.tool_protocol
        )


def write_external_result(
    out: Path,
    spec: AdapterSpec,
    instance_id: str,
    status: str,
    message: str,
    patch: str,
    usage: Usage,
    totals: Mapping[str, Any],
) -> None:
    """patch.diff and result.json in the same format `snaffle.run.solve` writes."""
    (out / PATCH_FILE).write_text(patch, encoding="utf-8")
    write_result(
        out,
        {
            "instance_id": instance_id,
            "arm": spec.name,
            "model": spec.model,
            "exit_status": status,
            "message": message,
            "patch_kind": classify_patch(patch),
            "patch_path": PATCH_FILE,
            "trajectory_path": TRAJECTORY_FILE,
            "totals": {**usage.as_dict(), **totals},
            "shim": None,
            "usage_disagreement": False,
        },
    )
