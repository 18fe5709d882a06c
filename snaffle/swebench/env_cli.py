"""`snaffle env build --instances FILE` (pre-build the (repo, version) environments, with a progress bar) and
`snaffle env list` (what exists under the cache, and its size)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from snaffle.cache import cache_dir
from snaffle.swebench.environments import env_key, prepare_one
from snaffle.swebench.envs import list_envs
from snaffle.swebench.instances import Instance, load_instances, select
from snaffle.swebench.workspaces import Sources

EXIT_SOME_UNAVAILABLE = 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("env", help="build and list environments per (repo, version)", description=__doc__)
    commands = parser.add_subparsers(title="env commands", metavar="COMMAND")
    build = commands.add_parser("build", help="build the environments of SWE-bench instances", description=__doc__)
    build.add_argument("--instances", type=Path, required=True, help="SWE-bench instances (.json, .jsonl, .gz)")
    build.add_argument("--filter", help="regular expression on instance_id")
    build.add_argument("--repos", type=Path, help="mirror directory holding owner__name git repositories")
    build.add_argument("--env-dir", type=Path, help="where environments are kept (default: the user cache)")
    build.set_defaults(func=cmd_build)
    listing = commands.add_parser("list", help="the environments that exist, and their size", description=__doc__)
    listing.add_argument("--env-dir", type=Path, help="where environments are kept (default: the user cache)")
    listing.set_defaults(func=cmd_list)
    parser.set_defaults(func=lambda args: usage(parser))


def usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def cmd_build(args: argparse.Namespace) -> int:
    """Build or reuse each distinct environment once; one line per environment; exit 1 if one is unavailable."""
    instances = select(load_instances(args.instances), args.filter, None, False, 0)
    firsts = first_per_env(instances)
    env_dir, sources, unavailable = args.env_dir or cache_dir("swebench-envs"), Sources(args.repos), 0
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=True) as progress:
        bar = progress.add_task("environments", total=len(firsts))
        for instance in firsts:
            progress.update(bar, description=env_key(instance))
            prepared = prepare_one(instance, env_dir, sources)
            unavailable += bool(prepared.reason)
            state = f"unavailable: {prepared.reason}" if prepared.reason else f"ready ({built(prepared.build_s)})"
            progress.console.print(f"{prepared.key}: {state} in {prepared.seconds:.1f} s")
            progress.advance(bar)
    print(f"{len(firsts) - unavailable} of {len(firsts)} environments ready in {env_dir}", file=sys.stderr)
    return EXIT_SOME_UNAVAILABLE if unavailable else 0


def built(build_s: float | None) -> str:
    return f"built in {build_s:.1f} s" if build_s is not None else "build time unknown"


def first_per_env(instances: tuple[Instance, ...]) -> list[Instance]:
    """The first instance of each (repo, version): its setup commit is the environment's."""
    seen: dict[str, Instance] = {}
    for instance in instances:
        seen.setdefault(env_key(instance), instance)
    return list(seen.values())


def cmd_list(args: argparse.Namespace) -> int:
    env_dir = args.env_dir or cache_dir("swebench-envs")
    envs = list_envs(env_dir)
    for env in envs:
        installed = {True: "repo installed", False: "repo install failed", None: "repo not installed"}[env.installed]
        print(f"{env.key}\t{env.size_bytes / 1e6:.1f} MB\t{built(env.build_s)}\t{installed}\t{env.root}")
    print(f"{len(envs)} environments, {sum(e.size_bytes for e in envs) / 1e6:.1f} MB in {env_dir}", file=sys.stderr)
    return 0
