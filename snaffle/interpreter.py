"""Which Python runs a repository's code: `--python PATH`, else the repository's own virtualenv, else snaffle's.

A repository's `.venv` is repository content: it is only ever run inside the sandbox (its version is asked there),
and the sandbox is shown only what holds a Python installation (never `/`, never $HOME or a directory above it).
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

from snaffle.exceptions import UserError
from snaffle.sandbox import Sandbox, own_python

VENV_NAMES = (".venv", "venv")
"""A repository's own virtualenv, looked for in this order at its root."""
BY_FLAG = "--python"
OWN = "snaffle's own"
PROBE = "import sys; print('%d.%d.%d' % sys.version_info[:3])"
PROBE_TIMEOUT_S = 60.0
VERSION = re.compile(r"\d+\.\d+\.\d+")
STDLIB_MARKERS = ("lib/python3*/os.py", "lib/python2*/os.py", "lib64/python3*/os.py")
"""A Python installation's prefix holds its standard library: the only host directories shown besides venvs."""


@dataclass(frozen=True)
class PythonChoice:
    """An interpreter to use and how it was chosen (before it has run)."""

    path: str
    how: str


@dataclass(frozen=True)
class Interpreter:
    """The interpreter a run's tests, snippets and SBFL use: its path, its version, how it was chosen."""

    path: str
    version: str
    how: str

    def describe(self) -> dict[str, str]:
        return {"path": self.path, "version": self.version, "chosen": self.how}


def choose(repo: Path, given: str | None) -> PythonChoice:
    """`given` (`--python`), else the repo's `.venv` or `venv`, else snaffle's own interpreter."""
    if given:
        path = Path(given).expanduser().absolute()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise UserError(f"--python {given}: no executable file there; pass a Python, e.g. PROJECT/.venv/bin/python")
        return PythonChoice(str(path), BY_FLAG)
    for name in VENV_NAMES:
        python = repo_venv(repo.absolute() / name)
        if python is not None:
            try:
                bind_paths(python)
            except UserError as exc:
                return PythonChoice(own_python(), f"{OWN} (the repository's {name} was refused: {exc})")
            return PythonChoice(str(python), f"the repository's {name}")
    return PythonChoice(own_python(), OWN)


def repo_venv(root: Path) -> Path | None:
    """`root/bin/python` when `root` is a virtualenv (it has a `pyvenv.cfg`)."""
    python = root / "bin" / "python"
    return python if (root / "pyvenv.cfg").is_file() and python.is_file() else None


def bind_paths(python: Path) -> tuple[Path, ...]:
    """What the sandbox must show (read-only) for `python` to start: its venv and the installation it runs on."""
    found: list[Path] = []
    venv_root = python.parent.parent
    if (venv_root / "pyvenv.cfg").is_file():
        found.append(bindable(venv_root.resolve(), python, venv=True))
        home = pyvenv_home(venv_root / "pyvenv.cfg")
        if home is not None:
            found.append(bindable(home.resolve().parent, python))
    prefix = python.resolve().parent.parent
    if prefix not in found:  # a venv made with --copies runs its own binary
        found.append(bindable(prefix, python))
    return tuple(dict.fromkeys(found))


def bindable(path: Path, python: Path, venv: bool = False) -> Path:
    """`path`, when it may be shown to the sandbox: a venv or a Python installation, and neither `/` nor a
    directory holding $HOME (a planted `.venv/bin/python -> ~/.ssh/...` must not expose the home)."""
    home = Path.home().resolve()
    if path == Path(path.anchor) or path == home or path in home.parents:
        raise UserError(f"{python}: it would show {path} to the sandbox; pass --python with a real interpreter")
    if venv and (path / "pyvenv.cfg").is_file():
        return path
    if not any(any(path.glob(marker)) for marker in STDLIB_MARKERS):
        raise UserError(f"{python}: {path} holds no Python installation; pass --python with a real interpreter")
    return path


def pyvenv_home(config: Path) -> Path | None:
    """The `home` directory a venv's `pyvenv.cfg` names (its base interpreter's bin), if any."""
    for line in config.read_text(encoding="utf-8", errors="replace").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return Path(value.strip())
    return None


def prepare(choice: PythonChoice, scratch: Path, mode: str) -> tuple[Sandbox, Interpreter]:
    """The run's sandbox with `choice` as its interpreter, and that interpreter's version asked inside it."""
    if choice.path == own_python():
        return Sandbox.create(scratch, mode), Interpreter(choice.path, platform.python_version(), choice.how)
    sandbox = Sandbox.create(scratch, mode, python=choice.path, python_paths=bind_paths(Path(choice.path)))
    return sandbox, Interpreter(choice.path, probe(sandbox, choice), choice.how)


def probe(sandbox: Sandbox, choice: PythonChoice) -> str:
    """The interpreter's version, asked inside the sandbox; a UserError naming the fix when it does not start."""
    done = sandbox.run([sandbox.python, "-c", PROBE], sandbox.scratch, PROBE_TIMEOUT_S, writable=sandbox.scratch)
    answer = done.output.strip()
    if done.returncode == 0 and VERSION.fullmatch(answer):
        return answer
    last = answer.splitlines()[-1][:200] if answer else f"exit code {done.returncode}"
    raise UserError(f"{choice.how} {choice.path} does not start in the sandbox ({last}); pass --python PATH")
