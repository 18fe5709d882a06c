"""The environment each SWE-bench instance is solved in: the grader's virtualenv per (repo, version), prepared once
before the instances run (under the env's lock), or snaffle's own interpreter with the reason it could not be."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from snaffle.interpreter import OWN, PythonChoice
from snaffle.swebench.envs import marker_field, prepared_env
from snaffle.swebench.instances import Instance
from snaffle.swebench.specs import EnvUnavailable, env_spec
from snaffle.swebench.workspaces import Sources, WorkspaceUnavailable, check_source

LOG_NAME = "build.log"


@dataclass(frozen=True)
class Prepared:
    """One (repo, version) environment as a batch found it: its key, interpreter, build time, or why not."""

    key: str
    python: PythonChoice
    seconds: float
    build_s: float | None = None
    """The build's own time from the env's marker (None: it could not be built)."""
    reason: str = ""

    def describe(self) -> dict[str, object]:
        return {
            "key": self.key,
            "python": self.python.path,
            "chosen": self.python.how,
            "build_s": self.build_s,
            "ready_s": round(self.seconds, 1),
            "reason": self.reason or None,
        }


def env_key(instance: Instance) -> str:
    return f"{instance.repo.replace('/', '__')}__{instance.version}"


def prepare_all(
    instances: Sequence[Instance], env_dir: Path, sources: Sources, step: Callable[[Prepared], None] | None = None
) -> dict[str, Prepared]:
    """Each distinct environment of `instances` once (the first instance of it gives the setup commit), by key."""
    done: dict[str, Prepared] = {}
    for instance in instances:
        key = env_key(instance)
        if key not in done:
            done[key] = prepare_one(instance, env_dir, sources)
            if step is not None:
                step(done[key])
    return done


def prepare_one(instance: Instance, env_dir: Path, sources: Sources) -> Prepared:
    """The instance's environment, built or reused; never raises for an environment that cannot be built."""
    started, key = time.monotonic(), env_key(instance)
    log_dir = env_dir / "logs"
    try:
        spec = env_spec(instance.repo, instance.version)
        check_source(instance.repo, sources)
        log_dir.mkdir(parents=True, exist_ok=True)
        env = prepared_env(spec, instance, env_dir, sources, log_dir / f"{spec.key}.{LOG_NAME}")
    except (EnvUnavailable, WorkspaceUnavailable) as exc:
        reason = f"no environment for {key}: {exc}"
        return Prepared(
            key, PythonChoice(sys.executable, f"{OWN}; {reason}"), time.monotonic() - started, None, str(exc)
        )
    build_s = marker_field(env.root, "build_s")
    choice = PythonChoice(str(env.python), f"the SWE-bench environment {spec.key}")
    seconds = time.monotonic() - started
    return Prepared(key, choice, seconds, float(build_s) if isinstance(build_s, (int, float)) else None)
