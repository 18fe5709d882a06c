"""Virtualenvs per (repo, version) built from SWE-bench's specs with the Python the spec asks for (pyenv or PATH).

conda-only environments and missing interpreters raise `EnvUnavailable`; a built env is marked and reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from snaffle.swebench import specs
from snaffle.swebench.instances import Instance
from snaffle.swebench.specs import EnvSpec, EnvUnavailable
from snaffle.swebench.workspaces import Sources, find_git_dir, git

MARKER = "snaffle-env.json"
PIP_TIMEOUT_S = 1800
EXCLUDED_REQUIREMENTS = ("-e .", "#", ".[test")
"""Requirement lines SWE-bench drops (the repo itself is installed by the spec's `install`)."""


@dataclass(frozen=True)
class PythonEnv:
    """A built virtualenv."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def environ(self) -> dict[str, str]:
        """The environment a command runs in with this venv activated."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PYENV_VERSION"))}
        env.update(
            PATH=f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}",
            VIRTUAL_ENV=str(self.root),
            PIP_DISABLE_PIP_VERSION_CHECK="1",
            PIP_NO_INPUT="1",
            PYTHONDONTWRITEBYTECODE="1",
        )
        return env


def find_python(version: str) -> Path | None:
    """An interpreter for `X.Y`: pyenv's versions (newest patch first), then `pythonX.Y` on PATH."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(root.glob(f"{version}.*"), key=lambda p: patch_level(p.name), reverse=True) if root.is_dir() else []
    candidates = [p / "bin" / f"python{version}" for p in found]
    on_path = shutil.which(f"python{version}")
    candidates += [Path(on_path)] if on_path else []
    return next((c for c in candidates if reports_version(c, version)), None)


def patch_level(name: str) -> int:
    match = re.fullmatch(r"\d+\.\d+\.(\d+)", name)
    return int(match.group(1)) if match else -1


def reports_version(python: Path, version: str) -> bool:
    try:
        proc = subprocess.run(
            [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and proc.stdout.strip() == version


def ensure_env(spec: EnvSpec, instance: Instance, env_dir: Path, sources: Sources, log: Path) -> PythonEnv:
    """The (repo, version) virtualenv, built once and reused while its recipe is unchanged."""
    if spec.packages == "environment.yml" or specs.needs_conda(instance.instance_id):
        raise EnvUnavailable(f"{spec.repo} {spec.version} needs a conda environment.yml; use the Docker grader")
    python = find_python(spec.python)
    if python is None:
        raise EnvUnavailable(f"no Python {spec.python} here (install it, e.g. `pyenv install {spec.python}`)")
    requirements = requirements_for(spec, instance, sources)
    env = PythonEnv(env_dir / spec.key)
    fingerprint = recipe_digest(spec, requirements, python)
    if read_marker(env.root) == fingerprint:
        return env
    build(env, python, spec, requirements, log)
    (env.root / MARKER).write_text(json.dumps({"recipe": fingerprint, "spec": asdict(spec)}, indent=2), "utf-8")
    return env


def build(env: PythonEnv, python: Path, spec: EnvSpec, requirements: str, log: Path) -> None:
    shutil.rmtree(env.root, ignore_errors=True)
    env.root.parent.mkdir(parents=True, exist_ok=True)
    needs_pip = bool(requirements or spec.packages or spec.pip_packages or spec.install or spec.pre_install)
    without_pip = [] if needs_pip else ["--without-pip"]
    logged(log, [str(python), "-m", "venv", *without_pip, str(env.root)], os.environ.copy(), "venv")
    steps: list[list[str]] = []
    if requirements:
        (env.root / "requirements.txt").write_text(requirements, encoding="utf-8")
        steps.append(["-r", str(env.root / "requirements.txt")])
    if spec.packages and spec.packages != "requirements.txt":
        steps.append([conda_to_pip(p) for p in spec.packages.split()])
    if spec.pip_packages:
        steps.append(list(spec.pip_packages))
    for arguments in steps:
        logged(log, [str(env.python), "-m", "pip", "install", *arguments], env.environ(), "pip install")


def logged(log: Path, command: list[str], env: dict[str, str], what: str) -> None:
    """Run a build step with its output appended to `log`; a failure means the env cannot be built here."""
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"$ {' '.join(command)}\n")
        handle.flush()
        try:
            proc = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env, timeout=PIP_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise EnvUnavailable(f"{what} timed out after {PIP_TIMEOUT_S} s (see {log})") from exc
    if proc.returncode != 0:
        raise EnvUnavailable(f"{what} failed with exit code {proc.returncode} (see {log})")


def conda_to_pip(package: str) -> str:
    """`numpy=1.19` (conda) is `numpy==1.19` for pip."""
    return re.sub(r"(?<![=<>!~])=(?!=)", "==", package)


def requirements_for(spec: EnvSpec, instance: Instance, sources: Sources) -> str:
    """The repo's requirements file at the environment setup commit, read from the mirror (offline)."""
    if spec.packages != "requirements.txt":
        return ""
    commit = instance.environment_setup_commit or instance.base_commit
    git_dir = find_git_dir(sources.repos, spec.repo) if sources.repos else None
    if git_dir is None:
        raise EnvUnavailable(f"{spec.repo}'s requirements need its mirror (--repos DIR)")
    for path in specs.requirement_paths(spec.repo):
        text = git(git_dir, "show", f"{commit}:{path}", check=False)
        if text is not None:
            return specs.clean_requirements(expand_requirements(git_dir, commit, path, text))
    raise EnvUnavailable(f"no requirements file of {spec.repo} at {commit[:12]}")


def expand_requirements(git_dir: Path, commit: str, path: str, text: str) -> str:
    """Inline `-r other.txt` lines (relative to the file) and drop the lines SWE-bench drops."""
    folder = "/".join(path.split("/")[:-1])
    included: list[str] = []
    own: list[str] = []
    for line in text.splitlines():
        if line.strip().startswith("-r"):
            name = line.strip()[2:].strip()
            other = git(git_dir, "show", f"{commit}:{folder + '/' if folder else ''}{name}", check=False) or ""
            included += [x for x in other.splitlines() if not x.strip().startswith(EXCLUDED_REQUIREMENTS)]
        elif not line.strip().startswith(EXCLUDED_REQUIREMENTS):
            own.append(line)
    return "\n".join([*included, *own]) + "\n"


def recipe_digest(spec: EnvSpec, requirements: str, python: Path) -> str:
    recipe = json.dumps([asdict(spec), requirements, str(python)], sort_keys=True)
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def read_marker(root: Path) -> str | None:
    try:
        return str(json.loads((root / MARKER).read_text(encoding="utf-8"))["recipe"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
