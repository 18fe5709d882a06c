"""`snaffle shim serve`: run the metering shim in the foreground."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from urllib.parse import urlsplit

from snaffle.exceptions import UserError
from snaffle.shim.config import MAX_BODY_BYTES, RESERVE_OUTPUT_TOKENS, ShimConfig
from snaffle.shim.server import serve
from snaffle.types import Limits

DEFAULT_PORT = 8765
MAX_PORT = 65535
SQLITE_MAGIC = b"SQLite format 3\x00"


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the `shim` command (with its `serve` subcommand) to snaffle's CLI."""
    shim = subparsers.add_parser("shim", help="the metering proxy between harnesses and the model endpoint")
    shim.set_defaults(func=lambda args: _usage(shim))
    commands = shim.add_subparsers(dest="shim_command")
    parser = commands.add_parser(
        "serve",
        help="serve the shim on loopback",
        description="Forward OpenAI-compatible chat completions to --upstream, metering each call into the "
        "ledger --db; instances use base URL http://HOST:PORT/i/{run}/{instance}/v1. Limits: 0 means off. While a "
        "call is in flight it holds its worst case against the token and dollar limits: its prompt estimate plus "
        "its max_tokens (else --reserve-output-tokens), priced.",
    )
    parser.add_argument("--upstream", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the upstream API key")
    parser.add_argument("--pricing", type=Path, help="pricing TOML ($/M tokens); default: the packaged table")
    parser.add_argument("--db", type=Path, required=True, help="ledger file (SQLite), created if missing")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (loopback unless --allow-remote)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any)")
    parser.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host (needs --token)")
    parser.add_argument("--token", help="require this bearer token from clients (their API key)")
    parser.add_argument("--max-turns", type=int, default=0, help="per instance: successful calls")
    parser.add_argument("--max-tokens", type=int, default=0, help="per instance: prompt + completion tokens")
    parser.add_argument("--max-dollars", type=float, default=0.0, help="per instance: dollars")
    parser.add_argument("--timeout", type=float, default=0.0, help="per instance: seconds since its first call")
    parser.add_argument("--run-max-dollars", type=float, default=0.0, help="per run: dollars")
    parser.add_argument("--max-in-flight", type=int, default=0, help="pacer: upstream requests at once")
    parser.add_argument("--tokens-per-minute", type=int, default=0, help="pacer: token bucket size per minute")
    parser.add_argument("--upstream-timeout", type=float, default=600.0, help="seconds to wait for the upstream")
    reserve = f"completion tokens a call without max_tokens holds against the caps (default {RESERVE_OUTPUT_TOKENS})"
    parser.add_argument("--reserve-output-tokens", type=int, default=RESERVE_OUTPUT_TOKENS, metavar="N", help=reserve)
    body = f"refuse longer request bodies with 413 (default {MAX_BODY_BYTES})"
    parser.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES, metavar="N", help=body)
    parser.set_defaults(func=run_serve)


def check_args(args: argparse.Namespace) -> None:
    """Refuse, before anything opens, an upstream that is no http(s) URL, a --db that is some other file (SQLite
    would overwrite a small one), a port outside 0-65535 and negative limits."""
    parts = urlsplit(args.upstream)
    try:
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:
        valid = False
    if not valid:
        raise UserError(
            f"--upstream {args.upstream!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:8080/v1)"
        )
    check_db(Path(args.db))
    if not 0 <= args.port <= MAX_PORT:
        raise UserError(f"--port {args.port} is not a port: pass 1-{MAX_PORT}, or 0 for a free one")
    limits = (args.max_turns, args.max_tokens, args.max_dollars, args.timeout, args.run_max_dollars)
    if min(*limits, args.max_in_flight, args.tokens_per_minute) < 0:
        raise UserError("limits must be >= 0 (0 means off)")
    for flag, value in (("--upstream-timeout", args.upstream_timeout), ("--max-body-bytes", args.max_body_bytes)):
        if value <= 0:
            raise UserError(f"{flag} must be > 0")
    if args.reserve_output_tokens < 0:
        raise UserError("--reserve-output-tokens must be >= 0")


def check_db(path: Path) -> None:
    """An existing, non-empty --db must already be a SQLite file: anything else is the user's and is left alone."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    try:
        with path.open("rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise UserError(f"cannot open the ledger {path} ({exc.strerror}): pass a writable --db path") from exc
    if head != SQLITE_MAGIC:
        raise UserError(f"--db {path} is not a SQLite ledger (it would be overwritten): pass a new --db path")


def config_from_args(args: argparse.Namespace) -> ShimConfig:
    limits = Limits(args.max_turns, args.max_tokens, args.max_dollars, args.timeout)
    return ShimConfig(
        upstream=args.upstream,
        db=args.db,
        api_key_env=args.api_key_env,
        pricing=args.pricing,
        limits=limits,
        run_max_dollars=args.run_max_dollars,
        max_in_flight=args.max_in_flight,
        tokens_per_minute=args.tokens_per_minute,
        upstream_timeout_s=args.upstream_timeout,
        reserve_output_tokens=args.reserve_output_tokens,
        max_body_bytes=args.max_body_bytes,
        host=args.host,
        port=args.port,
        allow_remote=args.allow_remote,
        token=args.token,
    )


def run_serve(args: argparse.Namespace) -> int:
    try:
        check_args(args)
    except UserError as exc:
        print(f"snaffle shim: {exc}", file=sys.stderr)
        return 2
    config = config_from_args(args)
    parts = urlsplit(config.upstream)
    upstream = parts._replace(netloc=parts.hostname or "").geturl() if parts.password else config.upstream

    def announce(url: str) -> None:
        print(f"snaffle shim on {url} -> {upstream}; ledger {config.db}", file=sys.stderr, flush=True)

    try:
        serve(config, announce=announce)
    except UserError as exc:
        print(f"snaffle shim: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C once it has shut down cleanly
        return 130
    except OSError as exc:
        where = f"{config.host}:{config.port}"
        print(f"snaffle shim: cannot listen on {where} ({exc.strerror}): pick another --port", file=sys.stderr)
        return 2
    return 0


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Run the `shim` command on its own (`python -m snaffle.shim.cli serve ...`)."""
    parser = argparse.ArgumentParser(prog="snaffle")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["shim", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
