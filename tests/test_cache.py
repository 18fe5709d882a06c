"""Tests for snaffle.cache: one cache root for every kind, read from the environment at call time."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from snaffle.cache import KINDS, cache_dir, cache_root
from snaffle.swebench.grade import GradeConfig, env_root
from snaffle.swebench.workspaces import Sources


@pytest.mark.parametrize(
    ("env", "expected"),
    (
        ({"SNAFFLE_CACHE": "/s", "XDG_CACHE_HOME": "/x"}, Path("/s/models")),
        ({"XDG_CACHE_HOME": "/x"}, Path("/x/snaffle/models")),
        ({"SNAFFLE_CACHE": "", "XDG_CACHE_HOME": "/x"}, Path("/x/snaffle/models")),
        ({}, Path.home() / ".cache" / "snaffle" / "models"),
    ),
)
def test_cache_dir_precedence(env: dict[str, str], expected: Path) -> None:
    assert cache_dir("models", env) == expected


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_lives_under_one_root(kind: str) -> None:
    env = {"SNAFFLE_CACHE": "/s"}
    assert cache_dir(kind, env) == cache_root(env) / kind  # type: ignore[arg-type]


def test_the_environment_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SNAFFLE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir("structure") == tmp_path / "xdg" / "snaffle" / "structure"
    monkeypatch.setenv("SNAFFLE_CACHE", str(tmp_path / "own"))
    assert cache_dir("swebench-envs") == tmp_path / "own" / "swebench-envs"


def test_a_home_relative_cache_is_expanded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir("models", {"SNAFFLE_CACHE": "~/c"}) == tmp_path / "c" / "models"


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown cache kind 'indexes'; known: structure, models, swebench-envs"):
        cache_dir("indexes", {})  # type: ignore[arg-type]


def test_nothing_is_created(tmp_path: Path) -> None:
    cache_dir("structure", {"SNAFFLE_CACHE": str(tmp_path / "c")})
    assert not (tmp_path / "c").exists()


def test_grading_environments_live_in_the_cache_unless_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SNAFFLE_CACHE", str(tmp_path / "c"))
    config = GradeConfig((), Path("gold"), tmp_path / "out", Sources(None))
    assert env_root(config) == tmp_path / "c" / "swebench-envs"
    assert env_root(replace(config, env_dir=tmp_path / "envs")) == tmp_path / "envs"
