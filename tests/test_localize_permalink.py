"""Permalinks as an entity signal (`permalink`): the lines an issue links to (`github.com/o/r/blob/REF/PATH#L12`),
read at the linked commit when the repository holds it and found again by name at HEAD, else at the worktree's line;
on repositories built here with real git. A link is text a reporter (or a hostile issue) wrote: its ref never
reaches git as an option, and its path never leaves the indexed files."""

from __future__ import annotations

from pathlib import Path

from snaffle.agentless.issue_text import Permalink, parse_issue
from snaffle.agentless.localize import Localizer
from snaffle.index.repo import RepoIndex
from tests.helpers import git, make_repo, only_signals

OLD = (
    "def first():\n    return 1\n\n\n"
    "def parse(text):\n    return text.split()\n\n\n"
    "def render(rows):\n    return rows\n"
)
NEW = "def helper():\n    return 0\n\n\n" + OLD
"""HEAD moved `parse` four lines down: line 5 at the old commit is `parse`, at HEAD it is `first`."""


def history(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose first commit has `parse` on line 5 and whose HEAD has `helper` prepended; the old hash."""
    repo = make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/text.py": OLD, "tests/test_text.py": OLD})
    old = git(repo, "rev-parse", "HEAD").strip()
    (repo / "pkg/text.py").write_text(NEW, encoding="utf-8")
    git(repo, "commit", "-q", "-am", "a helper")
    return repo, old


def linked(repo: Path, issue: str) -> dict[str, float]:
    localizer = Localizer(RepoIndex(repo), only_signals(permalink=1.0))
    return {entity.selector: score for entity, score in localizer.permalink(parse_issue(issue)).items()}


def test_links_are_parsed_from_github_and_gitlab_with_their_line_ranges() -> None:
    issue = (
        "See https://github.com/o/r/blob/0123abc/pkg/text.py#L5 and "
        "https://gitlab.com/g/sub/r/-/blob/main/pkg/text.py#L9-12 and "
        "https://github.com/o/r/blob/main/pkg/text.py#L9-L10, and a plain https://github.com/o/r/blob/main/pkg/text.py"
    )
    assert parse_issue(issue).permalinks == (
        Permalink("0123abc", "pkg/text.py", 5, 5),
        Permalink("main", "pkg/text.py", 9, 12),
        Permalink("main", "pkg/text.py", 9, 10),
    )


def test_a_link_at_a_known_commit_is_read_there_and_found_again_by_name(tmp_path: Path) -> None:
    repo, old = history(tmp_path)
    assert linked(repo, f"Wrong here: https://github.com/o/r/blob/{old}/pkg/text.py#L5") == {"pkg/text.py::parse": 1.0}
    short = old[:10]
    assert linked(repo, f"https://github.com/o/r/blob/{short}/pkg/text.py#L5") == {"pkg/text.py::parse": 1.0}


def test_a_branch_link_or_an_unknown_commit_reads_the_worktree_line(tmp_path: Path) -> None:
    repo, _ = history(tmp_path)
    assert linked(repo, "https://github.com/o/r/blob/main/pkg/text.py#L5") == {"pkg/text.py::first": 1.0}
    unknown = "https://github.com/o/r/blob/" + "ab" * 20 + "/pkg/text.py#L9"
    assert linked(repo, unknown) == {"pkg/text.py::parse": 1.0}


def test_a_range_scores_the_entities_at_both_ends(tmp_path: Path) -> None:
    repo, _ = history(tmp_path)
    found = linked(repo, "https://github.com/o/r/blob/main/pkg/text.py#L9-L14")
    assert found == {"pkg/text.py::parse": 1.0, "pkg/text.py::render": 1.0}


def test_a_link_into_a_ref_with_slashes_finds_the_file_after_them(tmp_path: Path) -> None:
    repo, _ = history(tmp_path)
    found = linked(repo, "https://github.com/o/r/blob/release/3.x/pkg/text.py#L9")
    assert found == {"pkg/text.py::parse": 1.0}


def test_tests_module_lines_and_unindexed_paths_score_nothing(tmp_path: Path) -> None:
    repo, _ = history(tmp_path)
    issue = (
        "https://github.com/o/r/blob/main/tests/test_text.py#L5 "
        "https://github.com/o/r/blob/main/pkg/text.py#L4 "
        "https://github.com/o/r/blob/main/pkg/gone.py#L5 "
        "https://github.com/o/r/blob/main/pkg/text.py#L99999999"
    )
    assert linked(repo, issue) == {}


def test_a_hostile_ref_never_reaches_git(tmp_path: Path) -> None:
    """Only a hexadecimal commit name is looked up: a branch named in a link is the reporter's, and an option-shaped
    ref or a path climbing out of the repository reads the worktree's indexed file or nothing."""
    repo, old = history(tmp_path)
    git(repo, "branch", "old", old)
    target = tmp_path / "written"
    issue = (
        "https://github.com/o/r/blob/old/pkg/text.py#L5 "
        "https://github.com/o/r/blob/--textconv/pkg/text.py#L5 "
        f"https://github.com/o/r/blob/--output={target}/pkg/text.py#L5 "
        f"https://github.com/o/r/blob/main/../../{tmp_path.name}/repo/pkg/text.py#L5 "
        "https://github.com/o/r/blob/main/../../../../etc/passwd#L1"
    )
    assert linked(repo, issue) == {"pkg/text.py::first": 1.0}  # each read at the worktree's line 5
    assert not target.exists()


def test_a_flood_of_links_is_capped(tmp_path: Path) -> None:
    repo, _ = history(tmp_path)
    links = " ".join(f"https://github.com/o/r/blob/main/pkg/text.py#L{n}" for n in range(1, 5000))
    assert len(parse_issue(links).permalinks) == 20
    assert set(linked(repo, links)) == {f"pkg/text.py::{n}" for n in ("helper", "first", "parse", "render")}


def test_the_linked_entity_ranks_first_through_localize(tmp_path: Path) -> None:
    repo, old = history(tmp_path)
    issue = f"Rendering is wrong\n\nThe rows come out wrong, see https://github.com/o/r/blob/{old}/pkg/text.py#L6\n"
    index = RepoIndex(repo)
    found = Localizer(index, only_signals(permalink=1.0, bm25=1.0)).localize(issue)
    assert found.entities[0].selector == "pkg/text.py::parse"
    unlinked = Localizer(index, only_signals(bm25=1.0)).localize(issue)
    assert unlinked.entities[0].selector == "pkg/text.py::render"
