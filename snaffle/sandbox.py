"""Subprocesses for tools: a scratch environment (own venv, HOME and caches) and group-killing timeouts.

The scratch venv sees the launching interpreter's packages through a `.pth` file, so the repo's tests run, while
`pip install` lands in the scratch venv and never in the host's site-packages.
"""

from __future__ import annotations

import os
import signal
import site
import subprocess
import sysconfig
import time
import venv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from snaffle.tools import ToolFailure
from snaffle.types import SOURCE_DIRS

OUTPUT_CAP = 8_000
BASH_TIMEOUT_S = 60.0
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "TERM", "TZ", "SSL_CERT_FILE", "PIP_FIND_LINKS", "PIP_INDEX_URL")


@dataclass(frozen=True)
class Sandbox:
    """The environment tool subprocesses run with."""

    scratch: Path
    env: dict[str, str]

    @classmethod
    def create(cls, scratch: Path) -> Sandbox:
        """Make a scratch venv (no pip copy: the host's pip runs inside it) and an environment pointing at it."""
        scratch.mkdir(parents=True, exist_ok=True)
        env_dir = scratch / "venv"
        if not (env_dir / "bin" / "python").exists():
            venv.EnvBuilder(system_site_packages=False, with_pip=False, symlinks=True).create(env_dir)
            _link_host_packages(env_dir)
        home = scratch / "home"
        home.mkdir(exist_ok=True)
        env = {key: os.environ[key] for key in KEEP_ENV if key in os.environ}
        env.update(
            PATH=f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}",
            VIRTUAL_ENV=str(env_dir),
            HOME=str(home),
            XDG_CACHE_HOME=str(home / ".cache"),
            PIP_CACHE_DIR=str(home / ".cache" / "pip"),
            PIP_DISABLE_PIP_VERSION_CHECK="1",
            PYTHONDONTWRITEBYTECODE="1",
            PYTHONUNBUFFERED="1",
            GIT_TERMINAL_PROMPT="0",
        )
        return cls(scratch, env)

    def env_for(self, root: Path, *first: str) -> dict[str, str]:
        """The environment for running a repository's code: its import roots (and `first`) on PYTHONPATH."""
        return {**self.env, "PYTHONPATH": os.pathsep.join([*first, *map(str, import_roots(root))])}


def import_roots(root: Path) -> list[Path]:
    """Where a repository's top-level modules import from: the root, and `src/` or `lib/` when they hold
    packages (an uninstalled src-layout project imports nothing from its root)."""
    roots = [root]
    for name in SOURCE_DIRS:
        path = root / name
        if path.is_dir() and not (path / "__init__.py").exists() and any(path.glob("*/__init__.py")):
            roots.append(path)
    return roots


def _link_host_packages(env_dir: Path) -> None:
    purelib = Path(sysconfig.get_paths(vars={"base": str(env_dir), "platbase": str(env_dir)})["purelib"])
    purelib.mkdir(parents=True, exist_ok=True)
    host = [p for p in {*site.getsitepackages(), sysconfig.get_paths()["purelib"]} if Path(p).is_dir()]
    (purelib / "snaffle_host.pth").write_text("\n".join(sorted(host)) + "\n")


@dataclass(frozen=True)
class Completed:
    """The outcome of one subprocess: merged output, exit code, whether it timed out."""

    output: str
    returncode: int | None
    timed_out: bool


def run_command(
    argv: list[str] | str,
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    stdin: str | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> Completed:
    """Run in a new process group; on timeout kill the whole group. Output is decoded leniently."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        shell=isinstance(argv, str),
        executable="/bin/bash" if isinstance(argv, str) else None,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=preexec_fn,
    )
    try:
        out, _ = proc.communicate(stdin.encode() if stdin is not None else None, timeout=timeout_s)
        return Completed(out.decode("utf-8", "replace"), proc.returncode, False)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            out, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a daemon left the group but holds the pipe
            out = b""
        return Completed(out.decode("utf-8", "replace"), None, True)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def cut(text: str, cap: int = OUTPUT_CAP) -> str:
    """Keep the head and tail of a long output with a marker saying how much was cut."""
    if len(text) <= cap:
        return text
    head, tail = text[: cap // 2], text[-(cap // 2) :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters cut ...]\n{tail}"


def time_left(cap: float, deadline: float | None) -> float:
    """A subprocess timeout: `cap`, or less when the run's wall-clock deadline is nearer; none left is a failure."""
    if deadline is None:
        return cap
    left = deadline - time.monotonic()
    if left <= 0:
        raise ToolFailure("no wall-clock time left")
    return min(cap, left)
