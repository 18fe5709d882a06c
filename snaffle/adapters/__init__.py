"""Adapters: one contract (`snaffle.types.Adapter`) over snaffle's own arms and external coding CLIs.

`build_adapter(spec, out)` picks the concrete adapter for one instance; `out` is that instance's run directory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

from snaffle.adapters.base import AdapterSpec
from snaffle.adapters.builtin import ArmAdapter
from snaffle.adapters.mini_swe_agent import MiniSweAgentAdapter
from snaffle.types import Adapter

EXTERNAL: Mapping[str, Callable[[AdapterSpec, Path], Adapter]] = MappingProxyType(
    {"mini-swe-agent": MiniSweAgentAdapter}
)
"""External harnesses by name; every other name is passed to snaffle's own arms (`snaffle.arms.ARMS`)."""

__all__ = ["EXTERNAL", "AdapterSpec", "ArmAdapter", "MiniSweAgentAdapter", "build_adapter"]


def build_adapter(spec: AdapterSpec, out: Path) -> Adapter:
    """The adapter for `spec.name`, writing its trajectory, patch and result into `out`."""
    return EXTERNAL.get(spec.name, ArmAdapter)(spec, out)
