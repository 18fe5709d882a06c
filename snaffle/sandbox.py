"""The one place a model-caused process starts: bubblewrap confinement, a scratch environment, capped output.

`Sandbox.run` starts a command under bubblewrap (`--unshare-all`: no network, private /proc, /dev and /tmp, a pid
namespace so the whole process tree ends with the call) with an allowlisted environment (never a key). The host is
visible read-only only where `data/sandbox.toml` lists it, plus the interpreter's prefixes; writable are only the
working copy (its `.git` read-only) and the scratch dir. Output is read through a byte cap at the pipe. Mode `none`
(`--sandbox none`, unsafe) runs the same command directly, with the same environment, caps and process cleanup.
The scratch venv sees the launching interpreter's packages through a `.pth` file, so the repo's tests run, while
`pip install` lands in the scratch venv and never in the host's site-packages.
"""

from __future__ import annotations

import argparse
import os
import resource
import selectors
import signal
import site
import subprocess
import sys
import sysconfig
import time
import venv
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

from snaffle import data
from snaffle.callgroup import CallGroup
from snaffle.diskguard import DiskBudget
from snaffle.exceptions import ToolFailure, UserError
from snaffle.types import SOURCE_DIRS
from snaffle.workspace import SAFE_GIT_ENV

OUTPUT_CAP = 8_000
BASH_TIMEOUT_S = 60.0
MODES = ("bubblewrap", "none")
BWRAP = "bwrap"
INSTALL_HINT = (
    "bubblewrap is not available here, and model-caused commands run only inside it: install it "
    "(as root: apt-get install bubblewrap) or pass --sandbox none to run them unconfined (unsafe)"
)
UNSAFE_WARNING = (
    "--sandbox none is unsafe: model-caused commands run unconfined on this host, with its network, "
    "its files (the user's home and secrets included) and no end to the processes they leave"
)
EXIT_GRACE_S = 0.5
READ_CHUNK = 65_536
BUBBLEWRAP_KEYS = (
    "system_paths",
    "etc_paths",
    "max_processes",
    "max_memory_mb",
    "fallback_address_space_mb",
    "max_disk_mb",
)
MEMORY_KILLED = "\n[snaffle: killed at this call's memory cap of {mb} MB (all its processes together)]\n"
DISK_STOPPED = "\n[snaffle: stopped: this call took more than {mb} MB of the disk]\n"
GUARD_EVERY_S = 0.1
PIP_SHIM = '#!/bin/sh\nexec "$VIRTUAL_ENV/bin/python" -m pip "$@"\n'


def own_python() -> str:
    """snaffle's interpreter as an absolute path without `..`: started as `../.venv/bin/python`, `sys.executable`
    keeps the `..`, which names nothing inside the sandbox, where the working directory is not mounted. Symlinks
    are kept (a venv's `python` is one, and resolving it would leave the venv)."""
    return os.path.normpath(os.path.abspath(sys.executable))


@dataclass(frozen=True)
class Confinement:
    """What a sandboxed process may see and use (from `data/sandbox.toml`; every key required)."""

    system_paths: tuple[str, ...]
    etc_paths: tuple[str, ...]
    max_processes: int
    max_memory_mb: int
    fallback_address_space_mb: int
    max_disk_mb: int
    keep_env: tuple[str, ...]
    path: str
    output_cap_bytes: int


@cache
def confinement() -> Confinement:
    where = "snaffle/data/sandbox.toml"
    tables = data.load("sandbox.toml")
    box = data.required(data.table(tables, "bubblewrap", where), BUBBLEWRAP_KEYS, f"{where} [bubblewrap]")
    environment = data.required(data.table(tables, "environment", where), ("keep", "path"), f"{where} [environment]")
    output = data.required(data.table(tables, "output", where), ("cap_bytes",), f"{where} [output]")
    return Confinement(
        system_paths=tuple(box["system_paths"]),
        etc_paths=tuple(box["etc_paths"]),
        max_processes=int(box["max_processes"]),
        max_memory_mb=int(box["max_memory_mb"]),
        fallback_address_space_mb=int(box["fallback_address_space_mb"]),
        max_disk_mb=int(box["max_disk_mb"]),
        keep_env=tuple(environment["keep"]),
        path=str(environment["path"]),
        output_cap_bytes=int(output["cap_bytes"]),
    )


@dataclass(frozen=True)
class Rlimits:
    """Per-process resource limits of one call (0 = not set)."""

    cpu_s: int = 0
    memory_bytes: int = 0
    file_bytes: int = 0


@dataclass(frozen=True)
class Completed:
    """The outcome of one subprocess: merged output, exit code, whether it timed out, bytes dropped at the cap."""

    output: str
    returncode: int | None
    timed_out: bool
    dropped: int = 0
    memory_exceeded: bool = False
    disk_exceeded: bool = False


@dataclass(frozen=True)
class Sandbox:
    """Where and how model-caused processes run: the scratch dir, their environment, the confinement mode."""

    scratch: Path
    env: dict[str, str]
    mode: str = "bubblewrap"
    readable: tuple[Path, ...] = field(default=())
    interpreter: str = ""
    """The interpreter chosen for the repository's code ('' : snaffle's own); its prefixes are in `readable`."""
    memory_mb: int = field(default_factory=lambda: confinement().max_memory_mb)
    """The memory all processes of one call may hold together (0: no cap)."""
    disk_mb: int = field(default_factory=lambda: confinement().max_disk_mb)
    """The disk space one call may take from the filesystems it writes to (0: not watched)."""

    @property
    def python(self) -> str:
        """The interpreter that runs the repository's code: tests, snippets, SBFL (snaffle's own unless chosen)."""
        return self.interpreter or own_python()

    @classmethod
    def create(
        cls, scratch: Path, mode: str = "bubblewrap", python: str = "", python_paths: tuple[Path, ...] = ()
    ) -> Sandbox:
        """A scratch venv and HOME, an allowlisted environment; refuses `bubblewrap` mode where it cannot start.
        `python` (with `python_paths`, its prefixes, shown read-only) runs the repository's code instead of
        snaffle's own interpreter (see `snaffle.interpreter`, which checks those paths)."""
        require_mode(mode)
        scratch.mkdir(parents=True, exist_ok=True)
        scratch = scratch.resolve()
        env_dir = scratch / "venv"
        if not (env_dir / "bin" / "python").exists():
            venv.EnvBuilder(system_site_packages=False, with_pip=False, symlinks=True).create(env_dir)
            _link_host_packages(env_dir)
            (env_dir / "bin" / "pip").write_text(PIP_SHIM)
            (env_dir / "bin" / "pip").chmod(0o755)
        home = scratch / "home"
        home.mkdir(exist_ok=True)
        readable = tuple(dict.fromkeys([*interpreter_paths(), *python_paths]))
        env = sandbox_env(env_dir, home, os.environ)
        if python:  # a shell's `python`, `pytest` are the chosen ones (their venv is read-only: pip cannot change it)
            env["PATH"] = f"{Path(python).parent}{os.pathsep}{env['PATH']}"
        return cls(scratch, env, mode, readable, python)

    def env_for(self, root: Path, *first: str) -> dict[str, str]:
        """The environment for running a repository's code: its import roots (and `first`) on PYTHONPATH."""
        return {**self.env, "PYTHONPATH": os.pathsep.join([*first, *map(str, import_roots(root))])}

    def run(
        self,
        argv: list[str] | str,
        cwd: Path,
        timeout_s: float,
        *,
        writable: Path,
        env: Mapping[str, str] | None = None,
        limits: Rlimits = Rlimits(),
        output_cap: int | None = None,
        readonly: bool = False,
    ) -> Completed:
        """Run one command confined; `writable` is the working copy (its `.git` stays read-only). A string is
        a bash command line. `readonly`: the copy and the scratch dir are read-only too, $HOME a tmpfs, and only
        `cwd` (a fresh dir inside the scratch dir) writable, so nothing the command writes outlives `cwd`.
        Never raises for what the command does; a failure to start is a `ToolFailure`."""
        command = ["/bin/bash", "-c", argv] if isinstance(argv, str) else list(argv)
        env = dict(self.env if env is None else env)
        cap = confinement().output_cap_bytes if output_cap is None else output_cap
        budget = CallBudget(limits, self.memory_mb, DiskBudget.watch((writable, self.scratch, cwd), self.disk_mb))
        if self.mode == "none":
            return spawn(command, cwd, env, timeout_s, cap, budget)
        mounts = Mounts(writable, cwd, readonly)
        wrapped = [*bubblewrap_argv(confinement(), self, mounts, env), *command]
        return spawn(wrapped, Path("/"), {"PATH": "/usr/bin:/bin"}, timeout_s, cap, budget)


@dataclass(frozen=True)
class CallBudget:
    """What one call may use: per-process rlimits, memory for all its processes together, the disk it may take."""

    limits: Rlimits
    memory_mb: int = 0
    disk: DiskBudget = DiskBudget((), 0)


@dataclass(frozen=True)
class Mounts:
    """Where one call works: the working copy, the working directory, and whether only `cwd` is writable."""

    copy: Path
    cwd: Path
    readonly: bool = False


def require_mode(mode: str) -> str:
    """Refuse an unknown mode, and `bubblewrap` where it cannot start; the warning to show (`none`) or ""."""
    if mode not in MODES:
        raise UserError(f"unknown sandbox mode {mode!r}: pass --sandbox {' or --sandbox '.join(MODES)}")
    if mode == "bubblewrap" and not bubblewrap_works():
        raise UserError(INSTALL_HINT)
    return UNSAFE_WARNING if mode == "none" else ""


def add_sandbox_arg(parser: argparse.ArgumentParser) -> None:
    """`--sandbox bubblewrap|none`, one option for every command that runs a model."""
    help_text = "confine model-caused commands with bubblewrap (default), or none: unconfined, unsafe"
    parser.add_argument("--sandbox", choices=MODES, default=MODES[0], help=help_text)


@dataclass(frozen=True)
class CallCaps:
    """A user's caps for every model-caused call of a run (`--memory-mb`, `--disk-mb`; None: data/sandbox.toml's)."""

    memory_mb: int | None = None
    disk_mb: int | None = None

    def applied(self, box: Sandbox) -> Sandbox:
        memory_mb = box.memory_mb if self.memory_mb is None else self.memory_mb
        disk_mb = box.disk_mb if self.disk_mb is None else self.disk_mb
        return replace(box, memory_mb=memory_mb, disk_mb=disk_mb)


def add_caps_args(parser: argparse.ArgumentParser) -> None:
    """`--memory-mb N` and `--disk-mb N`: what one call may use (0: no cap), for a repository whose tests need more."""
    conf = confinement()
    memory = f"memory all processes of one call may hold together, MB (default {conf.max_memory_mb}; 0: no cap)"
    disk = f"disk space one call may take, MB (default {conf.max_disk_mb}; 0: not watched)"
    parser.add_argument("--memory-mb", type=_megabytes, metavar="N", help=memory)
    parser.add_argument("--disk-mb", type=_megabytes, metavar="N", help=disk)


def caps_of(args: argparse.Namespace) -> CallCaps:
    return CallCaps(getattr(args, "memory_mb", None), getattr(args, "disk_mb", None))


def _megabytes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of MB: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a size cannot be negative: {value}")
    return value


def sandbox_env(env_dir: Path, home: Path, host: Mapping[str, str]) -> dict[str, str]:
    """The whole environment a sandboxed process gets: the allowlist of `data/sandbox.toml` and fixed values."""
    conf = confinement()
    env = {key: host[key] for key in conf.keep_env if key in host}
    env.update(
        PATH=f"{env_dir / 'bin'}{os.pathsep}{conf.path}",
        VIRTUAL_ENV=str(env_dir),
        HOME=str(home),
        TMPDIR="/tmp",
        XDG_CACHE_HOME=str(home / ".cache"),
        PIP_CACHE_DIR=str(home / ".cache" / "pip"),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(SAFE_GIT_ENV)  # a git the model runs reads no system or global config either
    return env


def interpreter_paths() -> tuple[Path, ...]:
    """The launching interpreter's prefixes and package dirs (real paths), shown read-only in the sandbox."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), *sysconfig.get_paths().values()}
    paths.add(str(Path(sys.executable).resolve().parent.parent))
    return tuple(sorted({Path(p).resolve() for p in paths if Path(p).exists()}))


def bubblewrap_argv(conf: Confinement, box: Sandbox, mounts: Mounts, env: Mapping[str, str]) -> list[str]:
    """bwrap's arguments up to the command: what is mounted where, the environment, the working directory."""
    args = [BWRAP, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/var/tmp"]
    for path in conf.system_paths:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.exists(path):
            args += ["--ro-bind", path, path]
    args += _ro_binds([*conf.etc_paths, *map(str, box.readable)])
    args += _writable_binds(box, mounts, env)
    for key, value in env.items():
        args += ["--setenv", key, value]
    return [*args, "--chdir", str(mounts.cwd), "--"]


def _writable_binds(box: Sandbox, mounts: Mounts, env: Mapping[str, str]) -> list[str]:
    """The scratch dir and the copy (its git data read-only); with `readonly`, all read-only but `cwd`."""
    bind = "--ro-bind" if mounts.readonly else "--bind"
    args = [bind, str(box.scratch), str(box.scratch), bind, str(mounts.copy), str(mounts.copy)]
    args += _ro_binds(map(str, git_paths(mounts.copy)))
    if mounts.readonly:
        args += ["--tmpfs", env.get("HOME", str(box.scratch / "home")), "--bind", str(mounts.cwd), str(mounts.cwd)]
    return args


def _ro_binds(paths: Iterable[str]) -> list[str]:
    args: list[str] = []
    for path in paths:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


def git_paths(root: Path) -> list[Path]:
    """A working copy's git data, shown read-only: its `.git` and the object stores it borrows (alternates)."""
    dot_git = root / ".git"
    if not dot_git.exists():
        return []
    paths = [dot_git]
    alternates = dot_git / "objects" / "info" / "alternates"
    if alternates.is_file():
        for line in alternates.read_text(encoding="utf-8", errors="replace").splitlines():
            target = (dot_git / "objects" / line.strip()).resolve() if line.strip() else None
            if target is not None and target.is_dir():
                paths.append(target)
    return paths


@cache
def bubblewrap_works() -> bool:
    """Whether bwrap can start a confined process here (installed, and namespaces permitted)."""
    try:
        probe = [BWRAP, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--", "/bin/true"]
        return subprocess.run(probe, capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def spawn(argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float, cap: int, budget: CallBudget) -> Completed:
    """Start in a new session and the call's cgroups (processes, and memory for all of them together) when they can
    be made; read at most `cap` bytes; stop it past its disk budget; end the tree. A stop at a cap is said."""
    group = CallGroup.create(confinement().max_processes, budget.memory_mb << 20)
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_child_setup(per_process(budget.limits, group, budget.memory_mb), group),
        )
    except OSError as exc:
        group.close()
        raise ToolFailure(f"could not start {argv[0]}: {exc}") from exc
    try:
        read = read_capped(proc, cap, time.monotonic() + timeout_s, budget.disk.exceeded)
    finally:
        _kill_group(proc)
        memory_exceeded = group.memory_exceeded()
        group.close()
        proc.wait()
    output = read.head.decode("utf-8", "replace")
    if read.dropped:
        output += f"\n[... {read.dropped} bytes cut ...]\n" + read.tail.decode("utf-8", "replace")
    if memory_exceeded:
        output += MEMORY_KILLED.format(mb=budget.memory_mb)
    if read.guarded:
        output += DISK_STOPPED.format(mb=budget.disk.budget_bytes >> 20)
    returncode = None if read.timed_out else proc.returncode
    return Completed(output, returncode, read.timed_out, read.dropped, memory_exceeded, read.guarded)


def per_process(limits: Rlimits, group: CallGroup, memory_mb: int) -> Rlimits:
    """The rlimits of each process: where no memory cgroup holds the call's cap, an address-space limit instead
    (virtual memory, so larger than the cap: `fallback_address_space_mb`); a call's own limit stays."""
    if not memory_mb or group.memory is not None or limits.memory_bytes:
        return limits
    return replace(limits, memory_bytes=confinement().fallback_address_space_mb << 20)


@dataclass(frozen=True)
class Read:
    """What `read_capped` kept of a call's output, and why it stopped reading."""

    head: bytes
    tail: bytes
    dropped: int
    timed_out: bool = False
    guarded: bool = False
    """The guard (the disk budget) said stop."""


def read_capped(
    proc: subprocess.Popen[bytes], cap: int, deadline: float, over: Callable[[], bool] = lambda: False
) -> Read:
    """Head and tail (each at most cap/2 bytes) of the output, the bytes dropped between, and whether time ran out
    or `over` (asked every GUARD_EVERY_S) said stop. Reading stops at EOF, or shortly after the process exits while
    a daemon still holds the pipe."""
    assert proc.stdout is not None
    fd, half = proc.stdout.fileno(), max(cap // 2, 1)
    head, tail, dropped, exited_at, checked = bytearray(), bytearray(), 0, None, time.monotonic()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                return Read(bytes(head), bytes(tail), dropped, timed_out=True)
            if now - checked >= GUARD_EVERY_S:
                checked = now
                if over():
                    return Read(bytes(head), bytes(tail), dropped, guarded=True)
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > EXIT_GRACE_S:
                break
            if not selector.select(timeout=min(0.1, deadline - now)):
                continue
            chunk = os.read(fd, READ_CHUNK)
            if not chunk:
                break
            room = max(half - len(head), 0)
            head += chunk[:room]
            tail += chunk[room:]
            if len(tail) > half:
                dropped += len(tail) - half
                del tail[: len(tail) - half]
    return Read(bytes(head), bytes(tail), dropped)


def _child_setup(limits: Rlimits, group: CallGroup) -> Callable[[], None]:
    def setup() -> None:
        group.join()
        for kind, value in (
            (resource.RLIMIT_CPU, limits.cpu_s),
            (resource.RLIMIT_AS, limits.memory_bytes),
            (resource.RLIMIT_FSIZE, limits.file_bytes),
        ):
            if value:
                resource.setrlimit(kind, (value, value))
        if group.pids is None and os.geteuid() != 0:
            processes = confinement().max_processes
            resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))

    return setup


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
