"""`snaffle swebench run` (the batch runner) and `snaffle swebench grade` (the grader), added by `register`.

The modules behind them (the pipeline, the grader) are imported when a command runs, not when its parser is built.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import MISSING, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snaffle import settings
from snaffle.agentless.options import add_cap_args, add_pipeline_args
from snaffle.arms import ARMS, DEFAULT_ARM
from snaffle.cache import cache_dir
from snaffle.exceptions import UserError
from snaffle.sandbox import add_caps_args, add_sandbox_arg, caps_of
from snaffle.swebench.workspaces import FORGE_URL, Sources
from snaffle.types import Limits

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from snaffle.swebench.batch import BatchConfig
    from snaffle.swebench.instances import Instance

EXTERNAL = ("mini-swe-agent",)
"""The external harnesses (snaffle.adapters.EXTERNAL's keys, a test holds them equal), named here so that building
the parser does not import the adapters (0.7 s)."""
HARNESSES = (*ARMS, *EXTERNAL)
SETTINGS_FILE = "settings.toml"
"""The batch dir's record of the settings `swebench run` was last started with: a config file (`--config` reruns)."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    description = "Run a harness on SWE-bench instances (run) and grade its predictions (grade)."
    parser = sub.add_parser("swebench", help="run and grade SWE-bench batches", description=description)
    commands = parser.add_subparsers(title="swebench commands", metavar="COMMAND")
    add_run(commands)
    add_grade(commands)
    parser.set_defaults(func=lambda args: usage(parser))


def usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--instances", type=Path, required=True, help="SWE-bench instances (.json, .jsonl, .gz)")
    p.add_argument("--filter", help="regular expression on instance_id (default: all)")
    p.add_argument("--slice", help="START:STOP after filtering (and shuffling; default: all)")
    p.add_argument("--shuffle", action="store_true", help="shuffle before slicing")
    p.add_argument("--seed", type=int, default=0, help="seed for --shuffle")
    mirrors = "mirror directory holding owner__name git repositories (default: none, see --forge)"
    p.add_argument("--repos", type=Path, help=mirrors)
    p.add_argument(
        "--forge",
        nargs="?",
        const=FORGE_URL,
        default=None,
        metavar="URL_TEMPLATE",
        help=f"clone missing repositories over the network (default: off; given bare, the template {FORGE_URL})",
    )


def add_run(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from snaffle.swebench.batch import BatchConfig

    p = commands.add_parser("run", help="run a harness on SWE-bench instances", description="Run a batch.")
    add_selection(p)
    p.add_argument("--arm", choices=HARNESSES, default=DEFAULT_ARM, help="the harness (default %(default)s)")
    settings.add_model_args(p)
    batch = field_defaults(BatchConfig)
    p.add_argument("--workers", type=int, default=batch["workers"], help="instances run at once (default %(default)s)")
    executor = "a local process pool, or Ray (default %(default)s)"
    p.add_argument("--executor", choices=("local", "ray"), default=batch["executor"], help=executor)
    p.add_argument("--ray-address", default=None, help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--out", type=Path, required=True, help="the batch directory: predictions, one run dir each")
    p.add_argument("--redo", action="store_true", help="rerun instances that are already done")
    p.add_argument("--docker", action="store_true", help="check out from SWE-bench images when Docker runs")
    add_caps_and_shim(p)
    add_pipeline_args(p)
    add_sandbox_arg(p)
    add_caps_args(p)
    settings.add_config_args(p)
    p.set_defaults(func=cmd_run)


def add_caps_and_shim(p: argparse.ArgumentParser) -> None:
    from snaffle.swebench.batch import ShimSettings

    add_cap_args(p, " per instance")
    p.add_argument("--no-shim", action="store_true", help="talk to --base-url directly (no ledger, no limits)")
    off = "0 = off; default %(default)s"
    p.add_argument("--pricing", type=Path, help="the shim's pricing TOML (default: the packaged table)")
    shim = field_defaults(ShimSettings)
    p.add_argument(
        "--max-in-flight", type=int, default=shim["max_in_flight"], help=f"upstream calls in flight at once ({off})"
    )
    p.add_argument(
        "--tokens-per-minute",
        type=int,
        default=shim["tokens_per_minute"],
        help=f"tokens per minute the shim lets through ({off})",
    )
    p.add_argument("--run-max-dollars", type=float, default=shim["run_max_dollars"], help=f"the batch's budget ({off})")
    p.add_argument("--run-name", default="", help="the shim ledger's run name (default: a timestamp)")
    p.add_argument(
        "--model-name", default="", help="model_name_or_path in predictions.jsonl (default: snaffle-ARM__MODEL)"
    )
    p.add_argument("--work-dir", type=Path, help="where checkouts go (default: the system temp dir)")
    p.add_argument("--keep-workdirs", action="store_true", help="keep each instance's checkout after its run")
    envs = "solve in snaffle's own interpreter, not each instance's (repo, version) environment"
    p.add_argument("--no-env", dest="environments", action="store_false", help=envs)
    p.add_argument("--env-dir", type=Path, help="where environments are kept (the user cache when not given)")


def field_defaults(record: type[DataclassInstance]) -> dict[str, Any]:
    """A record's declared defaults by field name: an option's default is the record's, never a second copy."""
    return {f.name: f.default for f in fields(record) if f.default is not MISSING}


def cmd_run(args: argparse.Namespace) -> int:
    from snaffle.adapters.mini_swe_agent import require_mini
    from snaffle.model.client import check_endpoint
    from snaffle.sandbox import require_mode
    from snaffle.swebench.batch import run_batch

    if not args.base_url:
        raise UserError("no model endpoint: pass --base-url or set SNAFFLE_BASE_URL")
    values = (args.max_turns, args.max_tokens, args.max_dollars, args.timeout)
    if any(v < 0 for v in values) or args.workers < 1:
        raise UserError("caps must be >= 0 (0 means no cap) and --workers >= 1")
    if args.arm == "mini-swe-agent":
        require_mini()
    warning = require_mode(args.sandbox)
    if warning:
        print(f"snaffle: warning: {warning}", file=sys.stderr)
    check_endpoint(args.base_url)
    config = batch_config(args)
    write_settings(args.out, getattr(args, "settings", ()))
    summary = run_batch(config)
    counts: dict[str, int] = {}
    for instance_id in summary.ran:
        status = summary.statuses.get(instance_id, "missing")
        counts[status] = counts.get(status, 0) + 1
    predictions = str(args.out / "predictions.jsonl")
    print(
        json.dumps(
            {
                "ran": len(summary.ran),
                "skipped": len(summary.skipped),
                "exit_statuses": counts,
                "predictions": predictions,
            }
        )
    )
    return 0


def write_settings(out: Path, resolved: Sequence[settings.Setting]) -> None:
    """Record the resolved settings in the batch dir, as a config file with each value's origin."""
    if resolved:
        out.mkdir(parents=True, exist_ok=True)
        text = "# snaffle swebench run: the settings it was last started with\n" + settings.as_toml(resolved)
        (out / SETTINGS_FILE).write_text(text, encoding="utf-8")


def batch_config(args: argparse.Namespace) -> BatchConfig:
    """The batch that `swebench run`'s arguments describe."""
    from snaffle.adapters import AdapterSpec
    from snaffle.agentless.options import pipeline_config
    from snaffle.swebench.batch import BatchConfig, ShimSettings

    spec = AdapterSpec(
        args.arm,
        args.model,
        args.api_key_env,
        args.temperature,
        args.max_output_tokens,
        args.tool_protocol,
        pipeline_config(args),
        args.sandbox,
        caps=caps_of(args),
    )
    shim = (
        None
        if args.no_shim
        else ShimSettings(args.pricing, args.max_in_flight, args.tokens_per_minute, args.run_max_dollars)
    )
    return BatchConfig(
        instances=chosen(args),
        adapter=spec,
        base_url=args.base_url,
        out=args.out,
        limits=Limits(args.max_turns, args.max_tokens, args.max_dollars, args.timeout),
        sources=Sources(args.repos, args.docker, forge=args.forge),
        workers=args.workers,
        executor=args.executor,
        ray_address=args.ray_address,
        redo=args.redo,
        shim=shim,
        run_name=args.run_name,
        model_name=args.model_name,
        work_root=args.work_dir,
        keep_workdirs=args.keep_workdirs,
        environments=args.environments,
        env_dir=args.env_dir,
    )


def chosen(args: argparse.Namespace) -> tuple[Instance, ...]:
    from snaffle.swebench.instances import load_instances, select

    instances = select(load_instances(args.instances), args.filter, args.slice, args.shuffle, args.seed)
    if not instances:
        raise UserError(f"no instance of {args.instances} matches --filter/--slice")
    return instances


def add_grade(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from snaffle.swebench.grade import GradeConfig

    p = commands.add_parser(
        "grade", help="grade predictions (Docker, or local virtualenvs)", description="Grade predictions."
    )
    add_selection(p)
    defaults = field_defaults(GradeConfig)
    p.add_argument("--predictions", type=Path, required=True, help="predictions.jsonl")
    p.add_argument("--out", type=Path, required=True, help="where report.json and the logs go")
    grader = "auto: SWE-bench's Docker harness when a daemon answers, else local virtualenvs (default %(default)s)"
    p.add_argument("--grader", choices=("auto", "local", "docker"), default=defaults["grader"], help=grader)
    envs = f"where virtualenvs per (repo, version) are kept (default {cache_dir('swebench-envs')})"
    p.add_argument("--env-dir", type=Path, help=envs)
    timeout = "seconds for one instance's tests (default %(default)s)"
    p.add_argument("--test-timeout", type=float, default=defaults["test_timeout_s"], help=timeout)
    p.add_argument(
        "--isolate-network",
        choices=("auto", "on", "off"),
        default=defaults["isolate_network"],
        help="run the tests in a new network namespace with only loopback (auto: when unshare works)",
    )
    p.add_argument(
        "--no-calibrate",
        action="store_true",
        help="skip checking that each gold patch resolves here first (results then may blame the patch "
        "for what the environment lacks)",
    )
    p.add_argument("--run-id", default=defaults["run_id"], help="run id for SWE-bench's Docker harness")
    p.add_argument("--workers", type=int, default=defaults["workers"], help="parallel instances for the Docker harness")
    p.set_defaults(func=cmd_grade)


def cmd_grade(args: argparse.Namespace) -> int:
    from snaffle.swebench.grade import GradeConfig, grade

    config = GradeConfig(
        instances=chosen(args),
        predictions=args.predictions,
        out=args.out,
        sources=Sources(args.repos, forge=args.forge),
        grader=args.grader,
        env_dir=args.env_dir,
        test_timeout_s=args.test_timeout,
        isolate_network=args.isolate_network,
        run_id=args.run_id,
        workers=args.workers,
        instances_file=args.instances,
        calibrate=not args.no_calibrate,
    )
    report = grade(config)
    keys = (
        "total_instances",
        "resolved_instances",
        "unresolved_instances",
        "error_instances",
        "env_unavailable_instances",
        "empty_patch_instances",
    )
    print(json.dumps({key: report.get(key) for key in keys} | {"report": str(args.out / "report.json")}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m snaffle.swebench.cli ...`: the same commands before `snaffle swebench` is wired in."""
    parser = argparse.ArgumentParser(prog="snaffle")
    register(parser.add_subparsers())
    args = parser.parse_args(["swebench", *(argv if argv is not None else sys.argv[1:])])
    try:
        return int(args.func(args))
    except UserError as exc:
        print(f"snaffle: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
