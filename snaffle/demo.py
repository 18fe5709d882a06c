"""`snaffle demo`: fix the bundled example bug end to end, printing progress, the diff and the tests around it."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from snaffle import data
from snaffle.console import call_line
from snaffle.exceptions import UserError
from snaffle.model import local as local_model
from snaffle.model.engines import engine_choice
from snaffle.sandbox import add_sandbox_arg, require_mode
from snaffle.types import Event, Limits, Task

if TYPE_CHECKING:
    from snaffle.model.client import ModelConfig

EXAMPLE = "median"
DEMO_SAMPLES = 3
"""One-shot whole-definition rewrites (the 1.5B model's form, data/edit_formats.toml), 3 samples voted."""
GIT = [
    "git",
    "-c",
    "user.email=demo@snaffle.invalid",
    "-c",
    "user.name=snaffle-demo",
    "-c",
    "commit.gpgsign=false",
]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="fix a bundled example bug end to end")
    p.add_argument("--base-url", help="an OpenAI-compatible endpoint; default: the embedded local model")
    p.add_argument("--model", default="default")
    size = "the embedded local model's size (default %(default)s)"
    p.add_argument("--size", choices=tuple(local_model.SPECS), default=local_model.DEFAULT_SIZE, help=size)
    p.add_argument("--scripted", action="store_true", help="replay a recorded fix instead of running a model")
    p.add_argument("--tool-protocol", choices=("native", "text"), default="native")
    p.add_argument("--out", type=Path, help="where to keep the example repo and the run (default: a temp dir)")
    local_model.add_engine_args(p)
    add_sandbox_arg(p)
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from snaffle.model.client import ModelConfig
    from snaffle.testing import ScriptedServer, load_script

    warning = require_mode(args.sandbox)
    if warning:
        print(f"snaffle: warning: {warning}", file=sys.stderr)
    if args.out is not None and args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        raise UserError(f"--out {args.out} is not an empty directory; pass a new one (the demo writes its repo there)")
    example = resources.files("snaffle.examples").joinpath(EXAMPLE)
    root = args.out or Path(tempfile.mkdtemp(prefix="snaffle-demo-"))
    repo = prepare_repo(Path(str(example.joinpath("repo"))), root / "repo")
    issue = example.joinpath("issue.md").read_text(encoding="utf-8")
    print(f"example repository: {repo}\nissue: {issue.splitlines()[0]}")
    print(f"tests before: {repo_tests(repo)}")
    if args.base_url:
        model = ModelConfig(args.base_url, args.model, tool_protocol=args.tool_protocol)
        return run_demo(repo, issue, model, root, args.sandbox)
    if args.scripted:
        print("model: the scripted model server replaying a recorded fix (no language model runs in this mode)")
        with ScriptedServer(load_script(Path(str(example.joinpath("scripted.json"))))) as server:
            return run_demo(repo, issue, ModelConfig(server.base_url, "scripted"), root, args.sandbox)
    engine = engine_choice(args.engine, args.parallel, args.server_binary)
    local_model.prepare_engine(engine, None)
    print(f"model: starting the embedded {args.size} model on 127.0.0.1 (first run assembles it from its packages)")
    with local_model.serve(args.size, engine=engine) as server:
        slots = f" ({server.engine}, {server.slots} slots)" if server.slots > 1 else ""
        print(f"model: {server.model} at {server.base_url}{slots}")
        model = ModelConfig(server.base_url, server.model, tool_protocol=local_model.TOOL_PROTOCOL)
        return run_demo(repo, issue, model, root, args.sandbox)


def prepare_repo(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    for command in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "statkit 0.3"]):
        subprocess.run([*GIT, *command], cwd=target, check=True, capture_output=True)
    return target


def run_demo(repo: Path, issue: str, model: ModelConfig, root: Path, sandbox: str) -> int:
    from snaffle.agentless.config import PipelineConfig
    from snaffle.run import SolveConfig, solve, zero_pricer

    pipeline = PipelineConfig(samples=DEMO_SAMPLES, one_shot=True)
    limits = data.load_record(Limits, "limits.toml", "demo")
    config = SolveConfig(
        "agentless",
        model,
        limits,
        root / "run",
        zero_pricer,
        observer=progress_printer(),
        pipeline=pipeline,
        sandbox=sandbox,
        apply=True,  # the demo's repo is its own copy: the fix goes into it, so its tests can be run after
    )
    attempt = solve(Task(repo=repo, issue=issue, instance_id="demo-median"), config)
    print(f"\nexit status: {attempt.exit_status}\n\n{attempt.patch or '(no change)'}")
    after = repo_tests(repo)
    print(f"tests after: {after}")
    print(snippets_after(repo, issue, root, sandbox))
    fixed = after.startswith("passed") and attempt.exit_status in ("validated", "submitted")
    print("the model fixed the bug." if fixed else "the model did NOT fix the bug.")
    print(f"trajectory: {attempt.trajectory_path}\nresult: {attempt.trajectory_path.parent / 'result.json'}")
    return 0


def snippets_after(repo: Path, issue: str, root: Path, mode: str) -> str:
    """What the issue's snippets do on the repository now (after the run), one line each."""
    from snaffle.agentless import facts
    from snaffle.sandbox import Sandbox

    found = facts.gather(issue, repo, Sandbox.create(root / "snippets", mode))
    return "\n".join(f"the issue's snippet {r.number} after: {r.seen.summary()}" for r in found.runs)


def repo_tests(repo: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "no output"
    return f"{'passed' if proc.returncode == 0 else 'FAILED'} ({summary})"


def progress_printer() -> Callable[[Event], None]:
    started = time.monotonic()

    def show(event: Event) -> None:
        elapsed = f"[{time.monotonic() - started:6.1f}s]"
        if event["type"] == "model_call":
            print(f"{elapsed} {call_line(event)}")
        elif event["type"] == "tool_call":
            print(f"{elapsed}   {event['name']} {str(event['arguments'])[:100]}")
        elif event["type"] == "stage":
            print(f"{elapsed} stage {event['stage']}: {event['decision']}")
            for row in event.get("snippets", []) if event["stage"] == "issue_facts" else []:
                print(f"{elapsed}   the issue's snippet {row['snippet']} before the fix: {row['did']}")
        elif event["type"] in ("gate", "retry"):
            print(f"{elapsed}   {event['type']}: {event.get('gate') or event.get('error')} {event.get('reason', '')}")
        sys.stdout.flush()

    return show
