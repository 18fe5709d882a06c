"""Selectors within one file: `qualname` or `qualname@n` resolved among its entities, and the errors that list
close matches when a selector names no file, no entity or more than one."""

from __future__ import annotations

import difflib
import posixpath
import re
from collections.abc import Sequence

from snaffle.index.parse import Entity

CLOSE_MATCHES = 5
CLOSE_MATCH_CUTOFF = 0.6
PROPERTY_ACCESSOR = re.compile(r"^@[\w.]+\.(setter|getter|deleter)\b", re.MULTILINE)
OVERLOAD = re.compile(r"^@(\w+\.)*overload\b", re.MULTILINE)
OCCURRENCE = re.compile(r"^(?P<name>.*)@(?P<n>\d+)$")


class SelectorError(ValueError):
    """A selector that names no entity, or more than one; the message lists close matches."""


def pick(path: str, name: str, entities: Sequence[Entity]) -> Entity:
    """Resolve `name` (a qualname, optionally `@n`) among one file's entities."""
    match = OCCURRENCE.match(name)
    qualname, wanted = (match["name"], int(match["n"])) if match else (name, 0)
    same = [e for e in entities if e.qualname == qualname and e.kind != "module"]
    if not same:
        raise _name_error(path, qualname, entities)
    if wanted:
        if wanted <= len(same):
            return same[wanted - 1]
        title = f"no {path}::{name}: there are {len(same)} definitions of {qualname}; pick one:"
        raise SelectorError(_listing(title, _describe(same), limit=len(same)))
    if len(same) == 1:
        return same[0]
    preferred = _preferred(same)
    if preferred is not None:
        return preferred
    title = f"{path}::{qualname} is ambiguous: {len(same)} definitions; pick one:"
    raise SelectorError(_listing(title, _describe(same), limit=len(same)))


def path_error(path: str, files: Sequence[str]) -> SelectorError:
    """No file `path` among `files`: the error lists files of the same name, then close paths."""
    base = posixpath.basename(path)
    same_name = [f for f in files if posixpath.basename(f) == base]
    close = difflib.get_close_matches(path, files, n=CLOSE_MATCHES, cutoff=CLOSE_MATCH_CUTOFF)
    return SelectorError(_listing(f"no file {path} in the repository", [*same_name, *close]))


def _preferred(same: Sequence[Entity]) -> Entity | None:
    """The definition a bare name means in a family: a property's getter, an overloaded function's body."""
    if all(PROPERTY_ACCESSOR.search(e.signature) for e in same[1:]):
        return same[0]
    if all(OVERLOAD.search(e.signature) for e in same[:-1]) and not OVERLOAD.search(same[-1].signature):
        return same[-1]
    return None


def _name_error(path: str, qualname: str, entities: Sequence[Entity]) -> SelectorError:
    names = sorted({e.qualname for e in entities if e.qualname})
    last = qualname.rsplit(".", 1)[-1]
    suffix = [n for n in names if n.rsplit(".", 1)[-1] == last]
    close = difflib.get_close_matches(qualname, names, n=CLOSE_MATCHES, cutoff=CLOSE_MATCH_CUTOFF)
    title = f"no {qualname} in {path}"
    return SelectorError(_listing(title, [f"{path}::{n}" for n in dict.fromkeys([*suffix, *close])]))


def _describe(entities: Sequence[Entity]) -> list[str]:
    return [f"{e.selector}  {_header_line(e.signature)}" for e in entities]


def _header_line(signature: str) -> str:
    lines = [line for line in signature.split("\n") if line.strip()]
    decorators = [line.strip() for line in lines if line.lstrip().startswith("@")]
    header = next((line.strip() for line in lines if not line.lstrip().startswith("@")), "")
    return " ".join([*decorators, header])


def _listing(title: str, options: Sequence[str], limit: int = CLOSE_MATCHES) -> str:
    """`title`, then one option per line (at most `limit`), or a note that there are none."""
    unique = list(dict.fromkeys(options))[:limit]
    if not unique:
        return f"{title.removesuffix(':')}; no close matches"
    heading = title if title.endswith(":") else f"{title}; did you mean:"
    return "\n".join([heading, *(f"  {option}" for option in unique)])
