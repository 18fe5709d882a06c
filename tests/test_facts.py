"""Issue snippets run in the real sandbox: what they did, localization from it, snippet evidence, and attacks."""

from __future__ import annotations

import io
import time
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from snaffle.agentless import facts
from snaffle.agentless.facts import SnippetLimits
from snaffle.agentless.localize import Localizer
from snaffle.agentless.validate import run_tests
from snaffle.index.repo import RepoIndex
from snaffle.sandbox import Sandbox
from snaffle.trace.show import ShowOptions, show
from snaffle.trajectory import stage_event
from snaffle.workspace import Workspace
from tests.helpers import FORK_BOMB, make_repo

SHELF_SOURCE = '''"""A shelf of named slots."""


class Shelf:
    """Slots by key; frozen keys cannot be reassigned."""

    def __init__(self):
        self.slots = {}
        self.frozen = {"frozen"}

    def __getitem__(self, key):
        return self.slots[key]

    def __setitem__(self, key, value):
        if key in self.frozen or key.startswith("f"):
            raise ValueError(f"slot {key!r} is frozen")
        self.slots[key] = value

    def keys(self):
        return sorted(self.slots)

    def total(self):
        return sum(self.slots.values()) + 1


def describe(shelf):
    return ", ".join(f"{k}={shelf[k]}" for k in shelf.keys())
'''
SHELF_FILES: dict[str, str | bytes] = {
    "shelf/__init__.py": "from shelf.core import Shelf, describe\n",
    "shelf/core.py": SHELF_SOURCE,
    "tests/test_core.py": (
        "from shelf import Shelf\n\n\ndef test_keys():\n    s = Shelf()\n    s['a'] = 1\n    assert s.keys() == ['a']\n"
    ),
}
RAISING_ISSUE = """Shelf refuses my key

Setting a slot called "fish" on a Shelf fails although only "frozen" is frozen:

    >>> from shelf import Shelf
    >>> s = Shelf()
    >>> s["fish"] = 1
    Traceback (most recent call last):
      ...
    ValueError: slot 'fish' is frozen
"""
WRONG_VALUE_ISSUE = """Shelf total is off by one

    >>> from shelf import Shelf
    >>> s = Shelf()
    >>> s["a"] = 2
    >>> s.total()
    3

I expected `s.total()` to return `2`.
"""
FAST = SnippetLimits(
    timeout_s=6.0,
    output_cap_bytes=4_000,
    memory_mb=1024,
    file_mb=4,
    coverage=True,
    infer_imports=False,
    max_imports=3,
    ordered_expectations=False,
    indented_scripts=False,
    kind_expectations=False,
    raised_expectations=False,
)
INFER = replace(FAST, infer_imports=True, ordered_expectations=True)


@pytest.fixture
def shelf_repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "shelf", SHELF_FILES)


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox.create(tmp_path / "sandbox")


def patched(repo: Path, tmp_path: Path, old: str, new: str) -> Workspace:
    """A clone of `repo` with one replacement in shelf/core.py."""
    clone = Workspace.open(repo).clone(tmp_path / f"clone-{abs(hash(new))}")
    path = clone.root / "shelf" / "core.py"
    path.write_text(path.read_text().replace(old, new))
    return clone


def test_a_snippet_that_raises_localizes_to_the_raising_entity(shelf_repo: Path, sandbox: Sandbox) -> None:
    found = facts.gather(RAISING_ISSUE, shelf_repo, sandbox, FAST)
    (run,) = found.runs
    assert run.reason == "raised" and run.seen.raised is not None
    assert run.seen.raised.line == "ValueError: slot 'fish' is frozen"
    assert run.seen.raised.repo_frames[-1][0] == "shelf/core.py"
    index = RepoIndex(shelf_repo)
    localizer = Localizer(index)
    without = {c.selector: c for c in localizer.localize(RAISING_ISSUE, top=50).entities}
    with_execution = localizer.localize(RAISING_ISSUE, execution=facts.signals(found, index))
    raising = with_execution.entities[0]
    assert raising.selector == "shelf/core.py::Shelf.__setitem__" and "raised" in raising.signals
    assert "raised" not in without[raising.selector].signals  # the issue names the class only: the run says where
    assert raising.score > without[raising.selector].score + 1.0
    executed = {e.selector for e in facts.signals(found, index)["executed"]}
    assert executed == {"shelf/core.py::Shelf.__init__", "shelf/core.py::Shelf.__setitem__"}


def test_a_patch_that_leaves_the_snippets_exception_in_place_is_judged_failed(
    shelf_repo: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    (evidence,) = facts.gather(RAISING_ISSUE, shelf_repo, sandbox, FAST).evidence()
    cosmetic = patched(shelf_repo, tmp_path, "is frozen", "is frozen, sorry")
    verdict = evidence.judge(
        patched(shelf_repo, tmp_path, "        self.slots = {}", "        self.slots = {}  # ."), sandbox
    )
    assert (verdict.passed, verdict.failure.split(" (in")[0]) == (
        False,
        "snippet 1 still raises ValueError: slot 'fish' is frozen",
    )
    assert "Shelf.__setitem__" in verdict.failure or "__setitem__" in verdict.failure
    assert evidence.judge(cosmetic, sandbox).passed is False  # the same exception type, another message
    fixed = patched(shelf_repo, tmp_path, ' or key.startswith("f")', "")
    assert evidence.judge(fixed, sandbox).passed is True
    elsewhere = patched(
        shelf_repo,
        tmp_path,
        '            raise ValueError(f"slot {key!r} is frozen")',
        "            raise KeyError(key)",
    )
    assert evidence.judge(elsewhere, sandbox).passed is None  # another exception: it cannot tell


def test_a_stated_expectation_is_checked_on_the_original_and_on_a_patch(
    shelf_repo: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    found = facts.gather(WRONG_VALUE_ISSUE, shelf_repo, sandbox, FAST)
    (run,) = found.runs
    assert (run.reason, run.seen.met, run.shown_reproduced) == ("wrong_value", (False,), True)
    (evidence,) = found.evidence()
    verdict = evidence.judge(Workspace.open(shelf_repo), sandbox)
    assert verdict.passed is False and verdict.failure == "snippet 1: `s.total()` gives 3, expected 2"
    assert evidence.judge(patched(shelf_repo, tmp_path, " + 1\n", "\n"), sandbox).passed is True
    assert "`s.total()` gives 3; the issue expects 2." in facts.observed_text(found)
    test = facts.snippet_test(found)
    assert test is not None and "    assert (s.total()) == (2)" in test


def test_a_snippet_made_test_fails_on_the_original_and_passes_on_the_fix(
    shelf_repo: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    test = facts.snippet_test(facts.gather(RAISING_ISSUE, shelf_repo, sandbox, FAST))
    assert test is not None
    assert_fails_before_and_passes_after_the_fix(test, shelf_repo, sandbox, tmp_path)


def test_a_snippet_that_only_fails_to_import_a_dependency_is_not_a_reproduction(
    shelf_repo: Path, sandbox: Sandbox
) -> None:
    issue = "ModuleNotFoundError here:\n\n```python\nimport not_installed_anywhere\nfrom shelf import Shelf\n```\n"
    (run,) = facts.gather(issue, shelf_repo, sandbox, FAST).runs
    assert run.seen.raised is not None and run.seen.raised.type == "ModuleNotFoundError" and run.reason == ""


ATTACKS = [
    ("hang", "while True:\n    pass"),
    ("print 1 GB", "import sys\nchunk = 'x' * 1_000_000\nfor _ in range(1_000):\n    sys.stdout.write(chunk)"),
    ("fork", FORK_BOMB),
    ("memory", "blocks = []\nwhile True:\n    blocks.append(bytearray(100_000_000))"),
]


@pytest.mark.parametrize(("name", "code"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_a_hostile_snippet_is_stopped_and_the_next_snippet_still_runs(
    name: str, code: str, shelf_repo: Path, sandbox: Sandbox
) -> None:
    issue = f"```python\n{code}\n```\n\n{RAISING_ISSUE}"
    started = time.monotonic()
    runs = facts.gather(issue, shelf_repo, sandbox, FAST).runs
    (hostile,) = [r for r in runs if r.snippet.kind == "script"]
    (session,) = [r for r in runs if r.snippet.kind == "session"]
    assert time.monotonic() - started < 60, name
    assert session.reason == "raised", name  # the run went on
    assert hostile.reason == "", name
    if name == "hang":
        assert hostile.seen.timed_out
    if name == "print 1 GB":
        assert hostile.seen.cut > 900_000_000 and len(hostile.seen.output) < 2 * FAST.output_cap_bytes
    if name == "fork":
        forked = int(hostile.seen.output.split("forked")[-1].split()[0]) if "forked" in hostile.seen.output else 0
        assert forked < 400
    if name == "memory":
        assert hostile.seen.raised is not None and hostile.seen.raised.type == "MemoryError"


def test_a_snippet_cannot_reach_the_network(shelf_repo: Path, sandbox: Sandbox, listener: int) -> None:
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {listener}), timeout=3)"
    (run,) = facts.gather(f"```python\n{code}\n```\n", shelf_repo, sandbox, FAST).runs
    assert run.seen.raised is not None and run.seen.raised.type in ("OSError", "ConnectionRefusedError", "TimeoutError")


def test_a_snippet_cannot_change_the_tree_or_leave_files(shelf_repo: Path, sandbox: Sandbox) -> None:
    code = "import pathlib, shelf\npathlib.Path(shelf.__file__).write_text('broken = True')\n"
    before = (shelf_repo / "shelf" / "__init__.py").read_text()
    (run,) = facts.gather(f"```python\n{code}\n```\n", shelf_repo, sandbox, FAST).runs
    assert run.seen.raised is not None and run.seen.raised.type in ("OSError", "PermissionError")
    assert (shelf_repo / "shelf" / "__init__.py").read_text() == before
    assert not list(sandbox.scratch.glob("snaffle-snippet-*"))


def test_related_tests_that_fail_become_failing_tests_but_errors_do_not(shelf_repo: Path, sandbox: Sandbox) -> None:
    files = {
        "tests/test_total.py": "from shelf import Shelf\n\n\ndef test_total():\n    assert Shelf().total() == 0\n",
        "tests/test_broken.py": "import not_installed_anywhere\n\n\ndef test_never():\n    pass\n",
    }
    for name, text in files.items():
        (shelf_repo / name).write_text(text)
    index = RepoIndex(shelf_repo)
    before = run_tests(Workspace.open(shelf_repo), sandbox, ["tests/test_core.py", *files])
    assert before.errored  # the import failure is there, and is not evidence
    assert facts.existing_failures(before, index, cap=5) == ("tests/test_total.py::test_total",)
    many = replace(before, passed=frozenset())
    most_failing = facts.existing_failures(many, index, cap=5)
    assert most_failing == (), "most of the baseline failing: the environment, not the bug"


def test_a_parametrized_tests_failing_cases_count_once_against_the_cap(shelf_repo: Path, sandbox: Sandbox) -> None:
    cases = ", ".join(str(n) for n in range(8))
    (shelf_repo / "tests" / "test_many.py").write_text(
        "import pytest\nfrom shelf import Shelf\n\n\n"
        f"@pytest.mark.parametrize('n', [{cases}])\ndef test_total(n):\n    assert Shelf().total() == str(n)\n\n\n"
        f"@pytest.mark.parametrize('n', [{cases}] * 3)\ndef test_keys(n):\n    assert Shelf().keys() == []\n"
    )
    index = RepoIndex(shelf_repo)
    before = run_tests(Workspace.open(shelf_repo), sandbox, ["tests/test_core.py", "tests/test_many.py"])
    assert len(before.asserted) == 8 and len(before.passed) > 8
    assert facts.existing_failures(before, index, cap=5) == (), "8 failing cases: over the cap of 5 tests"
    failing = facts.existing_failures(before, index, cap=5, by_function=True)
    assert facts.existing_failures(before, index, cap=8) == failing, "8 cases, under a cap of 8"
    assert failing == tuple(f"tests/test_many.py::test_total[{n}]" for n in range(8)), "one function: under it"


def test_a_session_pasted_without_its_import_is_run_after_the_packages_star_import(
    shelf_repo: Path, sandbox: Sandbox
) -> None:
    issue = (
        'No import shown, as users paste it:\n\n    >>> s = Shelf()\n    >>> s["fish"] = 1\n    ValueError: frozen\n'
    )
    (run,) = facts.gather(issue, shelf_repo, sandbox, FAST).runs
    assert run.snippet.statements[0].source == "from shelf import *"
    assert run.reason == "raised" and run.seen.raised is not None and run.seen.raised.type == "ValueError"
    (shelf_repo / "other").mkdir()
    (shelf_repo / "other" / "__init__.py").write_text("")
    (run,) = facts.gather(issue, shelf_repo, sandbox, FAST).runs  # two packages: which one is a guess, so none
    assert run.seen.raised is not None and run.seen.raised.type == "NameError" and run.reason == ""


BARE_ISSUE = """Shelf refuses my key, no import shown as users paste it:

    >>> s = shelf.Shelf()
    >>> s["fish"] = 1
    Traceback (most recent call last):
      ...
    ValueError: slot 'fish' is frozen
"""


def test_a_session_naming_a_repo_module_it_never_imported_runs_with_the_import(
    shelf_repo: Path, sandbox: Sandbox
) -> None:
    (before,) = facts.gather(BARE_ISSUE, shelf_repo, sandbox, FAST).runs
    assert before.seen.raised is not None and before.seen.raised.line == "NameError: name 'shelf' is not defined"
    assert before.reason == "" and before.imports_added == ()
    found = facts.gather(BARE_ISSUE, shelf_repo, sandbox, INFER)
    (run,) = found.runs
    assert run.imports_added == ("import shelf",) and run.snippet.statements[0].source == "import shelf"
    assert run.reason == "raised" and run.seen.raised is not None
    assert run.seen.raised.repo_frames[-1][2] == "__setitem__"
    assert facts.facts_fields(found)["snippets"][0]["imports_added"] == ["import shelf"]  # type: ignore[index]


TWO_NAMES_ISSUE = """describe() shows nothing for a new shelf

    >>> s = Shelf()
    >>> s["a"] = 1
    >>> describe(s)
    ''

Expected 'a=1'.
"""


def test_names_one_package_binds_are_imported_from_it_one_after_the_other_up_to_the_cap(
    shelf_repo: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    (shelf_repo / "other").mkdir()
    (shelf_repo / "other" / "__init__.py").write_text("def helper():\n    return 1\n")  # two packages: no star
    (run,) = facts.gather(TWO_NAMES_ISSUE, shelf_repo, sandbox, INFER).runs
    assert run.imports_added == ("from shelf import Shelf", "from shelf import describe")
    assert run.seen.raised is None and run.seen.values[-1] == "'a=1'" and run.seen.met == (True,)
    assert run.snippet.expectations[0].statement == 4  # moved down by the two imports
    (capped,) = facts.gather(TWO_NAMES_ISSUE, shelf_repo, sandbox, replace(INFER, max_imports=1)).runs
    assert capped.imports_added == ("from shelf import Shelf",)
    assert capped.seen.raised is not None and capped.seen.raised.line == "NameError: name 'describe' is not defined"


def test_a_name_two_packages_bind_is_left_undefined(shelf_repo: Path, sandbox: Sandbox) -> None:
    (shelf_repo / "other").mkdir()
    (shelf_repo / "other" / "__init__.py").write_text("class Shelf:\n    pass\n")
    (run,) = facts.gather(TWO_NAMES_ISSUE, shelf_repo, sandbox, INFER).runs
    assert run.imports_added == ()
    assert run.seen.raised is not None and run.seen.raised.line == "NameError: name 'Shelf' is not defined"


def test_a_name_only_a_module_the_issue_names_binds_is_imported_from_that_module(
    shelf_repo: Path, sandbox: Sandbox
) -> None:
    core = shelf_repo / "shelf" / "core.py"
    core.write_text(core.read_text() + "\n\ndef first_key(shelf):\n    return shelf.keys()[1]\n")
    session = '    >>> from shelf import Shelf\n    >>> s = Shelf()\n    >>> s["a"] = 1\n    >>> first_key(s)\n'
    unnamed = f"first_key fails with IndexError:\n\n{session}"
    (run,) = facts.gather(unnamed, shelf_repo, sandbox, INFER).runs
    assert run.imports_added == ()  # the package does not export it and the issue names no module
    named = f"`shelf.core.first_key` fails with IndexError:\n\n{session}"
    (run,) = facts.gather(named, shelf_repo, sandbox, INFER).runs
    assert run.imports_added == ("from shelf.core import first_key",)
    assert run.reason == "raised" and run.seen.raised is not None and run.seen.raised.type == "IndexError"


def hostile_name_issue(name: str) -> str:
    """A snippet that stops at `name` undefined: a real NameError for a name, a raised one for anything else."""
    code = f"{name}.run()" if name.isidentifier() else f'raise NameError("name {name!r} is not defined")'
    return f"```python\n{code}\n```\n"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("os", "a standard-library module, though the repository has an os.py"),
        ("pytest", "installed, and the package binds it by `import pytest`"),
        ("../../etc/passwd", "a path"),
        ("outside", "a top-level package that is a symlink out of the repository"),
        ("sneaky", "a name the package takes from outside the repository"),
    ],
)
def test_a_hostile_name_error_never_imports_something_from_outside_the_repository(
    name: str, why: str, shelf_repo: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    (shelf_repo / "os.py").write_text("print('repo os imported')\n")
    init = shelf_repo / "shelf" / "__init__.py"
    init.write_text(init.read_text() + "import pytest\nfrom json import loads as sneaky\n")
    elsewhere = tmp_path / "elsewhere" / "outside"
    elsewhere.mkdir(parents=True)
    (elsewhere / "__init__.py").write_text("print('outside imported')\n")
    (shelf_repo / "outside").symlink_to(elsewhere, target_is_directory=True)
    (run,) = facts.gather(hostile_name_issue(name), shelf_repo, sandbox, INFER).runs
    assert run.imports_added == (), why
    assert run.seen.raised is not None and run.seen.raised.type == "NameError", why
    assert "imported" not in run.seen.output, why


def test_a_repo_module_imported_by_inference_still_runs_only_in_the_sandbox(
    shelf_repo: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    target = tmp_path / "host-file.txt"
    (shelf_repo / "grabby").mkdir()
    (shelf_repo / "grabby" / "__init__.py").write_text(
        "import pathlib\n"
        "def go():\n"
        f"    pathlib.Path({str(target)!r}).write_text('escaped')\n"
        "    pathlib.Path(__file__).write_text('broken = True')\n"
    )
    before = (shelf_repo / "grabby" / "__init__.py").read_text()
    (run,) = facts.gather("```python\ngrabby.go()\n```\n", shelf_repo, sandbox, INFER).runs
    assert run.imports_added == ("import grabby",)
    assert run.seen.raised is not None and run.seen.raised.type in ("OSError", "PermissionError", "FileNotFoundError")
    assert not target.exists() and (shelf_repo / "grabby" / "__init__.py").read_text() == before


def test_a_snippet_made_test_carries_the_added_import_and_the_reproduction_prompt_shows_it(
    shelf_repo: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    found = facts.gather(BARE_ISSUE, shelf_repo, sandbox, INFER)
    test = facts.snippet_test(found)
    assert test is not None and "    import shelf\n    s = shelf.Shelf()" in test
    assert "```python\nimport shelf\ns = shelf.Shelf()" in facts.observed_text(found)
    assert_fails_before_and_passes_after_the_fix(test, shelf_repo, sandbox, tmp_path)


def test_trace_show_says_which_imports_a_snippet_was_given(shelf_repo: Path, sandbox: Sandbox) -> None:
    found = facts.gather(BARE_ISSUE, shelf_repo, sandbox, INFER)
    event = stage_event("issue_facts", facts.decision(found), **facts.facts_fields(found))
    console = Console(file=io.StringIO(), width=300, color_system=None)
    assert show([event], console, ShowOptions()) == 1
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "snippet 1 (session, 3 lines) [added: import shelf]: raised ValueError: slot 'fish' is frozen" in text
    assert "reproduces (raised)" in text


def test_an_indented_code_block_runs_as_a_script_when_switched_on(shelf_repo: Path, sandbox: Sandbox) -> None:
    issue = "Setting fish fails:\n\n    from shelf import Shelf\n    Shelf()['fish'] = 1\n\nValueError, why?\n"
    assert facts.gather(issue, shelf_repo, sandbox, INFER).runs == ()
    (run,) = facts.gather(issue, shelf_repo, sandbox, replace(INFER, indented_scripts=True)).runs
    assert run.snippet.kind == "script" and run.reason == "raised"


def test_a_session_line_echoes_its_value_as_the_repl_would_and_the_shown_output_is_compared(
    shelf_repo: Path, sandbox: Sandbox
) -> None:
    """No stated expectation: the values are still recorded, so 'the user's shown output came back' can be said."""
    issue = (
        WRONG_VALUE_ISSUE.split("I expected")[0].rstrip()
        + "\n"
        + "    >>> s.keys()\n    ['a']\n    >>> s.slots.clear()\n"
    )
    (run,) = facts.gather(issue, shelf_repo, sandbox, FAST).runs
    assert run.seen.values[3:] == ("3", "['a']", None) and run.reason == ""
    assert run.shown_reproduced is True


def assert_fails_before_and_passes_after_the_fix(test: str, shelf_repo: Path, sandbox: Sandbox, tmp_path: Path) -> None:
    """The snippet-made test, run by real pytest in the sandbox: a true oracle of the planted frozen-key bug."""
    path = sandbox.scratch / "repro" / "test_snippet_made.py"
    path.parent.mkdir(parents=True)
    path.write_text(test)
    before = run_tests(Workspace.open(shelf_repo), sandbox, [], [str(path)])
    assert before.ran and before.failed and not before.errored
    after = run_tests(patched(shelf_repo, tmp_path, ' or key.startswith("f")', ""), sandbox, [], [str(path)])
    assert after.passed and not after.failed


def test_a_snippet_shows_the_same_values_run_to_run_so_the_prompt_is_the_same(
    shelf_repo: Path, sandbox: Sandbox
) -> None:
    """String hashing is seeded per process: a set's order (a dict built from it) would differ from run to run, and
    so would every prompt quoting it (no replay, no reuse of the server's KV prefix)."""
    words = ", ".join(repr(f"word{n}") for n in range(20))
    issue = f"order\n\n    >>> list({{{words}}})\n    []\n"
    seen = {facts.gather(issue, shelf_repo, sandbox, FAST).runs[0].seen.values for _ in range(3)}
    assert len(seen) == 1
