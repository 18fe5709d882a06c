"""Localization signals one by one, the combined ranking, SBFL from real coverage, and the CLI contract."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from snaffle.agentless.issue_text import Frame, frames, imports, parse_issue, quotes, strip_noise, tokenize
from snaffle.agentless.localize import (
    ENTITY_SIGNALS,
    FILE_SIGNALS,
    Localizer,
    Signals,
    Weights,
    is_peripheral,
    rank,
)
from snaffle.agentless.sbfl import ochiai, sbfl_scores
from snaffle.data import DataError, load
from snaffle.index.imports import imported_modules, imported_names
from snaffle.index.repo import RepoIndex
from snaffle.sandbox import Sandbox
from tests.helpers import make_repo

FILES: dict[str, str | bytes] = {
    "shop/__init__.py": "",
    "shop/cart.py": (
        "class Cart:\n    def __init__(self):\n        self.items = []\n\n"
        "    def add_item(self, item, qty=1):\n        self.items.append((item, qty))\n\n"
        "    def total(self):\n        return sum(price(i) * q for i, q in self.items)\n"
    ),
    "shop/pricing.py": (
        "def price(item):\n    return item.base * discount_rate(item)\n\n\ndef discount_rate(item):\n"
        "    if item.code is None:\n        raise ValueError(f'no discount code on {item} for the winter season')\n"
        "    return 0.9\n"
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
    ipython = "File ~/env/lib/site-packages/shop/cart.py:18, in Cart.total(self)\n     17 def total(self):\n"
    assert frames(ipython) == (Frame("~/env/lib/site-packages/shop/cart.py", 18, "Cart.total"),)
    called = parse_issue("calc Rational('0.5', '100') is wrong (twice)")  # a call without backticks is code
    assert (called.code_identifiers, called.prose_identifiers) == (("Rational",), ())
    assert tokenize("parseHTTPHeader snake_case_name") == [
        "parse",
        "http",
        "header",
        "parsehttpheader",
        "snake",
        "case",
        "name",
        "snake_case_name",
    ]


def test_noise_is_stripped_before_parsing() -> None:
    report = "Bug <!-- template: describe it -->\nINSTALLED VERSIONS\nnumpy: 1.19.1\ncftime: None\npandas==1.1\nend"
    assert strip_noise(report).split() == ["Bug", "INSTALLED", "VERSIONS", "end"]
    assert "numpy" not in parse_issue(report).words
    linked = parse_issue("see https://example.org/x/shop/cart.py here")
    assert linked.paths == ("example.org/x/shop/cart.py",) and "example" not in linked.words  # paths kept, URLs not


def test_an_issue_with_crlf_line_breaks_says_what_its_lf_twin_says() -> None:
    issue = (
        "Title\n```python\nimport numpy as np\nfrom shop.cart import Cart\n>>> c = Cart()\n```\n"
        "ValueError: no discount code on item 3 for the winter season\n### Expected behavior\n" + REPORTERS_CODE
    )
    lf = parse_issue(issue, strip_template=True)
    assert lf.imports and lf.quotes and lf.defined  # what a `$` at a line's end finds
    assert parse_issue(issue.replace("\n", "\r\n"), strip_template=True) == lf


def test_quotes_are_message_runs_and_code_lines() -> None:
    text = "ValueError: no discount code on <Item 3> for the winter season\n"
    found = quotes(text, ["total = cart.total() + shipping_cost(2)\nx = 1"])
    assert "no discount code on" in found and "for the winter season" in found
    assert "total = cart.total() + shipping_cost(2)" in found and "x = 1" not in found


def test_a_message_after_a_printed_location_is_a_message() -> None:
    text = (
        "/site-packages/shop/cart.py:492: SerializationWarning: variable 'x' has a coupon but no owner. Ignoring it.\n"
        "docs/index.rst:30: WARNING: toctree contains reference to nonexisting document 'search'\n"
        "Note: this happens on every run\n"
    )
    found = quotes(text, [])
    assert "has a coupon but" in found and "toctree contains reference to" in found
    assert not any("happens on every" in q for q in found)  # a capitalized word and a colon is no message


def test_imports_and_assignments_of_the_issue_code() -> None:
    assert imports("import numpy as np\nfrom shop import cart, pricing as p\nimport os.path\n") == [
        ("np", "numpy"),
        ("cart", "shop.cart"),
        ("p", "shop.pricing"),
        ("os", "os"),
    ]
    assert parse_issue("```\n>>> cart, n = Cart(), 3\n```").assigned == ("cart", "n")


def test_traceback_signal_prefers_the_innermost_frame(index: RepoIndex) -> None:
    scores = Localizer(index).traceback(parse_issue(TRACEBACK))
    by_selector = {e.selector: s for e, s in scores.items()}
    assert by_selector["shop/pricing.py::price"] == 1.0
    assert 0 < by_selector["shop/cart.py::Cart.total"] < 1.0


def test_identifier_signal_matches_names_and_dotted_names(index: RepoIndex) -> None:
    scores = Localizer(index).identifier(parse_issue("`Cart.add_item` ignores qty"))
    assert max(scores, key=scores.__getitem__).selector == "shop/cart.py::Cart.add_item"


def test_identifier_signal_skips_foreign_modules_and_the_reporters_variables(index: RepoIndex) -> None:
    issue = "```\nimport numpy as np\nimport shop.cart as sc\nprice = np.price(3)\nsc.Cart().total()\n```"
    found = {e.selector for e in Localizer(index).identifier(parse_issue(issue))}
    assert "shop/cart.py::Cart.total" in found and "shop/pricing.py::price" not in found


REPORTERS_CODE = """`Cart.total` is off by one for my own cart class:
```python
class Basket:
    \"\"\"My basket.\"\"\"
    items: list

    def __init__(self, items):
        self.shipping_cost = 0

    def add_item(self, item):
        ...
>>> def price(x): return 1
```
"""


def test_the_names_the_issue_code_defines_are_parsed_not_dunders_nor_prose() -> None:
    facts = parse_issue(REPORTERS_CODE + "\nthen class Foo and def bar in prose\n")
    assert facts.defined == ("Basket", "add_item", "price", "shipping_cost", "items")


@pytest.mark.parametrize("defined_foreign", [True, False])
def test_identifier_signal_skips_the_names_the_reporters_code_defines(index: RepoIndex, defined_foreign: bool) -> None:
    tables = load("localize.toml")
    tables["issue"]["defined_foreign"] = defined_foreign
    found = {e.selector for e in Localizer(index, Weights.from_tables(tables)).identifier(parse_issue(REPORTERS_CODE))}
    assert "shop/cart.py::Cart.total" in found
    reporters = {"shop/cart.py::Cart.add_item", "shop/pricing.py::price", "shop/shipping.py::shipping_cost"}
    assert found & reporters == (set() if defined_foreign else reporters)


def test_member_signal_spreads_a_named_class_over_its_methods(index: RepoIndex) -> None:
    localizer = Localizer(index)
    scores = localizer.member(localizer.identifier(parse_issue("`Cart` loses items")))
    assert {e.selector for e in scores} == {f"shop/cart.py::Cart.{m}" for m in ("__init__", "add_item", "total")}
    assert all(value == pytest.approx(1 / 3**0.5) for value in scores.values())


def test_callee_signal_follows_calls_out_of_named_entities(index: RepoIndex) -> None:
    localizer = Localizer(index)
    total = index.resolve("shop/cart.py::Cart.total")
    scores = {e.selector: s for e, s in localizer.callee({total: 0.8}).items()}
    assert scores == {"shop/pricing.py::price": 0.8}  # total's body calls price(); nothing else it uses is defined


def test_quote_signal_finds_the_message_in_the_code(index: RepoIndex) -> None:
    issue = "Checkout fails with\n\n    ValueError: no discount code on <Item 7> for the winter season\n"
    scores = Localizer(index).quote(parse_issue(issue))
    assert {e.selector: s for e, s in scores.items()} == {"shop/pricing.py::discount_rate": 1.0}


def test_a_message_quoted_inline_mid_sentence_is_found_without_its_exception_name(index: RepoIndex) -> None:
    issue = "Checking out raises `ValueError: no discount code on <Item 7> for the winter season` today.\n"
    facts = parse_issue(issue)
    assert "no discount code on" in facts.quotes
    scores = Localizer(index).quote(facts)
    assert {e.selector: s for e, s in scores.items()} == {"shop/pricing.py::discount_rate": 1.0}


def test_path_mention_and_dotted_module(index: RepoIndex) -> None:
    localizer = Localizer(index)
    assert localizer.path_mention(parse_issue("see src/shop/shipping.py")) == {"shop/shipping.py": 1.0}
    assert localizer.path_mention(parse_issue("`shop.pricing.price` is wrong")) == {"shop/pricing.py": 0.3}
    assert localizer.path_mention(parse_issue("`shop.Cart` is wrong")) == {}  # a package: too vague to count
    assert localizer.path_mention(parse_issue("tests/test_cart.py fails")) == {}


def test_printed_paths_are_sure_when_a_directory_or_a_unique_name_matches(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {"a/conf.py": "", "b/conf.py": "", "docs/conf.py": "", "a/core.py": ""}
    localizer = Localizer(RepoIndex(make_repo(tmp_path / "paths", files)))
    assert localizer.printed_path("/site-packages/a/conf.py") == ("a/conf.py", 1.0)
    assert localizer.printed_path("core.py") == ("a/core.py", 1.0)
    assert localizer.printed_path("conf.py") == pytest.approx(("a/conf.py", 1 / 3))
    assert localizer.path_mention(parse_issue("my conf.py sets it")) == {"a/conf.py": pytest.approx(1 / 3)}


def test_test_import_counts_imports_of_named_tests(index: RepoIndex) -> None:
    scores = Localizer(index).test_import(parse_issue("tests/test_cart.py::test_total fails"))
    assert set(scores) == {"shop/cart.py", "shop/pricing.py"}
    assert imported_modules(b"import a.b\nfrom c import d\nfrom . import e\n") == ["a.b", "c", "c.d"]


def test_imported_modules_reads_every_import_statement_and_no_string() -> None:
    source = (
        b"from __future__ import annotations\n"
        b"import os.path as p, json\n"
        b'"""import not_a_module"""\n'
        b"from pkg.sub import (one as uno,\n    two)\n"
        b"from pkg import *\n"
        b"def lazy():\n    import pkg.late\n    text = 'from fake import x'\n"
    )
    assert imported_modules(source) == [
        *("__future__", "__future__.annotations", "os.path", "json", "pkg.sub", "pkg.sub.one", "pkg.sub.two"),
        *("pkg", "pkg.*", "pkg.late"),
    ]
    python2 = b"import pkg.core\nprint 'legacy'\nfrom pkg.util import helper\n"
    assert imported_modules(python2) == ["pkg.core", "pkg.util", "pkg.util.helper"]  # ast would say nothing
    assert imported_modules(b"\xff\xfe not python (\n") == []


def test_imported_names_binds_each_name_to_what_it_stands_for() -> None:
    source = (
        b"from .core.ops import where, dot as d\n"
        b"from . import testing\n"
        b"from ..above import lost\n"
        b"from os import path\n"
        b"from .core import (\n    first,\n    second as two,\n)\n"
        b"from .star import *\n"
        b"import numpy as np\n"
    )
    assert imported_names(source, "pkg") == {
        "where": "pkg.core.ops.where",
        "d": "pkg.core.ops.dot",
        "testing": "pkg.testing",
        "path": "os.path",
        "first": "pkg.core.first",
        "two": "pkg.core.second",
    }  # `..above` climbs out of the top package: no name
    assert imported_names(b"from ..above import up\n", "pkg.sub")["up"] == "pkg.above.up"


def test_bm25_signal_ranks_by_words(index: RepoIndex) -> None:
    scores = Localizer(index).bm25(parse_issue("the parcel shipping cost by weight is too high").words)
    assert max(scores, key=scores.__getitem__).selector == "shop/shipping.py::shipping_cost"


def test_combined_ranking_excludes_tests_and_names_signals(index: RepoIndex) -> None:
    result = Localizer(index).localize(TRACEBACK, top=5)
    assert result.entities[0].selector == "shop/pricing.py::price"
    assert {"traceback", "bm25"} <= set(result.entities[0].signals)
    assert result.files[0][0] == "shop/pricing.py"
    assert not any(c.path.startswith("tests/") for c in result.entities)


@pytest.mark.parametrize(
    ("path", "peripheral"),
    [("docs/conf.py", True), ("setup.py", True), ("examples/a/b.py", True), ("shop/docs.py", False), ("x.py", False)],
)
def test_peripheral_files(path: str, peripheral: bool) -> None:
    assert is_peripheral(path) is peripheral


def test_rank_combines_entity_evidence_file_signals_and_the_prior(index: RepoIndex) -> None:
    entities = {e.selector: e for e in index.all_entities()}
    cart, total = entities["shop/cart.py"], entities["shop/cart.py::Cart.total"]
    price = entities["shop/pricing.py::price"]
    signals = Signals({"bm25": {total: 1.0, price: 0.9, cart: 1.0}}, {"bm25_file": {"shop/pricing.py": 1.0}})
    packaged = Weights.load()
    only = {**dict.fromkeys((*ENTITY_SIGNALS, *FILE_SIGNALS), 0.0), "bm25": 1.0, "bm25_file": 1.0}
    weights = replace(packaged, weights=only, tuning=replace(packaged.tuning, entity_to_file=0.5, file_to_entity=0.5))
    files, ranked = rank(signals, weights, top=5)
    assert [p for p, _ in files] == ["shop/pricing.py", "shop/cart.py"]  # 1 + 0.45 beats 0.5
    assert [c.selector for c in ranked] == ["shop/pricing.py::price", "shop/cart.py::Cart.total"]  # no modules
    assert ranked[0].score == pytest.approx(0.9 + 0.5) and ranked[0].signals == ("bm25",)  # the first file's: 1
    assert ranked[1].score == pytest.approx(1.0 + 0.5 * 0.5 / 1.45)  # its file's score over the first file's


@pytest.mark.parametrize("strength", [0.2, 1.0, 5.0])
def test_an_entity_gets_its_share_of_the_file_relative_to_the_first_file(index: RepoIndex, strength: float) -> None:
    entities = {e.selector: e for e in index.all_entities()}
    total, price = entities["shop/cart.py::Cart.total"], entities["shop/pricing.py::price"]
    files = {"shop/pricing.py": strength, "shop/cart.py": strength / 4}
    signals = Signals({"bm25": {total: 0.3, price: 0.1}}, {"bm25_file": files})
    packaged = Weights.load()
    only = {**dict.fromkeys((*ENTITY_SIGNALS, *FILE_SIGNALS), 0.0), "bm25": 1.0, "bm25_file": 1.0}
    weights = replace(packaged, weights=only, tuning=replace(packaged.tuning, entity_to_file=0.0, file_to_entity=2.0))
    ranked = {e.selector: e.score for e in rank(signals, weights, top=5)[1]}
    assert ranked == pytest.approx({price.selector: 0.1 + 2.0, total.selector: 0.3 + 2.0 / 4})


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
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snaffle.cli",
            "localize",
            "--repo",
            str(calc_repo),
            "--issue",
            "add returns the wrong sum",
            "--failing-test",
            "tests/test_calc.py::test_add",
            "--top",
            "3",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) == {"files", "entities", "elapsed_s"}
    top = result["entities"][0]
    assert top["selector"] == "calc/__init__.py::add" and top["path"] == "calc/__init__.py"
    assert "sbfl" in top["signals"] and isinstance(top["score"], float)
    assert result["files"][0] == {"path": "calc/__init__.py", "score": result["files"][0]["score"]}


def test_the_packaged_weights_are_the_ones_measured() -> None:
    weights = Weights.load()
    assert (weights.tuning.entity_to_file, weights.tuning.file_to_entity) == (0.5, 4.0)
    assert (weights.entity_bm25.k1, weights.file_bm25.path) == (2.0, 3.0)
    assert set(weights.weights) == {*ENTITY_SIGNALS, *FILE_SIGNALS}


@pytest.mark.parametrize(
    ("table", "key", "message"),
    [
        ("tuning", "file_to_entity", r"\[tuning\] lacks the required key 'file_to_entity'"),
        ("weights", "sbfl", r"\[weights\] lacks the required key 'sbfl'"),
        ("file_bm25", "k1", r"\[file_bm25\] lacks the required key 'k1'"),
    ],
)
def test_a_missing_weight_is_an_error_naming_it(table: str, key: str, message: str) -> None:
    tables = load("localize.toml")
    del tables[table][key]
    with pytest.raises(DataError, match=message):
        Weights.from_tables(tables)


def test_an_unknown_weight_or_a_missing_table_is_an_error_naming_it() -> None:
    tables = load("localize.toml")
    tables["weights"]["bm52"] = 1.0
    with pytest.raises(DataError, match="unknown key 'bm52'"):
        Weights.from_tables(tables)
    with pytest.raises(DataError, match=r"lacks the required table \[tuning\]"):
        Weights.from_tables({k: v for k, v in load("localize.toml").items() if k != "tuning"})


def test_a_call_in_prose_is_read_from_where_its_name_starts() -> None:
    """`.replace()` and a chained `.values(` are calls; inside `a.b.c(` only the whole dotted name is one."""
    facts = parse_issue("using .replace() is faster than str.translate(), and\nqs.annotate(x=1)\n .values('x')\n")
    assert {"replace", "str.translate", "qs.annotate", "values"} <= set(facts.code_identifiers)
    assert "translate" not in facts.code_identifiers and "annotate" not in facts.code_identifiers
