"""Localization signals one by one, the combined ranking, SBFL from real coverage, and the CLI contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from snaffle.issue_text import frames, parse_issue, tokenize
from snaffle.localize import Localizer, imported_modules
from snaffle.sbfl import ochiai, sbfl_scores
from snaffle.shell import Sandbox
from snaffle.structure import RepoIndex
from tests.conftest import make_repo

FILES: dict[str, str | bytes] = {
    "shop/__init__.py": "",
    "shop/cart.py": (
        "class Cart:\n    def __init__(self):\n        self.items = []\n\n"
        "    def add_item(self, item, qty=1):\n        self.items.append((item, qty))\n\n"
        "    def total(self):\n        return sum(price(i) * q for i, q in self.items)\n"
    ),
    "shop/pricing.py": (
        "def price(item):\n    return item.base * discount_rate(item)\n\n\ndef discount_rate(item):\n    return 0.9\n"
    ),
    "shop/shipping.py": (
        "def shipping_cost(weight):\n    '''Shipping cost of a parcel by weight.'''\n    return 5 + weight\n"
    ),
    "tests/test_cart.py": (
        "from shop.cart import Cart\nfrom shop.pricing import price\n\n\n"
        "def test_total():\n    assert Cart().total() == 0\n"
    ),
}

TRACEBACK = """Checkout crashes:

Traceback (most recent call last):
  File "/home/me/venv/lib/python3.11/site-packages/shop/cart.py", line 9, in total
    return sum(price(i) * q for i, q in self.items)
  File "/home/me/venv/lib/python3.11/site-packages/shop/pricing.py", line 2, in price
    return item.base * discount_rate(item)
AttributeError: 'dict' object has no attribute 'base'
"""


@pytest.fixture
def index(tmp_path: Path) -> RepoIndex:
    return RepoIndex(make_repo(tmp_path / "shop", FILES))


def test_issue_parsing() -> None:
    facts = parse_issue("Calling `Cart.add_item(x)` in shop/cart.py breaks; ShippingCost and discount_rate too.")
    assert "Cart.add_item" in facts.code_identifiers and "shop/cart.py" in facts.paths
    assert "ShippingCost" in facts.prose_identifiers and "discount_rate" in facts.prose_identifiers
    assert [f.function for f in frames(TRACEBACK)] == ["total", "price"]
    assert frames("tests/test_x.py:12: in test_y\n")[0].line == 12
    assert tokenize("parseHTTPHeader snake_case_name") == ["parse", "http", "header", "parsehttpheader", "snake",
                                                            "case", "name", "snake_case_name"]  # fmt: skip


def test_traceback_signal_prefers_the_innermost_frame(index: RepoIndex) -> None:
    scores = Localizer(index).traceback(parse_issue(TRACEBACK))
    by_selector = {e.selector: s for e, s in scores.items()}
    assert by_selector["shop/pricing.py::price"] == 1.0
    assert 0 < by_selector["shop/cart.py::Cart.total"] < 1.0


def test_identifier_signal_matches_names_and_dotted_names(index: RepoIndex) -> None:
    scores = Localizer(index).identifier(parse_issue("`Cart.add_item` ignores qty"))
    assert max(scores, key=scores.__getitem__).selector == "shop/cart.py::Cart.add_item"


def test_path_mention_and_dotted_module(index: RepoIndex) -> None:
    localizer = Localizer(index)
    assert localizer.path_mention(parse_issue("see src/shop/shipping.py")) == {"shop/shipping.py": 1.0}
    assert "shop/pricing.py" in localizer.path_mention(parse_issue("`shop.pricing.price` is wrong"))
    assert localizer.path_mention(parse_issue("tests/test_cart.py fails")) == {}


def test_test_import_counts_imports_of_named_tests(index: RepoIndex) -> None:
    scores = Localizer(index).test_import(parse_issue("tests/test_cart.py::test_total fails"))
    assert set(scores) == {"shop/cart.py", "shop/pricing.py"}
    assert imported_modules(b"import a.b\nfrom c import d\nfrom . import e\n") == ["a.b", "c", "c.d"]


def test_bm25_signal_ranks_by_words(index: RepoIndex) -> None:
    scores = Localizer(index).bm25(parse_issue("the parcel shipping cost by weight is too high"))
    assert max(scores, key=scores.__getitem__).selector == "shop/shipping.py::shipping_cost"


def test_combined_ranking_excludes_tests_and_names_signals(index: RepoIndex) -> None:
    result = Localizer(index).localize(TRACEBACK, top=5)
    assert result.entities[0].selector == "shop/pricing.py::price"
    assert {"traceback", "bm25"} <= set(result.entities[0].signals)
    assert result.files[0][0] == "shop/pricing.py"
    assert not any(c.path.startswith("tests/") for c in result.entities)


@pytest.mark.parametrize(
    ("ef", "ep", "total", "score"), [(1, 0, 1, 1.0), (1, 3, 1, 0.5), (0, 5, 1, 0.0), (2, 2, 4, 0.5)]
)
def test_ochiai(ef: int, ep: int, total: int, score: float) -> None:
    assert ochiai(ef, ep, total) == pytest.approx(score)


def test_sbfl_from_real_coverage(calc_repo: Path, tmp_path: Path) -> None:
    index = RepoIndex(calc_repo)
    scores = sbfl_scores(index, "tests/test_calc.py::test_add", Sandbox.create(tmp_path / "scratch"))
    by_selector = {e.selector: s for e, s in scores.items()}
    assert by_selector["calc/__init__.py::add"] == pytest.approx(1.0)
    assert by_selector.get("calc/__init__.py::mul", 0.0) == 0.0


def test_localize_cli_contract(calc_repo: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "snaffle.cli", "localize", "--repo", str(calc_repo), "--issue",
                           "add returns the wrong sum", "--failing-test", "tests/test_calc.py::test_add", "--top", "3",
                           "--json"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) == {"files", "entities", "elapsed_s"}
    top = result["entities"][0]
    assert top["selector"] == "calc/__init__.py::add" and top["path"] == "calc/__init__.py"
    assert "sbfl" in top["signals"] and isinstance(top["score"], float)
    assert result["files"][0] == {"path": "calc/__init__.py", "score": result["files"][0]["score"]}
