"""The repository's history as a file signal (`history`): files changed by past commits whose messages read like the
issue, on repositories built here with real git (merges, a branch after HEAD, worktrees at other commits)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from snaffle.agentless.history import CommitStore, HistoryParams, read_commits
from snaffle.agentless.issue_text import parse_issue
from snaffle.agentless.localize import Localizer
from snaffle.index.repo import RepoIndex
from tests.helpers import git, make_repo, only_signals

PARAMS = HistoryParams(commits=1000, similar=50, k1=1.2, b=0.75)
FILES: dict[str, str | bytes] = {
    "shop/__init__.py": "",
    "shop/rounding.py": "def round_price(amount):\n    return int(amount * 100) / 100\n",
    "shop/report.py": "def print_report(orders):\n    return sum(o.total for o in orders)\n",
    "shop/tax.py": "def vat(amount):\n    return amount * 0.2\n",
    "shop/cart.py": "def add(cart, item):\n    cart.append(item)\n",
}
ISSUE = "Prices lose a cent\n\nThe cents of a price are truncated instead of rounded when I total a cart.\n"


def change(repo: Path, path: str, message: str) -> str:
    """Append a line to `path` and commit it with `message`; the new commit's hash."""
    with (repo / path).open("a", encoding="utf-8") as handle:
        handle.write(f"# {len(message)}\n")
    git(repo, "commit", "-q", "-am", message)
    return git(repo, "rev-parse", "HEAD").strip()


def shop(tmp_path: Path) -> Path:
    """main: initial, a rounding fix, a merged pull request on tax; a branch after main's HEAD changes report.py
    with a message that reads like the issue."""
    repo = make_repo(tmp_path / "shop", FILES)
    change(repo, "shop/rounding.py", "Round the cents of a price instead of truncating them")
    git(repo, "checkout", "-q", "-b", "vat")
    change(repo, "shop/tax.py", "wip")
    change(repo, "shop/tax.py", "more")
    git(repo, "checkout", "-q", "main")
    message = "Merge pull request #7 from someone/vat\n\nVAT of a cart total"
    git(repo, "merge", "-q", "--no-ff", "-m", message, "vat")
    git(repo, "checkout", "-q", "-b", "later")
    change(repo, "shop/report.py", "Cents of a price truncated in the report: round them")
    git(repo, "checkout", "-q", "main")
    return repo


def test_files_changed_by_commits_that_read_like_the_issue_rank_first(tmp_path: Path) -> None:
    repo = shop(tmp_path)
    found = Localizer(RepoIndex(repo), only_signals(history=1.0)).localize(ISSUE)
    assert found.files[0][0] == "shop/rounding.py"
    assert "shop/report.py" not in dict(found.files)  # changed on a branch after HEAD: never read
    assert "shop/cart.py" not in dict(found.files)  # only in the initial commit, whose message says nothing


def test_a_merged_pull_request_is_one_change_with_its_title_and_all_its_files(tmp_path: Path) -> None:
    history = CommitStore(None).history(shop(tmp_path), PARAMS)
    commits = history.commits
    assert [commits.files[n] for n in history.numbers] == [
        ["shop/tax.py"],
        ["shop/rounding.py"],
        ["shop/__init__.py", "shop/cart.py", "shop/report.py", "shop/rounding.py", "shop/tax.py"],
    ]
    merge = int(history.numbers[0])
    assert sorted(t for t, numbers in commits.postings.items() if merge in numbers) == ["cart", "total", "vat"]
    assert commits.lengths[merge] == 3  # the title, not the branch line
    scores = history.file_scores(parse_issue("VAT is wrong on a cart total").words, {"shop/tax.py", "shop/cart.py"})
    assert scores == {"shop/tax.py": 1.0}  # cart.py: only in the initial commit, whose message shares no word


def stored(cache: Path) -> dict[str, object]:
    [written] = (cache / "history").iterdir()
    return dict(json.loads(written.read_text()))


def test_a_worktree_at_another_commit_reads_only_the_commits_not_seen(tmp_path: Path) -> None:
    repo, cache = shop(tmp_path), tmp_path / "cache"
    store = CommitStore(cache)
    assert len(store.history(repo, PARAMS)) == 3
    assert len(stored(cache)["shas"]) == 3  # type: ignore[arg-type]
    newer = tmp_path / "newer"
    git(repo, "worktree", "add", "-q", "-b", "next", str(newer), "main")
    change(newer, "shop/cart.py", "Add items to a cart")
    head, new = read_commits(newer, set(stored(cache)["shas"]), 100)  # type: ignore[call-overload]
    assert [c.sha for c in new] == [head]  # stopped at the first commit seen before
    history = store.history(newer, PARAMS)
    assert [history.commits.files[n] for n in history.numbers][:2] == [["shop/cart.py"], ["shop/tax.py"]]
    assert len(stored(cache)["shas"]) == 4  # type: ignore[arg-type]  # one store per repository, worktrees shared
    older = tmp_path / "older"
    git(repo, "worktree", "add", "-q", "--detach", str(older), "main~1")
    [written] = (cache / "history").iterdir()
    modified = written.stat().st_mtime_ns
    history = store.history(older, PARAMS)
    assert [history.commits.files[n] for n in history.numbers][0] == ["shop/rounding.py"]
    assert len(history) == 2
    assert written.stat().st_mtime_ns == modified  # every commit known: nothing written
    assert len(store.history(newer, replace(PARAMS, commits=2))) == 2
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--shared", str(repo), str(clone))
    assert len(store.history(clone, PARAMS)) == 3
    assert len(list((cache / "history").iterdir())) == 2  # a clone: its origin's store
    again = tmp_path / "again"
    git(tmp_path, "clone", "-q", "--shared", str(repo), str(again))
    modified = max(p.stat().st_mtime_ns for p in (cache / "history").iterdir())
    assert len(store.history(again, PARAMS)) == 3
    assert max(p.stat().st_mtime_ns for p in (cache / "history").iterdir()) == modified  # the next clone reads it


def test_a_damaged_store_is_read_again_from_git(tmp_path: Path) -> None:
    repo, cache = shop(tmp_path), tmp_path / "cache"
    CommitStore(cache).history(repo, PARAMS)
    [written] = (cache / "history").iterdir()
    good = written.read_text()
    for damage in ('{"format": 2, "shas": ["abc"], "parents": []}', "[1", '{"format": 1, "commits": {}}'):
        written.write_text(damage)
        assert len(CommitStore(cache).history(repo, PARAMS)) == 3
        assert len(stored(cache)["shas"]) == 3  # type: ignore[arg-type]
    for postings in ({"cents": [99, -1, 2**70, "x"]}, {"cents": "0 1"}, {"cents": [[0]]}):
        written.write_text(json.dumps({**json.loads(good), "postings": postings}))
        history = CommitStore(cache).history(repo, PARAMS)  # nothing new to read: the damaged store is used
        assert history.file_scores(parse_issue(ISSUE).words, {"shop/rounding.py"}) in ({}, {"shop/rounding.py": 1.0})
    written.write_text(json.dumps({**json.loads(good), "files": [1, 2, 3]}))
    assert len(CommitStore(cache).history(repo, PARAMS)) == 3  # read again from git


def test_no_repository_or_no_commit_is_no_history(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    (plain / "shop").mkdir(parents=True)
    (plain / "shop" / "rounding.py").write_text(str(FILES["shop/rounding.py"]))
    assert len(CommitStore(tmp_path / "cache").history(plain, PARAMS)) == 0
    found = Localizer(RepoIndex(plain), only_signals(history=1.0, bm25=1.0)).localize(ISSUE)
    assert found.entities[0].selector == "shop/rounding.py::round_price"
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    assert len(CommitStore(tmp_path / "cache").history(empty, PARAMS)) == 0


def test_a_repository_config_cannot_make_the_history_run_a_program(tmp_path: Path) -> None:
    """Attack: the repository's own config asks `git log` to verify signatures with a program of its choosing, and a
    commit carries a signature (a model may have written both into a checkout)."""
    repo = make_repo(tmp_path / "r", {"a.py": "x = 1\n"})
    marker, program = tmp_path / "PWNED", tmp_path / "evil.sh"
    program.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    program.chmod(0o755)
    tree, parent = git(repo, "write-tree").strip(), git(repo, "rev-parse", "HEAD").strip()
    signed = (
        f"tree {tree}\nparent {parent}\nauthor a <a@b> 1700000000 +0000\ncommitter a <a@b> 1700000000 +0000\n"
        "gpgsig -----BEGIN PGP SIGNATURE-----\n \n AAAA\n -----END PGP SIGNATURE-----\n\nsigned\n"
    )
    (tmp_path / "commit.txt").write_text(signed)
    git(
        repo, "update-ref", "HEAD", git(repo, "hash-object", "-t", "commit", "-w", str(tmp_path / "commit.txt")).strip()
    )
    git(repo, "config", "gpg.program", str(program))
    git(repo, "config", "log.showSignature", "true")
    git(repo, "log", "-1")  # the attack as plain git runs it
    assert marker.exists()
    marker.unlink()
    assert len(CommitStore(tmp_path / "cache").history(repo, PARAMS).commits.shas) == 2  # both read
    assert not marker.exists()


def test_the_history_ranks_files_and_passes_its_entities_only_its_share(tmp_path: Path) -> None:
    repo = shop(tmp_path)
    issue = "Cents lost in a cart\n\nI add an item to a cart and the cents of its price are truncated.\n"
    plain = Localizer(RepoIndex(repo), only_signals(bm25=1.0)).localize(issue)
    weights = only_signals(bm25=1.0, history=1.0)
    weights = replace(weights, tuning=replace(weights.tuning, history_to_entity=0.0))  # the history ranks files only
    with_history = Localizer(RepoIndex(repo), weights).localize(issue)
    assert plain.files[0][0] == "shop/cart.py"
    assert with_history.files[0][0] == "shop/rounding.py"
    assert [(e.selector, e.score) for e in with_history.entities] == [(e.selector, e.score) for e in plain.entities]
    shared = replace(weights, tuning=replace(weights.tuning, history_to_entity=1.0))
    lifted = {e.selector: e.score for e in Localizer(RepoIndex(repo), shared).localize(issue).entities}
    before = {e.selector: e.score for e in plain.entities}
    assert lifted["shop/rounding.py::round_price"] > before.get("shop/rounding.py::round_price", 0.0)
    assert lifted["shop/cart.py::add"] < before["shop/cart.py::add"]  # its file's share is now relative to rounding's
