"""The one place snaffle's user cache is located: `cache_dir(kind)` for indexes, models, environments.

$SNAFFLE_CACHE/<kind> when set, else $XDG_CACHE_HOME/snaffle/<kind>, else ~/.cache/snaffle/<kind>. Nothing is
created here; callers make the directory when they first write into it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

CacheKind = Literal["structure", "models", "swebench-envs"]
KINDS: tuple[CacheKind, ...] = ("structure", "models", "swebench-envs")


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """snaffle's cache root, read from the environment at call time (never at import)."""
    env = os.environ if env is None else env
    if env.get("SNAFFLE_CACHE"):
        return Path(env["SNAFFLE_CACHE"]).expanduser()
    base = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "snaffle"


def cache_dir(kind: CacheKind, env: Mapping[str, str] | None = None) -> Path:
    """The directory of one kind of cached data."""
    if kind not in KINDS:
        raise ValueError(f"unknown cache kind {kind!r}; known: {', '.join(KINDS)}")
    return cache_root(env) / kind
