"""`snaffle trace html`: one self-contained page (no script, no network), checked as text and in headless
Chromium (Debian's `chromium` package driven by Playwright; that test is skipped when either is missing)."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

from snaffle.trace.analysis import analyze
from snaffle.trace.cli import main
from snaffle.trace.html import cumulative_dollars, report, svg_plot
from snaffle.trace.runs import load_gold, load_runs

Runs = dict[str, Path]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
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


def test_the_page_is_self_contained(page_file: Path) -> None:
    page = page_file.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "<script" not in page and "<link" not in page and "@import" not in page
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
    from playwright.sync_api import sync_playwright

    requests: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("request", lambda request: requests.append(request.url))
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
        finally:
            browser.close()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert requests == [page_file.as_uri()]
