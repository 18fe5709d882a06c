"""What the changes an issue refers to touched (`referenced`): `identical to #12` finds the commits of HEAD's chain
whose messages refer to #12 and scores the entities their diffs left, found again by name at HEAD; on repositories
built here with real git."""

from __future__ import annotations

from pathlib import Path

from snaffle.agentless.history import CommitStore, HistoryParams
from snaffle.agentless.issue_text import parse_issue
from snaffle.agentless.localize import Localizer
from snaffle.agentless.referenced import changed_entities, referenced_scores
from snaffle.index.repo import RepoIndex
from tests.helpers import git, make_repo, only_signals

PARAMS = HistoryParams(commits=1000, similar=10, k1=1.2, b=0.75)
SHOP = (
    "def add(cart, item):\n    cart.append(item)\n\n\n"
    "def round_price(amount):\n    return int(amount * 100) / 100\n\n\n"
    "def total(cart):\n    return sum(cart)\n"
)


def commit(repo: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def shop(tmp_path: Path) -> Path:
    """#12 fixed `round_price` (and its test); later a helper moved everything down; a branch after HEAD refers to #40;
    #77 is a sweep over 25 files."""
    repo = make_repo(tmp_path / "shop", {"shop/__init__.py": "", "shop/cart.py": SHOP})
    fixed = SHOP.replace("int(amount * 100) / 100", "round(amount, 2)")
    commit(repo, {"shop/cart.py": fixed, "tests/test_cart.py": "def test_round():\n    pass\n"}, "Round (fixes #12)")
    commit(repo, {f"shop/m{n}.py": f"def f{n}():\n    return {n}\n" for n in range(25)}, "Sweep for #77")
    commit(repo, {"shop/cart.py": "def helper():\n    return 0\n\n\n" + fixed}, "A helper")
    git(repo, "checkout", "-q", "-b", "later")
    commit(repo, {"shop/cart.py": "def helper():\n    return 1\n\n\n" + fixed}, "Merge pull request #40 from x/y")
    git(repo, "checkout", "-q", "main")
    return repo


def scores(repo: Path, issue: str) -> dict[str, float]:
    index = RepoIndex(repo)
    history = CommitStore(None).history(repo, PARAMS)
    facts = parse_issue(issue)
    found = referenced_scores(index, history, facts.references, facts.commits)
    return {entity.selector: round(score, 3) for entity, score in found.items()}


def test_numbers_are_read_from_hashes_and_urls_but_not_anchors_or_entities() -> None:
    issue = (
        "Same as #12 and https://github.com/o/r/pull/345, see https://gitlab.com/g/r/-/merge_requests/9 "
        "and #12 again; not #L20, &#123; or issue#5 or #1"
    )
    assert parse_issue(issue).references == ("12", "345", "9")
    assert len(parse_issue(" ".join(f"#{n}" for n in range(100, 5000))).references) == 10


def test_a_referenced_fix_scores_what_it_touched_found_again_by_name(tmp_path: Path) -> None:
    repo = shop(tmp_path)
    assert scores(repo, "Identical to #12, but for totals.") == {"shop/cart.py::round_price": 1.0}


def test_a_commit_after_head_a_sweep_and_an_unknown_number_score_nothing(tmp_path: Path) -> None:
    repo = shop(tmp_path)
    assert scores(repo, "Since #40 and #77 and #999 it is broken.") == {}
    index = RepoIndex(repo)
    sweep = git(repo, "log", "-1", "--format=%H", "--grep=#77").strip()
    assert changed_entities(index, sweep, set(index.files())) == []  # 25 files: too broad to say anything


def test_the_root_commit_and_a_missing_commit_score_nothing(tmp_path: Path) -> None:
    repo = shop(tmp_path)
    root = git(repo, "rev-list", "--max-parents=0", "HEAD").strip()
    index = RepoIndex(repo)
    assert changed_entities(index, root, set(index.files())) == []
    assert changed_entities(index, "ab" * 20, set(index.files())) == []


def test_the_referenced_entity_ranks_first_through_localize(tmp_path: Path) -> None:
    repo = shop(tmp_path)
    issue = "Totals of a cart are wrong\n\nLike #12, the total of a cart is wrong.\n"
    index = RepoIndex(repo)
    found = Localizer(index, only_signals(referenced=1.0, bm25=1.0)).localize(issue)
    assert found.entities[0].selector == "shop/cart.py::round_price"
    plain = Localizer(index, only_signals(bm25=1.0)).localize(issue)
    assert plain.entities[0].selector == "shop/cart.py::total"


def test_hashes_are_read_from_text_and_commit_urls_but_not_addresses_colours_or_permalinks() -> None:
    issue = (
        "Broken since 1a2b3c4d, see https://github.com/o/r/commit/9f8e7d6c5b4a and "
        "https://github.com/o/r/blob/abcdef1234/x.py#L3; not 0x7f3a2b1c9d, #ff00aa1, deadbeef, 12345678, "
        "a/1a2b3c4e, v1.2b3c4d5e or abc1234-def"
    )
    assert parse_issue(issue).commits == ("9f8e7d6c5b4a", "1a2b3c4d")


def test_a_named_commit_in_heads_past_scores_what_it_touched(tmp_path: Path) -> None:
    repo = shop(tmp_path)
    fix = git(repo, "log", "-1", "--format=%H", "--grep=Round").strip()
    assert scores(repo, f"Broken since {fix}.") == {"shop/cart.py::round_price": 1.0}
    later = git(repo, "rev-parse", "later").strip()
    assert scores(repo, f"Works at {later}, a commit after HEAD: never read.") == {}
    assert scores(repo, "Since 1a2b3c4d5e, which no repository here holds.") == {}


def test_a_directory_without_git_scores_nothing_and_localizes(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    (plain / "shop").mkdir(parents=True)
    (plain / "shop" / "cart.py").write_text(SHOP, encoding="utf-8")
    issue = "Totals are wrong\n\nLike #12, since 1a2b3c4d5e, https://github.com/o/r/blob/1a2b3c4d5e/shop/cart.py#L5\n"
    found = Localizer(RepoIndex(plain), only_signals(referenced=1.0, permalink=1.0, bm25=1.0)).localize(issue)
    assert all("referenced" not in e.signals for e in found.entities)
    # no commit to read the link at: the worktree's line 5
    assert [e.selector for e in found.entities if "permalink" in e.signals] == ["shop/cart.py::round_price"]


def test_at_most_eight_commits_are_read_per_issue(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "many", {"m/__init__.py": ""})
    for n in range(10):
        commit(repo, {f"m/f{n}.py": f"def f{n}():\n    return {n}\n"}, f"Add f{n} (#{100 + n})")
    found = scores(repo, " ".join(f"See #{100 + n}." for n in range(10)))
    assert found == {f"m/f{n}.py::f{n}": 1.0 for n in range(8)}
