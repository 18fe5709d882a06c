"""`snaffle ...` subcommands. Concrete classes are chosen here and passed in built."""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn, cast

from snaffle import __version__
from snaffle.exceptions import EndpointError, UserError

if TYPE_CHECKING:  # the modules behind the commands load on first use, so --help and --version start fast
    from snaffle.model.client import ModelConfig
    from snaffle.run import SolveConfig
    from snaffle.shim.pricing import Pricing
    from snaffle.types import Limits, Task

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

SHIM_RUN = "solve"
EXIT_USAGE = 2
"""Bad input: arguments, files, a URL that is not one; one line on stderr, nothing run."""
EXIT_MODEL_UNREACHABLE = 3
"""The model endpoint cannot be used: nothing accepts a connection, it is no OpenAI-compatible API, or it failed
before any answer."""


NODE_ID_HINT = "pass a pytest node id such as tests/test_x.py::test_y"


class DefaultsFormatter(argparse.HelpFormatter):
    """Help that shows every option's default (`--help` then tells what runs), unless its text already says it;
    switches and options that are off unless given say themselves what they do."""

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and shows_default(action):
            action = copy.copy(action)
            action.help = "(default %(default)s)"
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        said = "%(default)" in help_text or re.search(r"\bdefault[: ]", help_text)
        if shows_default(action) and not said and help_text != argparse.SUPPRESS:
            return f"{help_text} (default %(default)s)".lstrip()
        return action.help


def shows_default(action: argparse.Action) -> bool:
    """Whether `--help` states the option's default: it has a value and the option takes one."""
    has_value = action.default not in (None, argparse.SUPPRESS, [], "")
    return bool(has_value and action.nargs != 0 and action.option_strings)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose refusals are one line on stderr (exit 2) that points at `--help`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(command_of(words))
    args = parse(parser, words)
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


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """The arguments; a command taking `--config`/`-c` gets them layered under its flags (see snaffle/settings.py)."""
    if not command_of(argv):
        return parser.parse_args(argv)  # --help, --version: nothing more is imported
    from snaffle import settings

    command, depth = settings.command_parser(parser, argv)
    if not settings.is_layered(command):
        return parser.parse_args(argv)
    args, resolved = settings.parse_layered(command, argv[depth:])
    args.settings = resolved
    return args


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def command_of(argv: Sequence[str]) -> str:
    """The command `argv` names (its first word that is no option), or "" for none."""
    return next((word for word in argv if not word.startswith("-")), "")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """snaffle's parser. With `command`, only that command is built in full and the others are their help line, so
    `snaffle --help` imports none of the modules behind them (None: all in full)."""
    parser = OneLineParser(prog="snaffle", description="A light harness for weak models fixing bugs.")
    parser.add_argument("--version", action="version", version=f"snaffle {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")  # OneLineParser all the way down
    sub = cast("argparse._SubParsersAction[argparse.ArgumentParser]", subparsers)
    for name, (help_text, register) in COMMANDS.items():
        if command is None or command == name:
            register(sub)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def _demo(sub: Subparsers) -> None:
    from snaffle import demo

    demo.register(sub)


def _shim(sub: Subparsers) -> None:
    from snaffle.shim import cli as shim_cli

    shim_cli.register(sub)


def _swebench(sub: Subparsers) -> None:
    from snaffle.swebench import cli as swebench_cli

    swebench_cli.register(sub)


def _env(sub: Subparsers) -> None:
    from snaffle.swebench import env_cli

    env_cli.register(sub)


def _trace(sub: Subparsers) -> None:
    from snaffle.trace import cli as trace_cli

    trace_cli.register_trace(sub)


def _ab(sub: Subparsers) -> None:
    from snaffle.trace import cli as trace_cli

    trace_cli.register_ab(sub)


def _model(sub: Subparsers) -> None:
    from snaffle.model import local as local_model

    local_model.register(sub)


def add_solve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from snaffle import settings
    from snaffle.agentless.options import add_cap_args, add_pipeline_args
    from snaffle.arms import ARMS, DEFAULT_ARM
    from snaffle.sandbox import add_caps_args, add_sandbox_arg

    p = sub.add_parser("solve", help=COMMANDS["solve"][0], description="Fix an issue in a repo.")
    p.add_argument("--repo", type=Path, required=True, help="path of a git repository")
    issue = p.add_mutually_exclusive_group(required=True)
    issue.add_argument("--issue", help="the issue text")
    issue.add_argument("--issue-file", type=Path, help="a file holding the issue text")
    failing = "a pytest node id that fails because of the issue (used to validate; default: none)"
    p.add_argument("--failing-test", help=failing)
    p.add_argument("--arm", choices=tuple(ARMS), default=DEFAULT_ARM, help="the arm")
    settings.add_model_args(p)
    add_pipeline_args(p)
    add_cap_args(p)
    add_sandbox_arg(p)
    add_caps_args(p)
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
    p.add_argument("--quiet", action="store_true", help="no progress and no summary (errors and warnings only)")
    p.add_argument("--json", action="store_true", help="no progress; one JSON line at the end (for scripts)")
    settings.add_config_args(p)
    p.set_defaults(func=cmd_solve)


def cmd_solve(args: argparse.Namespace) -> int:
    from snaffle import settings
    from snaffle.agentless.options import pipeline_config
    from snaffle.console import Progress, choose_mode
    from snaffle.interpreter import choose
    from snaffle.model.client import check_endpoint
    from snaffle.run import SolveConfig, check_run_dir, clear_run_dir, collect_failing_test, solve
    from snaffle.sandbox import caps_of, require_mode
    from snaffle.shim.pricing import load_pricing
    from snaffle.trajectory import instance_name
    from snaffle.types import Task
    from snaffle.workspace import repo_root

    if args.shim and not args.base_url:
        args.base_url = args.shim.rstrip("/") + "/v1"  # the running shim knows the upstream
    issue, failing_test = read_issue(args), check_failing_test(args.repo, args.failing_test)
    task = Task(args.repo, issue, instance_name(args.repo), failing_test=failing_test)
    pricing = load_pricing(None)  # one table for the harness and the in-process shim: a warning is said once
    progress = Progress(choose_mode(args.quiet, args.json, sys.stdout.isatty()), sys.stdout)
    config = SolveConfig(
        args.arm,
        model_config(args),
        limits_of(args),
        args.out,
        pricing.dollars,
        observer=progress,
        pipeline=pipeline_config(args),
        sandbox=args.sandbox,
        caps=caps_of(args),
        apply=args.apply,
        settings=settings.as_json(getattr(args, "settings", ()), leave_out=("issue",)),
    )
    warn(require_mode(args.sandbox))
    repo = repo_root(args.repo)
    python = choose(repo, args.python)
    config = replace(config, python=python)
    previous_run = check_run_dir(args.out, args.overwrite)
    check_endpoint(args.shim.rstrip("/") + "/v1" if args.shim else config.model.base_url)
    collect_failing_test(task, args.sandbox, python)  # pytest collects it in the sandbox, before any model call
    clear_run_dir(previous_run)  # only once the run can start: a refused start loses nothing
    if not args.quiet:
        print(f"snaffle: python {python.path} ({python.how})", file=sys.stderr)
    with metered(config, task, args, pricing) as metered_config, progress.live():
        attempt = solve(task, metered_config)
    result = json.loads((args.out / "result.json").read_text())
    summary = {
        "exit_status": attempt.exit_status,
        "run_dir": str(args.out),
        "patch_lines": len(attempt.patch.splitlines()),
    }
    if args.json:
        print(json.dumps({**summary, "applied": result["applied"]}))
    progress.summary(result, args.out, attempt.patch)
    if attempt.exit_status == "model_error" and attempt.usage.total_tokens == 0:
        print(f"snaffle: error: {result['message']} (check --base-url)", file=sys.stderr)
        return EXIT_MODEL_UNREACHABLE
    return report_patch(args, repo, attempt.patch, result)


def report_patch(args: argparse.Namespace, repo: Path, patch: str, result: dict[str, object]) -> int:
    """Say where the patch went: applied, waiting in the run dir (how to apply it), or refused (exit 2, why)."""
    if not patch.strip() or (args.quiet and (result["applied"] or not args.apply)):
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
def metered(config: SolveConfig, task: Task, args: argparse.Namespace, pricing: Pricing) -> Iterator[SolveConfig]:
    """Route the model calls through the metering shim: an in-process one by default, or `--shim URL`."""
    from snaffle.run import LEDGER_FILE
    from snaffle.shim.server import ShimConfig, start_shim

    config = with_endpoint_slots(config)
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
    with start_shim(shim_config, pricing) as handle:
        yield _through(config, handle.base_url_for(run, instance), handle.ledger_url(run, instance))


def with_endpoint_slots(config: SolveConfig) -> SolveConfig:
    """`--concurrency 0`: the endpoint's slots, asked of the endpoint itself (the shim does not pass its /props)."""
    from snaffle.model.engines import sample_workers

    pipeline = config.pipeline
    if pipeline.concurrency:
        return config
    workers = sample_workers(0, pipeline.samples, config.model.base_url)
    return replace(config, pipeline=replace(pipeline, concurrency=workers))


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
    from snaffle.types import Limits

    values = (args.max_turns, args.max_tokens, args.max_dollars, args.timeout)
    if any(v < 0 for v in values):
        raise UserError("caps must be >= 0 (0 means no cap)")
    return Limits(args.max_turns, args.max_tokens, args.max_dollars, args.timeout)


def add_prompt_size(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from snaffle.arms import ARMS, DEFAULT_ARM

    p = sub.add_parser("prompt-size", help=COMMANDS["prompt-size"][0])
    p.add_argument("--arm", choices=tuple(ARMS), default=DEFAULT_ARM, help="the arm")
    p.add_argument("--tool-protocol", choices=("native", "text"), default="native", help="how tools are offered")
    p.set_defaults(func=cmd_prompt_size)


def cmd_prompt_size(args: argparse.Namespace) -> int:
    from snaffle.arms import ARMS

    print(json.dumps(ARMS[args.arm].fixed_context(args.tool_protocol)))
    return 0


def add_localize(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from snaffle.agentless.localize import TOP

    p = sub.add_parser("localize", help=COMMANDS["localize"][0])
    p.add_argument("--repo", type=Path, required=True, help="path of a git repository")
    issue = p.add_mutually_exclusive_group(required=True)
    issue.add_argument("--issue", help="the issue text")
    issue.add_argument("--issue-file", type=Path, help="a file holding the issue text")
    failing = "a pytest node id that fails; enables SBFL from coverage (default: none)"
    p.add_argument("--failing-test", help=failing)
    p.add_argument("--top", type=int, default=TOP, help="how many files and how many entities are shown")
    p.add_argument("--json", action="store_true", help="print JSON (the stable contract)")
    p.set_defaults(func=cmd_localize)


def cmd_localize(args: argparse.Namespace) -> int:
    from snaffle.agentless.localize import localize_repo
    from snaffle.workspace import repo_root

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


def add_config(sub: Subparsers) -> None:
    p = sub.add_parser("config", help=COMMANDS["config"][0], description="Settings as data (see --config and -c).")
    commands = p.add_subparsers(title="config commands", metavar="COMMAND")
    show = commands.add_parser(
        "show",
        help="print the effective settings of a command line and where each came from",
        description="Print the settings `snaffle COMMAND ARGS` would run with, as a config file (TOML) with the "
        "origin of each: default, env, config FILE, -c or flag. Nothing runs; required options may be missing.",
    )
    show.add_argument("--json", action="store_true", help="print {key: {value, from}} as JSON")
    words = "solve (the default) or swebench run, then its --config, -c and flags"
    show.add_argument("words", nargs=argparse.REMAINDER, metavar="COMMAND [ARGS]", help=words)
    show.set_defaults(func=cmd_config_show)
    p.set_defaults(func=lambda args: _usage(p))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return EXIT_USAGE


def cmd_config_show(args: argparse.Namespace) -> int:
    from snaffle import settings

    words = list(args.words) or ["solve"]
    command, depth = settings.command_parser(build_parser(words[0]), words)
    if not settings.is_layered(command):
        raise UserError(f"{' '.join(words[:1])!r} takes no settings: pass solve or swebench run")
    _, resolved = settings.parse_layered(command, words[depth:], strict=False)
    if args.json:
        print(json.dumps(settings.as_json(resolved)))
        return 0
    print(f"# {command.prog}: default < env < config file < -c < flag")
    print(settings.as_toml(resolved), end="")
    return 0


COMMANDS: dict[str, tuple[str, Callable[[Subparsers], None]]] = {
    "solve": ("fix an issue in a git repository", add_solve),
    "prompt-size": ("print an arm's fixed context (system prompt + tool schemas)", add_prompt_size),
    "localize": ("rank the files and entities an issue is about (no model)", add_localize),
    "demo": ("fix a bundled example bug end to end", _demo),
    "shim": ("the metering proxy between harnesses and the model endpoint", _shim),
    "swebench": ("run and grade SWE-bench batches", _swebench),
    "env": ("build and list environments per (repo, version)", _env),
    "trace": ("read trajectories back: show, stats, labels, html, export", _trace),
    "ab": ("two runs side by side, head-to-head, CI on the resolve-rate difference", _ab),
    "model": ("the embedded local model (needs snaffle[local])", _model),
    "config": ("the settings a command runs with, and where each comes from", add_config),
}
"""Each command's help line and the function adding it in full (its module imported then, not before)."""


if __name__ == "__main__":
    raise SystemExit(main())
