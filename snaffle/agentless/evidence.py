"""What a candidate patch is judged by: each piece of evidence, asked of a patched copy, says pass, fail or unknown."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from snaffle.sandbox import Sandbox
from snaffle.workspace import Workspace


@dataclass(frozen=True)
class Verdict:
    """One piece of evidence's judgement of one patched tree."""

    evidence: str
    passed: bool | None
    failure: str = ""
    progress: bool = False
    """Failed, but less than on the original tree: an expectation that failed there holds now (a partial fix)."""


class Evidence(Protocol):
    """A check that reproduced the issue on the original tree (a failing test, a kept reproduction test, a snippet
    that raised or printed the reported wrong value), asked again of a patched copy."""

    @property
    def name(self) -> str: ...

    def judge(self, clone: Workspace, sandbox: Sandbox) -> Verdict:
        """`passed` is None when it could not tell; `failure` is the short text a feedback round shows the model."""
        ...

    def bounded(self, timeout_s: float) -> Evidence:
        """The same check stopped after `timeout_s` and measuring nothing beside its verdict (mutant screening)."""
        ...


FAILURE_LINES = 12
"""The most lines of a failing test's output a feedback round shows: the assertion and exception lines first."""
TEST_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class TestEvidence:
    """Tests that failed on the original tree (the given failing test, the kept reproduction test, related tests
    that already failed), asked again of a patched copy: they must all pass."""

    name: str
    targets: tuple[str, ...]
    """pytest node ids or paths; a path outside the repository must be visible inside the sandbox."""
    timeout_s: float = TEST_TIMEOUT_S
    __test__ = False  # not a pytest test class, whatever its name

    def bounded(self, timeout_s: float) -> TestEvidence:
        return replace(self, timeout_s=timeout_s)

    def judge(self, clone: Workspace, sandbox: Sandbox) -> Verdict:
        """Run the targets on `clone`; `failure` holds the short lines of what still fails."""
        command = [sandbox.python, "-m", "pytest", "-q", "-x", "--tb=short", "-p", "no:cacheprovider"]
        command += [f"--rootdir={clone.root}", *self.targets]
        done = sandbox.run(command, clone.root, self.timeout_s, writable=clone.root, env=sandbox.env_for(clone.root))
        if done.timed_out:
            return Verdict(self.name, False, f"{' '.join(self.targets)}: timed out after {self.timeout_s:.0f} s")
        if done.returncode == 0:
            return Verdict(self.name, True)
        if done.returncode != 1:  # 2 interrupted, 3 internal error, 4 usage, 5 no tests collected: cannot tell
            return Verdict(self.name, None, short_failure(done.output))
        return Verdict(self.name, False, short_failure(done.output))


def short_failure(output: str, limit: int = FAILURE_LINES) -> str:
    """The lines of a pytest run that say what failed: `E ` lines and exception lines first, then the summary."""
    lines = [line.rstrip() for line in output.splitlines()]
    errors = [line for line in lines if line.startswith("E ") or line.lstrip().startswith("assert ")]
    summary = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    chosen = list(dict.fromkeys([*errors, *summary])) or [line for line in lines if line.strip()][-limit:]
    return "\n".join(chosen[:limit])


TEST_EVIDENCE_NAMES = ("failing_test", "reproduction")
"""The test evidence whose verdicts validation already has (`fixes_failing`, `reproduces`)."""


def test_evidence(failing_test: str | None, reproduction: str | None) -> list[Evidence]:
    """The given failing test and the kept reproduction test, as evidence (either may be absent)."""
    found: list[Evidence] = []
    if failing_test:
        found.append(TestEvidence("failing_test", (failing_test,)))
    if reproduction:
        found.append(TestEvidence("reproduction", (reproduction,)))
    return found
