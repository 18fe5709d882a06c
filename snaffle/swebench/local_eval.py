"""One instance's evaluation in a local checkout, following SWE-bench's eval script: apply the model patch, run the
spec's install, reset the test files, apply the test patch, run the test command between SWE-bench's markers."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snaffle.exceptions import UserError
from snaffle.swebench import specs
from snaffle.swebench.envs import PythonEnv, install
from snaffle.swebench.instances import Instance
from snaffle.swebench.specs import EnvSpec

APPLY_COMMANDS = (
    ("git", "apply", "--verbose"),
    ("git", "apply", "--verbose", "--reject"),
    ("patch", "--batch", "--fuzz=5", "-p1", "-i"),
)
"""SWE-bench's order of attempts at applying a model patch."""
STEP_TIMEOUT_S = 1800
NETWORK_SINK = (
    "ip link set lo up 2>/dev/null; ip tuntap add mode tun dev snaffle0 2>/dev/null && "
    "ip link set snaffle0 up 2>/dev/null && ip route add default dev snaffle0 2>/dev/null; "
    "mount --bind {resolv} /etc/resolv.conf 2>/dev/null; true"
)
"""Inside the tests' own network and mount namespaces: loopback up; every other address routed into a tun device
nobody reads (a connection times out, as to a host that never answers, and no packet leaves); names resolve
against loopback, so a lookup fails at once instead of waiting on a resolver it cannot reach."""
LOOPBACK_RESOLVER = "nameserver 127.0.0.1\noptions attempts:1 timeout:1\n"


@dataclass(frozen=True)
class Evaluation:
    """Everything one local evaluation needs."""

    instance: Instance
    patch: str
    repo: Path
    spec: EnvSpec
    env: PythonEnv
    run_dir: Path
    timeout_s: float
    prefix: list[str]


def evaluate(ev: Evaluation) -> tuple[dict[str, Any], str]:
    """SWE-bench's report for the instance, and an error (patch or test patch did not apply, tests timed out)."""
    log, test_log = ev.run_dir / "run_instance.log", ev.run_dir / "test_output.txt"
    m = specs.markers()
    (ev.run_dir / "patch.diff").write_text(ev.patch, encoding="utf-8")
    if ev.patch.strip() and not apply_patch(ev.repo, ev.run_dir / "patch.diff", log):
        test_log.write_text(f"{m.APPLY_PATCH_FAIL}\n", encoding="utf-8")
        return specs.eval_report(ev.instance, ev.patch, test_log), "the model patch did not apply"
    install(ev.repo, ev.spec, ev.env, log, required=False)
    reset_test_files(ev.repo, ev.instance, log)
    if not run_logged(["git", "apply", "--verbose", "-"], ev.repo, log, stdin=ev.instance.test_patch):
        test_log.write_text(f"{m.APPLY_PATCH_FAIL}\n", encoding="utf-8")
        return specs.eval_report(ev.instance, ev.patch, test_log), "the test patch did not apply"
    output, timed_out = run_tests(ev)
    closing = m.TESTS_TIMEOUT if timed_out else m.END_TEST_OUTPUT
    test_log.write_text(f"{m.APPLY_PATCH_PASS}\n{m.START_TEST_OUTPUT}\n{output}\n{closing}\n", encoding="utf-8")
    error = f"the tests ran past {ev.timeout_s:g} s" if timed_out else ""
    return specs.eval_report(ev.instance, ev.patch, test_log), error


def apply_patch(repo: Path, patch: Path, log: Path) -> bool:
    for command in APPLY_COMMANDS:
        if shutil.which(command[0]) and run_logged([*command, str(patch)], repo, log):
            return True
        run_logged(["git", "checkout", "--", "."], repo, log)
    return False


def reset_test_files(repo: Path, instance: Instance, log: Path) -> None:
    """Test files the test patch touches go back to the base commit (files new in it are removed)."""
    for path in sorted(set(re.findall(r"^diff --git a/.* b/(.*)$", instance.test_patch, flags=re.MULTILINE))):
        if run_logged(["git", "cat-file", "-e", f"{instance.base_commit}:{path}"], repo, log):
            run_logged(["git", "checkout", instance.base_commit, "--", path], repo, log)
        elif (repo / path).is_file():
            (repo / path).unlink()


def run_tests(ev: Evaluation) -> tuple[str, bool]:
    """The repo's test command (combined output), in the isolation prefix; killed as a group on timeout."""
    sink = ""
    if ev.prefix:
        resolv = ev.run_dir / "resolv.conf"
        resolv.write_text(LOOPBACK_RESOLVER, encoding="utf-8")
        sink = NETWORK_SINK.format(resolv=shlex.quote(str(resolv)))
    script = "\n".join([sink, *ev.spec.eval_commands, specs.test_command(ev.instance, ev.spec)])
    proc = subprocess.Popen(
        [*ev.prefix, "bash", "-c", script],
        cwd=ev.repo,
        env=ev.env.environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=ev.timeout_s)
        return out.decode("utf-8", "replace"), False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return out.decode("utf-8", "replace"), True


def run_logged(
    command: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None, stdin: str | None = None
) -> bool:
    """Run one step with its output appended to the log; True when it succeeded."""
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"$ {' '.join(command)}\n")
        handle.flush()
        try:
            proc = subprocess.run(
                command,
                cwd=cwd,
                env=env,
                input=stdin.encode() if stdin is not None else None,
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=STEP_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            handle.write(f"timed out after {STEP_TIMEOUT_S} s\n")
            return False
    return proc.returncode == 0


def isolation_prefix(mode: str) -> list[str]:
    """`unshare --net --mount` (tests reach no address but loopback) when asked for, or in auto mode when it works."""
    if mode == "off":
        return []
    prefix = ["unshare", "--net", "--mount"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    works = (
        shutil.which("unshare") is not None and subprocess.run([*prefix, "true"], capture_output=True).returncode == 0
    )
    if works:
        return [*prefix, "--"]
    if mode == "on":
        raise UserError("--isolate-network on: `unshare --net` does not work here; pass --isolate-network off")
    return []
