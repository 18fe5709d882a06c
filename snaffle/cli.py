"""`snaffle ...` subcommands. Concrete classes are chosen here and passed in built."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, NoReturn, cast

from snaffle import __version__, demo
from snaffle.agentless import localize
from snaffle.agentless.options import add_cap_args, add_pipeline_args, pipeline_config
from snaffle.arms import ARMS, DEFAULT_ARM
from snaffle.exceptions import EndpointError, UserError
from snaffle.model import local as local_model
from snaffle.sandbox import add_sandbox_arg, require_mode
from snaffle.shim import cli as shim_cli
from snaffle.swebench import cli as swebench_cli
from snaffle.swebench import env_cli
from snaffle.trace import cli as trace_cli
from snaffle.types import Limits, Task
from snaffle.workspace import repo_root

if TYPE_CHECKING:  # the modules behind the commands load on first use, so --help and --version start fast
    from snaffle.model.client import ModelConfig
    from snaffle.run import SolveConfig

SHIM_RUN = "solve"
EXIT_USAGE = 2
"""Bad input: arguments, files, a URL that is not one; one line on stderr, nothing run."""
EXIT_MODEL_UNREACHABLE = 3
"""The model endpoint cannot be used: nothing accepts a connection, it is no OpenAI-compatible API, or it failed
before any answer."""


NODE_ID_HINT = "pass a pytest node id such as tests/test_x.py::test_y"


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose refusals are one line on stderr (exit 2) that points at `--help`."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return EXIT_USAGE
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return int(args.func(args))
    except EndpointError as exc:
        print(f"snaffle: error: {exc}", file=sys.stderr)
        return EXIT_MODEL_UNREACHABLE
    except UserError as exc:
        print(f"snaffle: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="snaffle", description="A light harness for weak models fixing bugs.")
    parser.add_argument("--version", action="version", version=f"snaffle {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")  # OneLineParser all the way down
    sub = cast("argparse._SubParsersAction[argparse.ArgumentParser]", subparsers)
    add_solve(sub)
    add_prompt_size(sub)
    add_localize(sub)
    demo.register(sub)
    shim_cli.register(sub)
    swebench_cli.register(sub)
    env_cli.register(sub)
    trace_cli.register(sub)
    local_model.register(sub)
    return parser


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", default=os.environ.get("SNAFFLE_BASE_URL"), help="OpenAI-compatible URL")
    parser.add_argument("--model", default=os.environ.get("SNAFFLE_MODEL", "default"), help="model name")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    parser.add_argument("--temperature", type=float, default=None, help="sent only when given")
    parser.add_argument("--max-output-tokens", type=int, default=None)
    protocols = ("native", "text")
    help_text = "native tool_calls, or <tool_call> blocks in the reply (servers without tool calling)"
    parser.add_argument("--tool-protocol", choices=protocols, default="native", help=help_text)


def add_solve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("solve", help="fix an issue in a git repository", description="Fix an issue in a repo.")
    p.add_argument("--repo", type=Path, required=True, help="path of a git repository")
    issue = p.add_mutually_exclusive_group(required=True)
    issue.add_argument("--issue", help="the issue text")
    issue.add_argument("--issue-file", type=Path, help="a file holding the issue text")
    p.add_argument("--failing-test", help="a pytest node id that fails because of the issue (used to validate)")
    p.add_argument("--arm", choices=tuple(ARMS), default=DEFAULT_ARM, help="the arm (default %(default)s)")
    add_model_args(p)
    add_pipeline_args(p)
    add_cap_args(p)
    add_sandbox_arg(p)
    python = "the interpreter that runs the repo's tests and snippets (default: the repo's .venv/venv, else snaffle's)"
    p.add_argument("--python", metavar="PATH", help=python)
    p.add_argument("--out", type=Path, required=True, help="run directory for trajectory, patch and result")
    overwrite = "replace the previous run in --out (refused when it holds anything else)"
    p.add_argument("--overwrite", action="store_true", help=overwrite)
    apply = "apply the patch to --repo at the end (refused when the tree changed during the run)"
    p.add_argument("--apply", action="store_true", help=apply)
    shim = p.add_mutually_exclusive_group()
    shim.add_argument("--no-shim", action="store_true", help="talk to the endpoint directly (no metering shim)")
    shim.add_argument("--shim", metavar="URL", help="use a running shim (snaffle shim serve) at URL")
    p.set_defaults(func=cmd_solve)


def cmd_solve(args: argparse.Namespace) -> int:
    from snaffle.interpreter import choose
    from snaffle.model.client import check_endpoint
    from snaffle.run import SolveConfig, check_run_dir, clear_run_dir, solve
    from snaffle.shim.pricing import load_pricing

    if args.shim and not args.base_url:
        args.base_url = args.shim.rstrip("/") + "/v1"  # the running shim knows the upstream
    issue, failing_test = read_issue(args), check_failing_test(args.repo, args.failing_test)
    task = Task(args.repo, issue, args.repo.resolve().name, failing_test=failing_test)
    config = SolveConfig(
        args.arm,
        model_config(args),
        limits_of(args),
        args.out,
        load_pricing(None).dollars,
        pipeline=pipeline_config(args),
        sandbox=args.sandbox,
        apply=args.apply,
    )
    warn(require_mode(args.sandbox))
    repo = repo_root(args.repo)
    python = choose(repo, args.python)
    config = replace(config, python=python)
    previous_run = check_run_dir(args.out, args.overwrite)
    check_endpoint(args.shim.rstrip("/") + "/v1" if args.shim else config.model.base_url)
    clear_run_dir(previous_run)  # only once the run can start: a refused start loses nothing
    print(f"snaffle: python {python.path} ({python.how})", file=sys.stderr)
    with metered(config, task, args) as metered_config:
        attempt = solve(task, metered_config)
    result = json.loads((args.out / "result.json").read_text())
    summary = {
        "exit_status": attempt.exit_status,
        "run_dir": str(args.out),
        "patch_lines": len(attempt.patch.splitlines()),
    }
    print(json.dumps({**summary, "applied": result["applied"]}))
    if attempt.exit_status == "model_error" and attempt.usage.total_tokens == 0:
        print(f"snaffle: error: {result['message']} (check --base-url)", file=sys.stderr)
        return EXIT_MODEL_UNREACHABLE
    return report_patch(args, repo, attempt.patch, result)


def report_patch(args: argparse.Namespace, repo: Path, patch: str, result: dict[str, object]) -> int:
    """Say where the patch went: applied, waiting in the run dir (how to apply it), or refused (exit 2, why)."""
    if not patch.strip():
        return 0
    diff = (args.out / "patch.diff").resolve()
    by_hand = f"git -C {repo} apply {diff}"
    if result["applied"]:
        print(f"snaffle: applied the patch to {repo} (a copy is in {diff})", file=sys.stderr)
    elif not args.apply:
        print(f"snaffle: {repo} is untouched; to apply the patch: {by_hand}", file=sys.stderr)
    elif str(result["not_applied"]).startswith("the run ended"):
        print(f"snaffle: {result['not_applied']}; to apply it anyway: {by_hand}", file=sys.stderr)
    else:
        print(f"snaffle: error: not applied: {result['not_applied']}; to apply it by hand: {by_hand}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def warn(line: str) -> None:
    """A warning line on stderr (nothing for an empty one)."""
    if line:
        print(f"snaffle: warning: {line}", file=sys.stderr)


@contextmanager
def metered(config: SolveConfig, task: Task, args: argparse.Namespace) -> Iterator[SolveConfig]:
    """Route the model calls through the metering shim: an in-process one by default, or `--shim URL`."""
    from snaffle.run import LEDGER_FILE
    from snaffle.shim.server import ShimConfig, start_shim

    if args.no_shim:
        yield config
        return
    run, instance = SHIM_RUN, _segment(task.instance_id)
    if args.shim:
        url = args.shim.rstrip("/")
        yield _through(config, f"{url}/i/{run}/{instance}/v1", f"{url}/ledger/{run}/{instance}")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    shim_config = ShimConfig(
        upstream=config.model.base_url,
        db=args.out / LEDGER_FILE,
        api_key_env=args.api_key_env if args.api_key_env in os.environ else None,
    )
    with start_shim(shim_config) as handle:
        yield _through(config, handle.base_url_for(run, instance), handle.ledger_url(run, instance))


def _through(config: SolveConfig, base_url: str, ledger_url: str) -> SolveConfig:
    model = replace(config.model, base_url=base_url, api_key="snaffle-shim")
    return replace(config, model=model, shim_ledger_url=ledger_url, secrets=(config.model.api_key,))


def _segment(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "task"


def read_issue(args: argparse.Namespace) -> str:
    text = str(args.issue) if args.issue is not None else read_text_file(Path(args.issue_file), "the issue file")
    if not text.strip():
        raise UserError("the issue text is empty; pass --issue TEXT or a non-empty --issue-file")
    return text


def read_text_file(path: Path, what: str) -> str:
    """A UTF-8 text file's contents; a file that cannot be read, is binary (a NUL byte) or is not UTF-8 is refused."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.__class__.__name__}") from exc
    if b"\0" in data:
        raise UserError(f"{what} {path} is a binary file: pass a text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {path} is not UTF-8 text (byte {exc.start}): pass a UTF-8 text file") from exc


def check_failing_test(repo: Path, node: str | None) -> str | None:
    """The `--failing-test` node id when it names a file or directory inside the repository, with non-empty names
    after each `::`; an option, a control character or a path outside is refused (a missing repo is refused later)."""
    if node is None:
        return None
    shown = f"--failing-test {node!r}"
    if not node.strip():
        raise UserError(f"--failing-test is empty: {NODE_ID_HINT}")
    if node.lstrip().startswith("-"):
        raise UserError(f"{shown} looks like an option: {NODE_ID_HINT}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in node):
        raise UserError(f"{shown} holds a control character: {NODE_ID_HINT}")
    path, *names = node.split("::")
    if any(not name for name in names):
        raise UserError(f"{shown} has an empty name after '::': {NODE_ID_HINT}")
    if not repo.is_dir():
        return node
    root = repo.resolve()
    target = (root / path).resolve()
    if Path(path).is_absolute() or not target.is_relative_to(root):
        raise UserError(f"{shown} points outside the repository: {NODE_ID_HINT}")
    if not target.exists():
        raise UserError(f"{shown}: {path} is not in the repository {repo}: {NODE_ID_HINT}")
    return node


def model_config(args: argparse.Namespace) -> ModelConfig:
    from snaffle.model.client import ModelConfig

    if not args.base_url:
        raise UserError("no model endpoint: pass --base-url or set SNAFFLE_BASE_URL")
    return ModelConfig(
        base_url=args.base_url,
        model=args.model,
        api_key=os.environ.get(args.api_key_env, "not-needed"),
        temperature=args.temperature,
        max_output_tokens=args.max_output_tokens,
        tool_protocol=args.tool_protocol,
    )


def limits_of(args: argparse.Namespace) -> Limits:
    values = (args.max_turns, args.max_tokens, args.max_dollars, args.timeout)
    if any(v < 0 for v in values):
        raise UserError("caps must be >= 0 (0 means no cap)")
    return Limits(args.max_turns, args.max_tokens, args.max_dollars, args.timeout)


def add_prompt_size(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("prompt-size", help="print an arm's fixed context (system prompt + tool schemas)")
    p.add_argument("--arm", choices=tuple(ARMS), default=DEFAULT_ARM)
    p.add_argument("--tool-protocol", choices=("native", "text"), default="native")
    p.set_defaults(func=cmd_prompt_size)


def cmd_prompt_size(args: argparse.Namespace) -> int:
    print(json.dumps(ARMS[args.arm].fixed_context(args.tool_protocol)))
    return 0


def add_localize(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("localize", help="rank the files and entities an issue is about (no model)")
    p.add_argument("--repo", type=Path, required=True)
    issue = p.add_mutually_exclusive_group(required=True)
    issue.add_argument("--issue")
    issue.add_argument("--issue-file", type=Path)
    p.add_argument("--failing-test", help="a pytest node id that fails; enables SBFL from coverage")
    p.add_argument("--top", type=int, default=localize.TOP, help="files and entities shown (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON (the stable contract)")
    p.set_defaults(func=cmd_localize)


def cmd_localize(args: argparse.Namespace) -> int:
    from snaffle.agentless.localize import localize_repo

    issue = read_issue(args)
    repo_root(args.repo)
    failing_test = check_failing_test(args.repo, args.failing_test)
    if args.top < 1:
        raise UserError("--top must be at least 1")
    result = localize_repo(args.repo.resolve(), issue, failing_test, args.top)
    if args.json:
        print(json.dumps(result.as_json()))
        return 0
    for path, score in result.files:
        print(f"{score:7.3f}  {path}")
    for candidate in result.entities:
        print(f"{candidate.score:7.3f}  {candidate.selector}  [{', '.join(candidate.signals)}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
