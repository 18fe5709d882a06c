"""`snaffle trace html`: one self-contained page (no network; one inline script, allowed by its hash), checked as
text and in headless Chromium (Debian's `chromium` package driven by Playwright; those tests are skipped when
either is missing): the issue, the validation verdicts, answers as code, arguments in full, the filter, and a
hostile answer that stays inert."""

from __future__ import annotations

import importlib.util
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from html import escape
from pathlib import Path
from typing import Any

import pytest

from snaffle.model.client import ModelConfig
from snaffle.run import SolveConfig, solve, zero_pricer
from snaffle.trace.analysis import analyze
from snaffle.trace.cli import main
from snaffle.trace.html import FILTER_SCRIPT, _script_hash, arguments_html, cumulative_dollars, report, svg_plot
from snaffle.trace.runs import load_gold, load_runs
from snaffle.types import Limits, Task
from tests.helpers import CALC_ISSUE, Start

Runs = dict[str, Path]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
BROWSER_MISSING = (
    "needs Debian's chromium (apt-get install -y chromium) and the playwright Python package (pip install playwright)"
)


def browser_available() -> bool:
    return Path(CHROMIUM).is_file() and importlib.util.find_spec("playwright") is not None


@pytest.fixture(scope="module")
def page_file(trace_runs: Runs, gold_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("html") / "report.html"
    names = ("clean", "context_pressure", "wrong_location", "torn")
    assert main(["trace", "html", *(str(trace_runs[n]) for n in names), "-o", str(out), "--gold", str(gold_file)]) == 0
    return out


@pytest.fixture(scope="module")
def agentless_page(trace_runs: Runs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("html") / "agentless.html"
    runs = [str(trace_runs[n]) for n in ("agentless_validated", "agentless_rejected", "clean")]
    assert main(["trace", "html", *runs, "-o", str(out)]) == 0
    return out


def test_the_page_is_self_contained(page_file: Path) -> None:
    page = page_file.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and "Content-Security-Policy" in page and "default-src 'none'" in page
    assert page.count("<script") == 1 and f"script-src '{_script_hash(FILTER_SCRIPT)}'" in page
    assert "<link" not in page and "@import" not in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert page.count('<section class="attempt"') == 4 and page.count("<svg") == 3 + 3 * 4


def test_timeline_folds_observations_and_shows_the_diff(page_file: Path) -> None:
    page = page_file.read_text(encoding="utf-8")
    assert page.count('<details class="obs">') >= 4 + 5 + 3 + 4
    assert '<details class="reasoning">' in page and "thought 19" in page
    assert '<span class="add">+    return a + b</span>' in page and '<span class="del">-    return a - b</span>' in page
    assert "torn last line skipped" in page and ">wrong_location</span>" in page and ">context_pressure</span>" in page
    assert re.search(r"compaction: \d+ → \d+ tokens", page) and "gate lint refused" in page


def test_model_text_is_escaped(trace_runs: Runs) -> None:
    analyses = analyze(load_runs([trace_runs["clean"]]))
    page = report(analyses, title="<b>x</b> & y")
    assert "<title>&lt;b&gt;x&lt;/b&gt; &amp; y</title>" in page
    assert "&quot;&quot;&quot;A tiny calculator package.&quot;&quot;&quot;" in page


def test_svg_plot_bars_then_lines() -> None:
    assert svg_plot([1.0, 2.0, 3.0], "t").count("<rect") == 3
    many = svg_plot([float(i) for i in range(500)], "t")
    assert "<polyline" in many and "<rect" not in many and "500 calls" in many
    assert "<rect" not in svg_plot([], "t")


def test_cumulative_dollars_use_the_shim_when_present(trace_runs: Runs) -> None:
    (shim,) = load_runs([trace_runs["shim_dollars"]])
    assert cumulative_dollars(shim.trajectory.events) == [0.25, 0.5, 0.75, 1.0, 1.25]
    (clean,) = load_runs([trace_runs["clean"]])
    values = cumulative_dollars(clean.trajectory.events)
    assert values == sorted(values) and values[-1] == pytest.approx(clean.exit["totals"]["dollars"])


def test_html_with_gold_from_the_command_line(trace_runs: Runs, gold_file: Path, tmp_path: Path) -> None:
    analyses = analyze(load_runs([trace_runs["wrong_location"]]), gold=load_gold(gold_file))
    assert "wrong_location" in report(analyses)


@pytest.mark.skipif(not browser_available(), reason=BROWSER_MISSING)
def test_the_page_renders_in_headless_chromium(page_file: Path, tmp_path: Path) -> None:
    with browser_page(tmp_path) as (page, requests):
        page.goto(page_file.as_uri())
        assert page.title() == "snaffle run report"
        assert page.locator("section.attempt").count() == 4 and page.locator("svg.plot").count() == 15
        fold = page.locator("details.obs").first
        body = fold.locator("pre")
        assert not body.is_visible()
        fold.locator("summary").click()
        assert body.is_visible() and "1 failed, 1 passed" in body.inner_text()
        assert fold.evaluate("node => node.open") is True
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert requests == [page_file.as_uri()]


def test_the_report_has_the_issue_the_verdicts_and_answers_as_code(agentless_page: Path) -> None:
    page = agentless_page.read_text(encoding="utf-8")
    fold = f'<details class="issue" open><summary>issue</summary><pre>{escape(CALC_ISSUE)}</pre></details>'
    assert page.count(fold) == 3  # once per attempt, open; the prompts that repeat it are folded
    assert page.count("<h3>Validation</h3>") == 2 and "reproduction test: <b>kept</b>" in page
    regressed = re.findall(r"<td class=\"l\">(invalid|valid)</td><td class=\"l\">([^<]*)</td>", page)
    assert (
        regressed
        == [("valid", "none"), ("invalid", "tests.test_calc::test_mul")]
        + [("invalid", "tests.test_calc::test_mul")] * 2
    )
    assert (
        '<pre class="code"><span class="hl-k">def</span><span class="hl-w"> </span><span class="hl-nf">mul</span>'
        in page
    )
    assert '<details class="sent"><summary>messages sent: 1 new of 1' in page and "Write a short pytest test" in page
    assert '<details class="sample">' in page and "sample 1: 1 call(s) · submitted → invalid" in page


def test_runs_are_named_after_their_directories(page_file: Path) -> None:
    page = page_file.read_text(encoding="utf-8")
    names = re.findall(r'<td class="l"><a href="#a\d">([^<]+)</a></td><td class="l">([^<]+)</td>', page)
    assert names == [
        ("clean", "clean"),
        ("context_pressure", "context_pressure"),
        ("wrong_location", "wrong_location"),
        ("torn", "clean"),
    ]  # the torn copy is a run of instance `clean`


def test_only_measured_series_are_plotted(trace_runs: Runs) -> None:
    free = report(analyze(load_runs([trace_runs["agentless_rejected"]])))  # priced at $0
    assert "prompt tokens per call" in free and "cumulative dollars" not in free
    priced = report(analyze(load_runs([trace_runs["agentless_validated"]])))
    assert "cumulative dollars" in priced


def test_tool_arguments_are_shown_whole(page_file: Path) -> None:
    code = "print('" + "x" * 80 + "')\nimport os\nprint(os.getcwd())"
    shown = arguments_html({"code": code})
    assert escape(code) in shown and "<details>" not in shown
    long = arguments_html({"code": "\n".join(f"print({i})" for i in range(40))})
    assert "<details><summary>arguments (40 lines)</summary>" in long and "print(39)" in long
    page = page_file.read_text(encoding="utf-8")
    assert '<div class="role">old_str</div><pre>return a - b</pre>' in page


HOSTILE = (
    "</pre></details><script>document.title = 'pwned'</script>"
    '<img src=x onerror="document.title = \'pwned\'"><a href="http://127.0.0.1:{port}/x">x</a>'
    '<img src="http://127.0.0.1:{port}/beacon.png">\nDONE'
)


@pytest.fixture
def hostile_run(calc_repo: Path, scripted: Start, tmp_path: Path, listener: int) -> Path:
    """A real run whose model answers with markup meant to run in the report's reader's browser."""
    server = scripted([{"content": HOSTILE.format(port=listener)}, {"content": "DONE"}])
    out = tmp_path / "hostile"
    config = SolveConfig("minimal", ModelConfig(server.base_url, "scripted"), Limits(max_turns=3), out, zero_pricer)
    solve(Task(repo=calc_repo, issue=CALC_ISSUE + " <script>document.title='pwned'</script>"), config)
    return out


def test_a_hostile_answer_is_escaped(hostile_run: Path) -> None:
    page = report(analyze(load_runs([hostile_run])))
    assert page.count("<script") == 1 and "<img" not in page and "&lt;script&gt;document.title" in page


@pytest.mark.skipif(not browser_available(), reason=BROWSER_MISSING)
def test_a_hostile_answer_stays_inert_in_chromium(hostile_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "hostile.html"
    assert main(["trace", "html", str(hostile_run), "-o", str(out)]) == 0
    with browser_page(tmp_path) as (page, requests):
        page.goto(out.as_uri())
        assert page.title() == "snaffle run report"
        page.screenshot(path=str(tmp_path / "hostile.png"), full_page=True)
    assert requests == [out.as_uri()]


@pytest.mark.skipif(not browser_available(), reason=BROWSER_MISSING)
def test_the_report_filters_and_shows_regressions_in_chromium(agentless_page: Path, tmp_path: Path) -> None:
    with browser_page(tmp_path) as (page, requests):
        page.goto(agentless_page.as_uri())
        sections = page.locator("section.attempt")
        assert sections.count() == 3 and page.locator("#shown").inner_text() == "3 shown"
        assert "add(2, 3) returns -1" in page.locator("details.issue pre").first.inner_text()
        rejected = sections.nth(1)
        assert "tests.test_calc::test_mul" in rejected.locator("div.verdicts table").inner_text()
        page.select_option("#status", "no_valid_patch")
        assert [s.is_visible() for s in sections.all()] == [False, True, False]
        page.select_option("#status", "")
        page.select_option("#label", "unvalidated_edits")
        assert page.locator("#shown").inner_text() == "1 shown"
        page.select_option("#label", "")
        page.fill("#text", "seems to subtract")
        assert page.locator("#shown").inner_text() == "3 shown"
        page.fill("#text", "a ** b")
        assert [s.is_visible() for s in sections.all()] == [True, True, False]
        page.fill("#text", "")
        shot = tmp_path / "agentless.png"
        page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert requests == [agentless_page.as_uri()]


@contextmanager
def browser_page(tmp_path: Path) -> Iterator[tuple[Any, list[str]]]:
    """A page in headless Chromium with an empty profile, and the URLs it requested."""
    from playwright.sync_api import sync_playwright

    requests: list[str] = []
    profile = tmp_path / "profile"
    profile.mkdir()
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, args=CHROMIUM_FLAGS, viewport={"width": 1200, "height": 900}
        )
        try:
            page = context.new_page()
            page.on("request", lambda request: requests.append(request.url))
            yield page, requests
        finally:
            context.close()
