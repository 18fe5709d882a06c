"""snaffle's own arms (`minimal`, `structured`, `agentless`) behind the adapter contract, through `run.solve`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from snaffle.adapters.base import AdapterSpec
from snaffle.harness import Pricer
from snaffle.model import ModelConfig
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.types import Attempt, Limits, Task


class ArmAdapter:
    """Runs one of snaffle's arms; the arm name is passed through, so `run.build_arm` decides what exists."""

    def __init__(self, spec: AdapterSpec, out: Path, pricer: Pricer = zero_pricer) -> None:
        self.name = spec.name
        self.spec, self.out, self.pricer = spec, out, pricer

    def run(self, task: Task, workdir: Path, limits: Limits, base_url: str) -> Attempt:
        model = ModelConfig(
            base_url=base_url,
            model=self.spec.model,
            api_key=self.spec.api_key(),
            temperature=self.spec.temperature,
            max_output_tokens=self.spec.max_output_tokens,
            tool_protocol=self.spec.tool_protocol,
        )
        config = SolveConfig(self.spec.name, model, limits, self.out, self.pricer)
        return solve(dataclasses.replace(task, repo=workdir), config)
