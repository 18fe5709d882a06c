"""What a candidate patch is judged by: each piece of evidence, asked of a patched copy, says pass, fail or unknown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from snaffle.sandbox import Sandbox
from snaffle.workspace import Workspace


@dataclass(frozen=True)
class Verdict:
    """One piece of evidence's judgement of one patched tree."""

    evidence: str
    passed: bool | None
    failure: str = ""


class Evidence(Protocol):
    """A check that reproduced the issue on the original tree (a failing test, a kept reproduction test, a snippet
    that raised or printed the reported wrong value), asked again of a patched copy."""

    @property
    def name(self) -> str: ...

    def judge(self, clone: Workspace, sandbox: Sandbox) -> Verdict:
        """`passed` is None when it could not tell; `failure` is the short text a feedback round shows the model."""
        ...
