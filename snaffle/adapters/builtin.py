"""snaffle's own arms (the `snaffle.arms.ARMS` table) behind the adapter contract, through `run.solve`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from snaffle.adapters.base import AdapterSpec
from snaffle.harness import Pricer
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.types import Attempt, Limits, Task


class ArmAdapter:
    """Runs one of snaffle's arms; the name is passed through, so `run.solve` (the arm table) decides what exists."""

    def __init__(self, spec: AdapterSpec, out: Path, pricer: Pricer = zero_pricer) -> None:
        self.name = spec.name
        self.spec, self.out, self.pricer = spec, out, pricer

    def run(self, task: Task, workdir: Path, limits: Limits, base_url: str) -> Attempt:
        model = self.spec.model_config(base_url)  # the batch's checkout is private already: no copy of it
        config = SolveConfig(
            self.spec.name,
            model,
            limits,
            self.out,
            self.pricer,
            private_copy=False,
            sandbox=self.spec.sandbox,
            caps=self.spec.caps,
            python=self.spec.python,
        )
        if self.spec.pipeline is not None:
            config = dataclasses.replace(config, pipeline=self.spec.pipeline)
        return solve(dataclasses.replace(task, repo=workdir), config)
