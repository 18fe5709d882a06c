"""What the sandbox adds per call: the same commands through `Sandbox.run` confined (bubblewrap) and direct (none).

    python bench/sandbox_bench.py [--calls 20]

Cases: `true`, a pytest run of one test that sleeps 1 s, a pytest run of a 200-test file. Both modes run in the
same process, interleaved call by call, so machine load hits both alike. Prints medians and the added ms per call.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from snaffle.sandbox import Sandbox, bubblewrap_works

MANY_TESTS = "\n".join(f"def test_{i}():\n    assert {i} + 1 > {i}\n" for i in range(200))
CASES = {
    "true": ["true"],
    "pytest, one 1 s test": [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_sleep.py"],
    "pytest, 200 tests": [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_many.py"],
}


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "test_sleep.py").write_text("import time\n\n\ndef test_sleep():\n    time.sleep(1)\n")
    (repo / "test_many.py").write_text(MANY_TESTS)
    return repo


def timed(box: Sandbox, command: list[str], repo: Path) -> float:
    started = time.perf_counter()
    done = box.run(command, repo, 120, writable=repo, env=box.env_for(repo))
    if done.returncode != 0:
        raise SystemExit(f"{command} failed in mode {box.mode}: {done.output[-400:]}")
    return (time.perf_counter() - started) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20, help="calls per case and mode (default: 20)")
    args = parser.parse_args()
    if not bubblewrap_works():
        raise SystemExit("bubblewrap cannot start here: apt-get install bubblewrap")
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp))
        confined = Sandbox.create(Path(tmp) / "scratch")
        direct = Sandbox(confined.scratch, confined.env, "none", confined.readable)
        print("| case | direct median ms | sandboxed median ms | added ms | ratio | calls |")
        print("|---|---|---|---|---|---|")
        for name, command in CASES.items():
            times: dict[str, list[float]] = {"none": [], "bubblewrap": []}
            for _ in range(args.calls):
                for box in (direct, confined):
                    times[box.mode].append(timed(box, command, repo))
            base, boxed = statistics.median(times["none"]), statistics.median(times["bubblewrap"])
            print(f"| {name} | {base:.1f} | {boxed:.1f} | {boxed - base:+.1f} | {boxed / base:.2f}x | {args.calls} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
