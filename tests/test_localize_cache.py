"""The localizer's caches change nothing but speed: a warm cache ranks a checkout of another commit exactly as an
empty cache does, and what a cache entry holds is believed only for the file text it was written for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from snaffle.agentless.documents import DOCUMENTS_DIR
from snaffle.agentless.issue_text import parse_issue
from snaffle.agentless.localize import Localizer
from snaffle.index.repo import RepoIndex
from tests.helpers import git, make_repo, packaged_with
from tests.test_localize import FILES

FIRST: dict[str, str | bytes] = {
    **{name: FILES[name] for name in ("shop/__init__.py", "shop/cart.py")},
    "shop/pricing.py": str(FILES["shop/pricing.py"]).replace(
        "f'no discount code on {item} for", "'no discount code for"
    ),
    "shop/shipping.py": "WEIGHT_LIMIT = 30\n\n\ndef shipping_cost(weight):\n    return 5 + weight // 10\n",
    "shop/legacy.py": "def old_total(cart):\n    return cart.total() * 1.2\n",
    "tests/test_cart.py": "from shop.cart import Cart\n\n\ndef test_total():\n    assert Cart().total() == 0\n",
}
SECOND: dict[str, str | None] = {
    "shop/pricing.py": FIRST["shop/pricing.py"].replace("0.9", "0.85") + "\n\ndef seasonal_rate(season):\n"  # type: ignore[operator]
    "    return {'winter': 0.8}.get(season, 1.0)\n",
    "shop/cart.py": str(FIRST["shop/cart.py"]) + "\n    def clear(self):\n        self.items = []\n",
    "shop/coupons.py": "def apply_coupon(cart, code):\n    return cart.total() - discount_for(code)\n",
    "shop/legacy.py": None,
}
SOURCES = ["shop/__init__.py", "shop/cart.py", "shop/coupons.py", "shop/pricing.py", "shop/shipping.py"]
"""The second commit's files that the localizer indexes (test files are never candidates)."""
ISSUE = """Cart.total ignores the winter discount

```python
>>> cart = Cart()
>>> cart.total()
```
raises `ValueError: no discount code for the winter season` from discount_rate when a coupon is applied.
"""


@pytest.fixture
def commits(tmp_path: Path) -> tuple[Path, Path]:
    """Two worktrees of one repository, at its first and at its second commit (a file edited, added, deleted)."""
    origin = make_repo(tmp_path / "origin", FIRST)
    first = git(origin, "rev-parse", "HEAD").strip()
    for name, content in SECOND.items():
        if content is None:
            (origin / name).unlink()
        else:
            (origin / name).write_text(content, encoding="utf-8")
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "second")
    second = git(origin, "rev-parse", "HEAD").strip()
    old, new = tmp_path / "old", tmp_path / "new"
    git(origin, "worktree", "add", "-q", "--detach", str(old), first)
    git(origin, "worktree", "add", "-q", "--detach", str(new), second)
    return old, new


def ranking(repo: Path, cache: Path | None) -> tuple[dict[str, Any], Any]:
    """The ranking of ISSUE (its timing left out) and every signal, weighted 0 or not, from one fresh index."""
    localizer = Localizer(RepoIndex(repo, cache))
    found = localizer.localize(ISSUE).as_json()
    found.pop("elapsed_s")
    return found, localizer.signals(parse_issue(ISSUE), every=True)


def test_a_warm_cache_ranks_another_commit_as_an_empty_cache_does(commits: tuple[Path, Path], tmp_path: Path) -> None:
    old, new = commits
    cache = tmp_path / "cache"
    assert ranking(old, cache) == ranking(old, None)  # fills the cache from the first commit
    cold = ranking(new, None)
    assert cold[0]["entities"], "the issue must rank something for the comparison to mean anything"
    stats = RepoIndex(new, cache).build(workers=1, paths=SOURCES)
    assert (stats.parsed, stats.cached) == (3, 2)  # pricing, cart and coupons are new texts
    assert ranking(new, cache) == cold
    assert ranking(new, cache) == cold  # the same checkout again: its manifest says what is unchanged


def test_a_copy_of_the_checkout_elsewhere_ranks_the_same(commits: tuple[Path, Path], tmp_path: Path) -> None:
    _, new = commits
    cache = tmp_path / "cache"
    cold = ranking(new, cache)
    moved = tmp_path / "moved"
    shutil.copytree(new, moved)
    assert RepoIndex(moved, cache).build(workers=1, paths=SOURCES).parsed == 0
    assert ranking(moved, cache) == cold


def test_corrupt_document_entries_are_rebuilt(commits: tuple[Path, Path], tmp_path: Path) -> None:
    old, new = commits
    cache = tmp_path / "cache"
    ranking(old, cache)
    entries = list((cache / DOCUMENTS_DIR).rglob("*.json"))
    assert entries
    for number, entry in enumerate(entries):
        entry.write_text(['{"format": "snaffle-documents/3", "layout": ', "[]", "\0\xff", '{"format": 7}'][number % 4])
    assert ranking(old, cache) == ranking(old, None)


def test_a_document_entry_of_another_text_is_not_believed(tmp_path: Path) -> None:
    """Two files of one layout (same names on the same lines): the entry of one, copied over the other's, must be
    ignored, not ranked as that other file's words."""
    files: dict[str, str | bytes] = {
        "pkg/alpha.py": "def handle(x):\n    return parse_invoice(x)\n",
        "pkg/beta.py": "def handle(x):\n    return render_chart(x)\n",
    }
    repo, cache = make_repo(tmp_path / "repo", files), tmp_path / "cache"
    index = RepoIndex(repo, cache)
    Localizer(index).prepare()
    alpha, beta = (index.info(p).sha1 for p in files)
    entry = cache / DOCUMENTS_DIR / alpha[:2] / f"{alpha[2:]}.json"
    poisoned = cache / DOCUMENTS_DIR / beta[:2] / f"{beta[2:]}.json"
    assert json.loads(entry.read_text())["layout"] == json.loads(poisoned.read_text())["layout"]
    shutil.copyfile(entry, poisoned)
    found = Localizer(RepoIndex(repo, cache)).localize("the chart is not rendered by render_chart").as_json()
    assert found["files"][0]["path"] == "pkg/beta.py"
    assert "invoice" not in Localizer(RepoIndex(repo, cache)).prepare().tables.documents[1].terms


@pytest.mark.parametrize(("weight", "built"), [(0.0, False), (1.0, True)])
def test_graph_signals_weighted_0_build_no_graph(commits: tuple[Path, Path], weight: float, built: bool) -> None:
    graph_signals = dict.fromkeys(("callee", "caller", "pagerank", "test_callee", "reach", "reach_file"), weight)
    localizer = Localizer(RepoIndex(commits[1]), packaged_with(graph_signals))
    assert localizer.localize(ISSUE).entities
    assert (localizer._graph is not None) is built
