"""What the `swebench` package (4.x) knows, offline: environment specs per (repo, version), test directives, log
parsers and SWE-bench's own per-instance report. Everything it cannot give here raises `EnvUnavailable`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snaffle.swebench.instances import Instance

INSTALL_HINT = "pip install 'swebench>=4,<5' (or snaffle[swebench])"


class EnvUnavailable(Exception):
    """The instance's environment cannot be built on this machine; the message says why and how to fix it."""


@dataclass(frozen=True)
class EnvSpec:
    """SWE-bench's recipe for one (repo, version) environment."""

    repo: str
    version: str
    python: str
    packages: str = ""
    pip_packages: tuple[str, ...] = ()
    pre_install: tuple[str, ...] = ()
    install: str = ""
    test_cmd: str = ""
    eval_commands: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.repo.replace('/', '__')}__{self.version}"


def constants() -> Any:
    try:
        from swebench.harness import constants
    except ImportError as exc:
        raise EnvUnavailable(f"the swebench package is not installed: {INSTALL_HINT}") from exc
    if not hasattr(constants, "MAP_REPO_VERSION_TO_SPECS"):
        raise EnvUnavailable(f"this swebench version ships no environment specs: {INSTALL_HINT}")
    return constants


def env_spec(repo: str, version: str) -> EnvSpec:
    specs = constants().MAP_REPO_VERSION_TO_SPECS.get(repo, {}).get(version)
    if specs is None:
        raise EnvUnavailable(f"SWE-bench has no environment spec for {repo} {version}")
    test_cmd = specs.get("test_cmd", "")
    return EnvSpec(
        repo=repo,
        version=version,
        python=str(specs.get("python", "")),
        packages=str(specs.get("packages", "")),
        pip_packages=tuple(specs.get("pip_packages", ())),
        pre_install=tuple(specs.get("pre_install", ())),
        install=str(specs.get("install", "")),
        test_cmd=test_cmd[-1] if isinstance(test_cmd, list) else str(test_cmd),
        eval_commands=tuple(specs.get("eval_commands", ())),
    )


def requirement_paths(repo: str) -> tuple[str, ...]:
    return tuple(constants().MAP_REPO_TO_REQS_PATHS.get(repo, ()))


def clean_requirements(text: str) -> str:
    from swebench.harness.test_spec.python import clean_requirements as clean

    cleaned: str = clean(text)
    return cleaned


def needs_conda(instance_id: str) -> bool:
    """SWE-bench pins some instances to a cached conda environment.yml."""
    try:
        from swebench.harness.utils import load_cached_environment_yml
    except ImportError:
        return False
    try:
        return bool(load_cached_environment_yml(instance_id))
    except (OSError, ValueError):
        return False


def test_command(instance: Instance, spec: EnvSpec) -> str:
    """The repo's test command followed by the test files the test patch touches (SWE-bench's directives)."""
    from swebench.harness.test_spec.python import get_test_directives

    return " ".join([spec.test_cmd, *get_test_directives(instance.as_swebench())])


def eval_report(instance: Instance, patch: str | None, log: Path) -> dict[str, Any]:
    """SWE-bench's per-instance report for a test log with its markers (`get_eval_report`)."""
    from swebench.harness.grading import get_eval_report
    from swebench.harness.test_spec.test_spec import TestSpec

    spec = TestSpec(
        instance_id=instance.instance_id,
        repo=instance.repo,
        version=instance.version,
        repo_script_list=[],
        eval_script_list=[],
        env_script_list=[],
        arch="x86_64",
        FAIL_TO_PASS=list(instance.FAIL_TO_PASS),
        PASS_TO_PASS=list(instance.PASS_TO_PASS),
        language="py",
        docker_specs={},
        namespace=None,
    )
    prediction = {"instance_id": instance.instance_id, "model_name_or_path": "snaffle", "model_patch": patch}
    report: dict[str, Any] = get_eval_report(spec, prediction, str(log), include_tests_status=True)
    return report


def markers() -> Any:
    """SWE-bench's log markers (start/end of test output, patch failed, timeout)."""
    return constants()
