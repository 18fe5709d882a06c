"""What a (repo, version) environment costs: its build time, and the seconds it adds per test run against none.

    python bench/env_bench.py --instances FILE --repos DIR [--env-dir DIR] [--calls 5]

Each environment of the instances is built (or reused; the build time is the one its marker recorded). Then the
same 200-test pytest file runs in the sandbox with snaffle's own interpreter ("none") and with the environment's,
interleaved call by call so machine load hits both alike. Prints a table: build seconds, size, median seconds per
test run with none and with the environment, the added seconds and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from snaffle.cache import cache_dir
from snaffle.interpreter import OWN, PythonChoice, prepare
from snaffle.sandbox import Sandbox
from snaffle.swebench.environments import Prepared, prepare_all
from snaffle.swebench.envs import list_envs
from snaffle.swebench.instances import load_instances
from snaffle.swebench.workspaces import Sources

MANY_TESTS = "\n".join(f"def test_{i}():\n    assert {i} + 1 > {i}\n" for i in range(200))
PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_many.py"]


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "test_many.py").write_text(MANY_TESTS)
    return repo


def timed(box: Sandbox, repo: Path) -> float:
    started = time.perf_counter()
    done = box.run([box.python, *PYTEST], repo, 300, writable=repo, env=box.env_for(repo))
    if done.returncode != 0:
        raise RuntimeError(f"{box.python}: pytest failed: {done.output[-300:]}")
    return time.perf_counter() - started


def measure(prepared: Prepared, calls: int, root: Path) -> tuple[float, float]:
    """Median seconds per test run with snaffle's own interpreter and with the environment's."""
    repo = make_repo(root)
    own, _ = prepare(PythonChoice(sys.executable, OWN), root / "own", "bubblewrap")
    env, _ = prepare(prepared.python, root / "env", "bubblewrap")
    none_s: list[float] = []
    env_s: list[float] = []
    for _ in range(calls):
        none_s.append(timed(own, repo))
        env_s.append(timed(env, repo))
    return statistics.median(none_s), statistics.median(env_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=Path, required=True)
    parser.add_argument("--repos", type=Path, required=True, help="mirror directory")
    parser.add_argument("--env-dir", type=Path, default=None, help="default: the user cache's swebench-envs")
    parser.add_argument("--calls", type=int, default=5, help="test runs per environment and interpreter")
    args = parser.parse_args()
    env_dir = args.env_dir or cache_dir("swebench-envs")
    envs = prepare_all(load_instances(args.instances), env_dir, Sources(args.repos))
    sizes = {e.key: e.size_bytes for e in list_envs(env_dir)}
    head = f"{'build s':>8} {'MB':>7} {'none s/run':>10} {'env s/run':>10} {'added s':>8} {'ratio':>6}"
    print(f"{'environment':32} {head}")
    for key, prepared in envs.items():
        if prepared.reason:
            print(f"{key:32} unavailable: {prepared.reason[:80]}")
            continue
        with tempfile.TemporaryDirectory(prefix="env-bench-") as tmp:
            try:
                none_s, env_s = measure(prepared, args.calls, Path(tmp))
            except RuntimeError as exc:
                print(f"{key:32} {prepared.build_s or 0:8.1f} no pytest run: {str(exc)[:80]}")
                continue
        size = sizes.get(key, 0) / 1e6
        built = f"{prepared.build_s:8.1f}" if prepared.build_s is not None else f"{'?':>8}"
        added, ratio = env_s - none_s, env_s / none_s
        print(f"{key:32} {built} {size:7.1f} {none_s:10.2f} {env_s:10.2f} {added:+8.2f} {ratio:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
