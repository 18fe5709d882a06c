"""The issue's title as a query of its own (`title`, `title_file`, `title_named`), on a small repository built here:
the title names the bug in a sentence, the body wanders through what the reporter tried."""

from __future__ import annotations

from pathlib import Path

from snaffle.agentless.issue_text import parse_issue, title
from snaffle.agentless.localize import Localizer
from snaffle.index.repo import RepoIndex
from tests.helpers import make_repo, only_signals

FILES: dict[str, str | bytes] = {
    "shop/__init__.py": "",
    "shop/rounding.py": (
        "def round_price(amount, places=2):\n"
        '    """Round a price to cents."""\n'
        "    return int(amount * 10 ** places) / 10 ** places\n"
    ),
    "shop/report.py": (
        "def print_report(orders, stream):\n"
        '    """Print each order and the total in a report table."""\n'
        "    for order in orders:\n"
        "        stream.write(format_order(order))\n"
        "\n\n"
        "def format_order(order):\n"
        "    return f'{order.name}: {order.total}'\n"
    ),
}
ISSUE = (
    "## round_price truncates instead of rounding\n"
    "\n"
    "I print a report of the orders and the report table shows each order with its total, and the report total\n"
    "is one cent lower than the orders' total when I print the report to a stream.\n"
)


def localizer(tmp_path: Path, **weights: float) -> Localizer:
    return Localizer(RepoIndex(make_repo(tmp_path / "shop", FILES)), only_signals(**weights))


def test_the_title_is_the_first_line_with_a_word_without_its_heading_marks() -> None:
    assert title("\n\n## `Card` may overflow\nbody") == "`Card` may overflow"
    assert title("**Bold title**\nbody") == "Bold title"
    assert title("---\n\n") == ""
    facts = parse_issue(ISSUE)
    assert facts.title_words[:4] == ("round", "price", "round_price", "truncates")
    assert facts.title_identifiers == ("round_price",)
    assert "round" not in parse_issue("body only\n\n`round_price` is wrong").title_words


def test_the_title_finds_what_the_body_outweighs(tmp_path: Path) -> None:
    body = localizer(tmp_path / "a", bm25=1.0, bm25_file=1.0).localize(ISSUE)
    assert body.entities[0].selector == "shop/report.py::print_report"
    titled = localizer(tmp_path / "b", title=1.0, title_file=1.0).localize(ISSUE)
    assert titled.entities[0].selector == "shop/rounding.py::round_price"
    assert titled.files[0][0] == "shop/rounding.py"
    assert titled.entities[0].signals == ("title",)


def test_a_name_the_title_says_counts_apart_from_the_names_of_the_body(tmp_path: Path) -> None:
    issue = "format_order drops the currency\n\nSeen after `print_report(orders, out)` and `round_price(x)`.\n"
    named = localizer(tmp_path, title_named=1.0).localize(issue)
    assert [c.selector for c in named.entities] == ["shop/report.py::format_order"]


def test_every_file_sharing_a_word_keeps_its_file_score(tmp_path: Path) -> None:
    """Sixty files say `ledger`, each one time fewer than the last: the 60th still scores (a cut at the 50th once
    left it nothing, while a file ranked 51st by its words can hold the fix)."""
    files = {
        f"books/part{n:02}.py": "def entry():\n    return " + " + ".join(["'ledger'"] * (61 - n)) + "\n"
        for n in range(1, 61)
    }
    index = RepoIndex(make_repo(tmp_path / "books", {"books/__init__.py": "", **files}))
    found = Localizer(index, only_signals(bm25_file=1.0)).localize("The ledger is wrong", top=100)
    ranked = [path for path, _ in found.files]
    assert ranked[:2] == ["books/part01.py", "books/part02.py"]
    assert "books/part60.py" in ranked
    assert dict(found.files)["books/part60.py"] > 0
