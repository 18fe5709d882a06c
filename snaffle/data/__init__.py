"""Packaged tunables: TOML tables read into frozen records whose every field is a required key.

A missing key is an error naming it, never a default in code that could disagree with the data; a key nothing
reads is an error too (a misspelt one would otherwise be silently ignored).
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

R = TypeVar("R", bound="DataclassInstance")


class DataError(ValueError):
    """Raised when a data table lacks a required key, holds an unknown one, or holds a value out of its range."""


def load(name: str) -> dict[str, Any]:
    """The tables of the packaged file `snaffle/data/<name>`."""
    return tomllib.loads(resources.files(__name__).joinpath(name).read_text(encoding="utf-8"))


def table(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """The table `data[key]`; `where` names the file in the error."""
    value = data.get(key)
    if not isinstance(value, Mapping):
        raise DataError(f"{where} lacks the required table [{key}]")
    return value


def required(values: Mapping[str, Any], keys: Iterable[str], where: str) -> dict[str, Any]:
    """`values`, which must hold each of `keys` and nothing else; `where` names the table in the error."""
    keys = tuple(keys)
    missing = [key for key in keys if key not in values]
    if missing:
        raise DataError(f"{where} lacks the required key {missing[0]!r}")
    unknown = sorted(set(values) - set(keys))
    if unknown:
        raise DataError(f"{where} has the unknown key {unknown[0]!r} (known: {', '.join(keys)})")
    return dict(values)


def record(cls: type[R], values: Mapping[str, Any], where: str) -> R:
    """The record `cls` built from `values`: each of its fields a required key, no other key allowed."""
    return cls(**required(values, (f.name for f in dataclasses.fields(cls) if f.init), where))


def load_record(cls: type[R], name: str, key: str) -> R:
    """The record `cls` from table `[key]` of `snaffle/data/<name>`."""
    where = f"snaffle/data/{name}"
    return record(cls, table(load(name), key, where), f"{where} [{key}]")
