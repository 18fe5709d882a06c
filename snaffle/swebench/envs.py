"""Virtualenvs per (repo, version) built from SWE-bench's specs with the Python the spec asks for (pyenv or PATH).

conda-only environments and missing interpreters raise `EnvUnavailable`; a built env is marked and reused. One code
path serves grading and solving: `prepared_env` builds under a file lock (parallel workers build each env once),
and installs the repository at its environment setup commit, so the dependencies its setup declares are there.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from snaffle.swebench import specs
from snaffle.swebench.instances import Instance
from snaffle.swebench.specs import EnvSpec, EnvUnavailable
from snaffle.swebench.workspaces import Sources, WorkspaceUnavailable, find_git_dir, git, locked, prepare_checkout

MARKER = "snaffle-env.json"
SETUP_CHECKOUT = "setup-checkout"
"""The repository at its environment setup commit, kept in the env: the spec's (editable) install points there."""
PIP_TIMEOUT_S = 1800
SKIPPED_PRE_INSTALL = re.compile(r"^\s*(sudo\s+)?(apt(-get)?|yum|dnf|apk)\b")
"""System package installs in a spec's pre_install: skipped here (and logged)."""
STEP_TIMEOUT_S = 1800
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
    started = time.monotonic()
    build(env, python, spec, requirements, log)
    marker = {"recipe": fingerprint, "spec": asdict(spec), "build_s": round(time.monotonic() - started, 1)}
    (env.root / MARKER).write_text(json.dumps({**marker, "built_at": time.time()}, indent=2), "utf-8")
    return env


def prepared_env(spec: EnvSpec, instance: Instance, env_dir: Path, sources: Sources, log: Path) -> PythonEnv:
    """`ensure_env` under the env's file lock, then the repository installed once at its setup commit."""
    with locked(env_dir / f".{spec.key}.lock"):
        env = ensure_env(spec, instance, env_dir, sources, log)
        if marker_field(env.root, "installed") is None:
            started = time.monotonic()
            installed = install_setup_checkout(env, spec, instance, sources, log)
            update_marker(env.root, installed=installed, install_s=round(time.monotonic() - started, 1))
        return env


def install_setup_checkout(env: PythonEnv, spec: EnvSpec, instance: Instance, sources: Sources, log: Path) -> bool:
    """The spec's install in a checkout at the setup commit kept in the env (its own setup, not a model's)."""
    commit = instance.environment_setup_commit or instance.base_commit
    checkout = env.root / SETUP_CHECKOUT
    shutil.rmtree(checkout, ignore_errors=True)
    try:
        prepare_checkout(spec.repo, commit, checkout, sources)
        install(checkout, spec, env, log, required=True)
    except (EnvUnavailable, WorkspaceUnavailable) as exc:
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"install at the setup commit failed: {exc}\n")
        return False
    return True


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


def install(repo: Path, spec: EnvSpec, env: PythonEnv, log: Path, required: bool) -> None:
    """The spec's pre_install (system package managers skipped) and install commands in the checkout."""
    commands = [c for c in spec.pre_install if not SKIPPED_PRE_INSTALL.match(c)]
    skipped = [c for c in spec.pre_install if SKIPPED_PRE_INSTALL.match(c)]
    with log.open("a", encoding="utf-8") as handle:
        handle.writelines(f"skipped (system packages): {c}\n" for c in skipped)
    for command in [*commands, spec.install]:
        if command and not step(["bash", "-c", command], repo, log, env.environ()) and required:
            raise EnvUnavailable(f"`{command}` failed at the base commit (see {log})")


def step(command: list[str], cwd: Path, log: Path, env: dict[str, str]) -> bool:
    """One install step in `cwd` with its output appended to the log; True when it succeeded."""
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"$ {' '.join(command)}\n")
        handle.flush()
        try:
            proc = subprocess.run(
                command, cwd=cwd, env=env, stdout=handle, stderr=subprocess.STDOUT, timeout=STEP_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            handle.write(f"timed out after {STEP_TIMEOUT_S} s\n")
            return False
    return proc.returncode == 0


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


def marker_field(root: Path, key: str) -> object:
    try:
        return json.loads((root / MARKER).read_text(encoding="utf-8")).get(key)
    except (OSError, ValueError, AttributeError):
        return None


def update_marker(root: Path, **fields: object) -> None:
    path = root / MARKER
    body = {**json.loads(path.read_text(encoding="utf-8")), **fields}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=2), encoding="utf-8")
    tmp.replace(path)


@dataclass(frozen=True)
class BuiltEnv:
    """One environment under the cache dir, as `snaffle env list` shows it."""

    key: str
    root: Path
    size_bytes: int
    build_s: float | None
    installed: bool | None


def list_envs(env_dir: Path) -> list[BuiltEnv]:
    """Every built environment under `env_dir` (those with a marker), with its size on disk."""
    if not env_dir.is_dir():
        return []
    found = []
    for root in sorted(p for p in env_dir.iterdir() if (p / MARKER).is_file()):
        build_s, installed = marker_field(root, "build_s"), marker_field(root, "installed")
        found.append(
            BuiltEnv(
                root.name,
                root,
                tree_size(root),
                float(build_s) if isinstance(build_s, (int, float)) else None,
                installed if isinstance(installed, bool) else None,
            )
        )
    return found


def tree_size(root: Path) -> int:
    """Bytes of the files under `root` (symlinks not followed)."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total
