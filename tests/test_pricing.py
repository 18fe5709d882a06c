"""Prices for models the packaged table lacks: litellm's cost map when litellm is installed; otherwise the cost is
unknown (null, said once), never $0 — in the shim's ledger, the trajectory's totals, result.json and `trace stats`.

Both ways run for real: the venv has litellm (the `swebench` extra brings it); "absent" is a subprocess whose
import path is this venv's site-packages without litellm."""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from snaffle.shim.pricing import LITELLM_COST_MAP, PER_TOKEN, litellm_prices, load_pricing, parse_litellm_costs
from snaffle.trajectory import read_trajectory
from snaffle.types import Usage
from tests.helpers import CALC_ISSUE, FIX_SCRIPT, Start

ROOT = Path(__file__).resolve().parents[1]
PROMPT, OUTPUT = 1000, 200
UNLISTED = "gpt-3.5-turbo"
"""In litellm's cost map, not in snaffle's table."""


def litellm_map() -> dict[str, dict[str, object]]:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("litellm is not installed (pip install 'snaffle[swebench]')")
    path = Path(next(iter(spec.submodule_search_locations))) / LITELLM_COST_MAP
    return dict(json.loads(path.read_text(encoding="utf-8")))


def without_litellm(tmp_path: Path) -> dict[str, str]:
    """An environment whose import path is this venv's site-packages less litellm (run python with -S)."""
    site = Path(sysconfig.get_paths()["purelib"])
    view = tmp_path / "site-without-litellm"
    view.mkdir()
    for entry in site.iterdir():
        if not entry.name.lower().startswith("litellm"):
            (view / entry.name).symlink_to(entry)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(view)])}


def solve(repo: Path, base_url: str, out: Path, env: dict[str, str], *python: str) -> subprocess.CompletedProcess[str]:
    argv = ["solve", "--arm", "minimal", "--repo", str(repo), "--issue", CALC_ISSUE, "--base-url", base_url]
    argv += ["--model", UNLISTED, "--out", str(out), "--json"]
    command = [sys.executable, *python, "-m", "snaffle.cli", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


def metered_script() -> list[dict[str, object]]:
    return [{**entry, "usage": {"prompt_tokens": PROMPT, "completion_tokens": OUTPUT}} for entry in FIX_SCRIPT]


def ledger_dollars(out: Path) -> list[float | None]:
    with sqlite3.connect(out / "ledger.sqlite") as conn:
        return [row[0] for row in conn.execute("SELECT dollars FROM calls ORDER BY id")]


def test_litellm_costs_become_prices_per_million_tokens() -> None:
    table = {
        "m": {"input_cost_per_token": 2e-6, "output_cost_per_token": 8e-6, "cache_read_input_token_cost": 5e-7},
        "no-cache": {"input_cost_per_token": 1e-6, "output_cost_per_token": 3e-6},
        "image-only": {"output_cost_per_image": 0.04},
        "sample_spec": "not a model",
        "boolean": {"input_cost_per_token": True, "output_cost_per_token": 1e-6},
    }
    prices = parse_litellm_costs(table)
    assert set(prices) == {"m", "no-cache"}
    assert (prices["m"].input, prices["m"].cached_input, prices["m"].output) == pytest.approx((2.0, 0.5, 8.0))
    assert prices["no-cache"].cached_input == pytest.approx(1.0)


def test_a_model_the_table_lacks_is_priced_from_litellms_map(caplog: pytest.LogCaptureFixture) -> None:
    entry = litellm_map()[UNLISTED]
    pricing = load_pricing(None)
    assert pricing.price(UNLISTED) is None and UNLISTED in litellm_prices()
    expected = PROMPT * float(entry["input_cost_per_token"]) + OUTPUT * float(entry["output_cost_per_token"])
    assert pricing.dollars(UNLISTED, Usage(PROMPT, OUTPUT)) == pytest.approx(expected)
    assert pricing.dollars(f"openai/{UNLISTED}", Usage(PROMPT, OUTPUT)) == pytest.approx(expected)
    assert pricing.dollars("mystery-model-x", Usage(1, 1)) is None
    assert pricing.dollars("mystery-model-x", Usage(1, 1)) is None
    assert caplog.text.count("mystery-model-x") == 1 and "litellm's cost map" in caplog.text
    assert PER_TOKEN == 1e-6


def test_solve_with_litellm_installed_records_litellms_price(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    entry = litellm_map()[UNLISTED]
    per_call = PROMPT * float(entry["input_cost_per_token"]) + OUTPUT * float(entry["output_cost_per_token"])
    server = scripted(metered_script())
    out = tmp_path / "run"
    proc = solve(calc_repo, server.base_url, out, dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert "no price" not in proc.stderr
    result = json.loads((out / "result.json").read_text())
    calls = len(server.requests)
    assert result["totals"]["dollars"] == pytest.approx(calls * per_call)
    assert result["shim"]["dollars"] == pytest.approx(calls * per_call)
    assert ledger_dollars(out) == pytest.approx([per_call] * calls)


def test_solve_without_litellm_records_the_cost_as_unknown(calc_repo: Path, scripted: Start, tmp_path: Path) -> None:
    env = without_litellm(tmp_path)
    probe = "import importlib.util, snaffle.shim.pricing as p; print(importlib.util.find_spec('litellm'), p.__file__)"
    seen = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert seen.stdout.startswith(f"None {ROOT}")  # litellm really is absent there, and this snaffle is used
    server = scripted(metered_script())
    out = tmp_path / "run"
    proc = solve(calc_repo, server.base_url, out, env, "-S")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "no price for model" in line]
    assert len(warnings) == 1 and "litellm is not installed" in warnings[0] and "unknown" in warnings[0]
    result = json.loads((out / "result.json").read_text())
    assert result["totals"]["dollars"] is None and result["shim"]["dollars"] is None
    assert result["totals"]["prompt_tokens"] == PROMPT * len(server.requests)
    trajectory = read_trajectory(out / "trajectory.jsonl")
    calls = list(trajectory.of_type("model_call"))
    assert calls and all(c["usage"]["dollars"] is None and c["cumulative"]["dollars"] is None for c in calls)
    assert trajectory.exit is not None and trajectory.exit["totals"]["dollars"] is None
    assert ledger_dollars(out) == [None] * len(server.requests)
    stats = subprocess.run(
        [sys.executable, "-m", "snaffle.cli", "trace", "stats", str(out), "--json"], capture_output=True, text=True
    )
    assert stats.returncode == 0, stats.stderr
    shown = json.loads(stats.stdout)
    assert shown["attempts"][0]["dollars_source"] == "unknown" and shown["aggregate"]["dollars_source"] == "unknown"
    text = subprocess.run(
        [sys.executable, "-m", "snaffle.cli", "trace", "stats", str(out)], capture_output=True, text=True
    )
    assert "(unknown)" in text.stdout
