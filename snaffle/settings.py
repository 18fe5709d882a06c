"""A command's options as data: a TOML file (`--config FILE`) and `-c key=value` overrides, layered under the flags.

Resolution order, lowest first: the built-in default (read from snaffle/data/*.toml), the environment
(`SNAFFLE_BASE_URL`, `SNAFFLE_MODEL`), the config file, `-c`, the flags given. A key is an option's name without
its dashes (`max_turns` or `max-turns`); an unknown key or a bad value is one line naming it (exit 2).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_VARS: Mapping[str, str] = {"base_url": "SNAFFLE_BASE_URL", "model": "SNAFFLE_MODEL"}
"""Options whose built-in default an environment variable replaces."""
LAYERED = "_layered_settings"
"""The default that marks a parser taking `--config` and `-c` (set by `add_config_args`)."""
OWN_KEYS = frozenset({"config", "overrides", "help", LAYERED})
"""Dests that are not settings: the layering's own options and argparse's."""
DEFAULT, FLAG, OVERRIDE = "default", "flag", "-c"
TRUE, FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


@dataclass(frozen=True)
class Setting:
    """One option's resolved value and where it came from: `default`, `env VAR`, `config FILE`, `-c` or `flag`."""

    key: str
    value: Any
    origin: str


class Unset:
    """The value of an option no flag gave (argparse keeps a namespace attribute that is already there)."""

    def __repr__(self) -> str:
        return "unset"


UNSET = Unset()


def add_config_args(p: argparse.ArgumentParser) -> None:
    """`--config FILE` and `-c KEY=VALUE` on a command whose every option they may set."""
    p.add_argument("--config", type=Path, metavar="FILE", help="a TOML file of this command's options (key = value)")
    override = "set one option, over --config and under the flags (repeatable; e.g. -c samples=5)"
    p.add_argument("-c", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=override)
    p.set_defaults(**{LAYERED: True})


def command_parser(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[argparse.ArgumentParser, int]:
    """The (sub)parser the leading command words of `argv` name, and how many words that took."""
    depth = 0
    while depth < len(argv):
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or argv[depth] not in sub.choices:
            break
        parser, depth = sub.choices[argv[depth]], depth + 1
    return parser, depth


def is_layered(parser: argparse.ArgumentParser) -> bool:
    return bool(parser.get_default(LAYERED))


def parse_layered(
    parser: argparse.ArgumentParser, argv: Sequence[str], strict: bool = True
) -> tuple[argparse.Namespace, tuple[Setting, ...]]:
    """Parse `argv` with `parser` under its config file and `-c` layers; `strict=False` requires no option."""
    config, overrides = _layer_options(parser, argv)
    layers = [(f"config {config}", read_file(parser, config))] if config else []
    layers.append((OVERRIDE, read_overrides(parser, overrides)))
    supplied = {key for _, layer in layers for key in layer}
    with _relaxed(parser, None if not strict else supplied):
        explicit = parser.parse_args(argv, namespace=_unset_namespace(parser))
    if explicit.config != config or explicit.overrides != overrides:
        parser.error("spell --config and -c out in full")
    layers.append((FLAG, {key: value for key, value in vars(explicit).items() if key in keys(parser)}))
    chosen = resolve(parser, layers)
    namespace = argparse.Namespace(**{**vars(explicit), **{s.key: s.value for s in chosen}})
    return namespace, chosen


def _layer_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[Path | None, list[str]]:
    """`--config` and the `-c`s of `argv`, read before the command's own parse (they change what it requires)."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--config", type=Path)
    pre.add_argument("-c", dest="overrides", action="append", default=[])
    known, _ = pre.parse_known_args(list(argv))
    return known.config, list(known.overrides)


def keys(parser: argparse.ArgumentParser) -> dict[str, list[argparse.Action]]:
    """Every setting of `parser` (an option's dest) and the actions that store it."""
    found: dict[str, list[argparse.Action]] = {}
    for action in parser._actions:
        if action.dest not in OWN_KEYS and action.dest != argparse.SUPPRESS and action.option_strings:
            found.setdefault(action.dest, []).append(action)
    return found


def _unset_namespace(parser: argparse.ArgumentParser) -> argparse.Namespace:
    return argparse.Namespace(**dict.fromkeys(keys(parser), UNSET))


@contextmanager
def _relaxed(parser: argparse.ArgumentParser, supplied: set[str] | None) -> Iterator[None]:
    """Options a layer supplies (all, for None) are not required of the flags while parsing."""
    groups = parser._mutually_exclusive_groups
    members = [a for a in parser._actions if supplied is None or a.dest in supplied]
    chosen = [g for g in groups if supplied is None or any(a.dest in supplied for a in g._group_actions)]
    saved = [(a, a.required) for a in members] + [(g, g.required) for g in chosen]
    for item, _ in saved:
        item.required = False
    try:
        yield
    finally:
        for item, required in saved:
            item.required = required


def read_file(parser: argparse.ArgumentParser, path: Path) -> dict[str, Any]:
    """The settings of a TOML file, checked against `parser`'s options; relative paths are the file's."""
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        parser.error(f"cannot read the config file {path}: {exc.strerror or exc.__class__.__name__}")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        parser.error(f"the config file {path} is not TOML: {exc}")
    values = {}
    for raw, value in table.items():
        key = known_key(parser, raw, f"{path}: ")
        values[key] = check_value(parser, key, value, path.resolve().parent, f"{path}: ")
    return values


def read_overrides(parser: argparse.ArgumentParser, overrides: Sequence[str]) -> dict[str, Any]:
    """The `-c KEY=VALUE` settings, each value read as its option reads it on the command line."""
    values = {}
    for item in overrides:
        raw, sep, text = item.partition("=")
        if not sep:
            parser.error(f"-c {item!r} is not KEY=VALUE (e.g. -c samples=5)")
        key = known_key(parser, raw.strip(), "-c ")
        values[key] = check_value(parser, key, from_text(parser, key, text), Path.cwd(), "-c ")
    return values


def known_key(parser: argparse.ArgumentParser, raw: str, where: str) -> str:
    """`raw` as a setting of `parser` (dashes read as underscores), or a one-line refusal naming it."""
    key = raw.replace("-", "_")
    known = keys(parser)
    if key in known:
        return key
    if key in OWN_KEYS:
        parser.error(f"{where}{raw!r} cannot be set from a config file or -c")
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else f" (see {parser.prog} --help)"
    parser.error(f"{where}unknown setting {raw!r} for {parser.prog}{hint}")


def from_text(parser: argparse.ArgumentParser, key: str, text: str) -> Any:
    """A `-c` value: a switch reads true/false, a list reads comma-separated, anything else as its flag would."""
    action = keys(parser)[key][0]
    if action.nargs == 0:
        lowered = text.strip().lower()
        if lowered not in TRUE + FALSE:
            parser.error(f"-c {key}={text!r}: expected true or false")
        return lowered in TRUE
    if _is_list(action):
        return [part.strip() for part in text.split(",") if part.strip()]
    return text


def check_value(parser: argparse.ArgumentParser, key: str, value: Any, base: Path, where: str) -> Any:
    """`value` converted as option `key` converts its argument; a wrong type or choice is refused naming `key`."""
    action = keys(parser)[key][0]
    if action.nargs == 0:
        if not isinstance(value, bool):
            parser.error(f"{where}{key} = {value!r}: expected true or false")
        return value
    if _is_list(action):
        if not isinstance(value, list):
            parser.error(f"{where}{key} = {value!r}: expected a list")
        return [_one(parser, action, key, item, base, where) for item in value]
    return _one(parser, action, key, value, base, where)


def _is_list(action: argparse.Action) -> bool:
    return isinstance(action, argparse._AppendAction) or action.nargs in ("*", "+")


def _one(parser: argparse.ArgumentParser, action: argparse.Action, key: str, value: Any, base: Path, where: str) -> Any:
    convert = action.type if callable(action.type) else str
    if isinstance(value, bool) or isinstance(value, dict | list):
        parser.error(f"{where}{key} = {value!r}: expected {_kind(convert)}")
    if convert is float and isinstance(value, int):
        value = float(value)
    elif not isinstance(value, str) and not (convert in (int, float) and type(value) is convert):
        parser.error(f"{where}{key} = {value!r}: expected {_kind(convert)}")
    try:
        converted = convert(value) if isinstance(value, str) else value
    except (TypeError, ValueError, argparse.ArgumentTypeError):
        parser.error(f"{where}{key} = {value!r}: expected {_kind(convert)}")
    if isinstance(converted, Path) and not converted.is_absolute():
        converted = base / converted
    if action.choices is not None and converted not in action.choices:
        parser.error(f"{where}{key} = {value!r}: expected one of {', '.join(map(str, action.choices))}")
    return converted


def _kind(convert: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", Path: "a path (a string)"}
    return names.get(convert, f"a value {getattr(convert, '__name__', 'of this option')} accepts")


def resolve(parser: argparse.ArgumentParser, layers: Sequence[tuple[str, Mapping[str, Any]]]) -> tuple[Setting, ...]:
    """Each setting from the highest layer that gives it; options that exclude each other are taken as one."""
    chosen = {key: Setting(key, _default(actions[0]), _default_origin(key)) for key, actions in keys(parser).items()}
    for origin, layer in layers:
        given = {key: value for key, value in layer.items() if value is not UNSET}
        for group in _exclusive(parser, given, origin):
            for member in group:
                chosen[member] = Setting(member, _default(keys(parser)[member][0]), _default_origin(member))
        chosen.update({key: Setting(key, value, origin) for key, value in given.items()})
    return tuple(chosen.values())


def _exclusive(parser: argparse.ArgumentParser, given: Mapping[str, Any], origin: str) -> Iterator[set[str]]:
    """The members of each mutually exclusive group a layer sets; two members in one layer are refused."""
    for group in parser._mutually_exclusive_groups:
        dests = {a.dest for a in group._group_actions}
        inside = sorted(dests & set(given))
        if len(inside) > 1 and origin != FLAG:
            parser.error(f"{origin}: {inside[0]} and {inside[1]} exclude each other; set one")
        if inside:
            yield dests


def _default(action: argparse.Action) -> Any:
    default = action.default
    return action.type(default) if isinstance(default, str) and callable(action.type) else default


def _default_origin(key: str) -> str:
    var = ENV_VARS.get(key)
    return f"env {var}" if var and var in os.environ else DEFAULT


def as_json(settings: Sequence[Setting], leave_out: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """`{key: {"value", "from"}}` with paths as absolute strings, for the trajectory header and `config show --json`."""
    return {s.key: {"value": _plain(s.value), "from": s.origin} for s in settings if s.key not in leave_out}


def _plain(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return str(value.absolute()) if isinstance(value, Path) else value  # reads back the same from any directory


def as_toml(settings: Sequence[Setting]) -> str:
    """The settings as a config file: `key = value  # from`, and a comment for each one not set."""
    width = max((len(_toml_line(s)) for s in settings), default=0)
    lines = []
    for s in settings:
        line = _toml_line(s)
        lines.append(f"{line.ljust(width)}  # {s.origin}" if not line.startswith("#") else f"{line} ({s.origin})")
    return "\n".join(lines) + "\n"


def _toml_line(s: Setting) -> str:
    if s.value is None:
        return f"# {s.key}: not set"
    return f"{s.key} = {_toml_value(_plain(s.value))}"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """The endpoint and sampling options `solve` and `swebench run` share (their defaults from the environment)."""
    base_url = f"OpenAI-compatible URL (default: ${ENV_VARS['base_url']})"
    parser.add_argument("--base-url", default=os.environ.get(ENV_VARS["base_url"]), help=base_url)
    model = f"model name (default %(default)s; ${ENV_VARS['model']} replaces it)"
    parser.add_argument("--model", default=os.environ.get(ENV_VARS["model"], "default"), help=model)
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    temperature = "sampling temperature, sent only when given (default: the server's)"
    parser.add_argument("--temperature", type=float, default=None, help=temperature)
    output = "max_tokens of each call, sent only when given (default: the server's)"
    parser.add_argument("--max-output-tokens", type=int, default=None, help=output)
    protocols = ("native", "text")
    help_text = "native tool_calls, or <tool_call> blocks in the reply (servers without tool calling)"
    parser.add_argument("--tool-protocol", choices=protocols, default="native", help=help_text)
