"""Selection among valid candidates and the exit status it leads to: behaviour-normalized keys, evidence before
votes, the smallest change last; a patch that leaves the reproduced failure failing is never a fix."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from snaffle.agentless.normalize import normalize_source
from snaffle.agentless.validate import CandidatePatch, ending, select
from snaffle.trajectory import read_trajectory
from tests.helpers import Start, make_repo
from tests.test_pipeline import agentless, stages

WORDS = '''"""Word helpers."""
import re


def underscore(word):
    """Make an underscored, lowercase form."""
    word = re.sub(r"([a-z\\d])([A-Z])", r"\\1_\\2", word)
    return word.lower()
'''
WORDS_TEST = (
    'from words import underscore\n\n\ndef test_camel():\n    assert underscore("DeviceType") == "device_type"\n'
)
DASH_ISSUE = 'underscore("content-type") gives "content-type", expected "content_type": dashes are not converted.'
DASH_REPRO = (
    "```python\nfrom words import underscore\n\n\ndef test_dash():\n"
    '    assert underscore("content-type") == "content_type"\n```'
)
FIX_NEW_DOCSTRING = (
    "```python\ndef underscore(word):\n"
    '    """Underscore CamelCase and dashed words."""\n'
    '    word = re.sub(r"([a-z\\d])([A-Z])", r"\\1_\\2", word)\n'
    '    return word.lower().replace("-", "_")\n```'
)
FIX_FROM_IMPORT = (
    "```python\nfrom re import sub\n\n\ndef underscore(word):\n"
    '    word = sub(r"([a-z\\d])([A-Z])", r"\\1_\\2", word)\n'
    '    return word.lower().replace("-", "_")\n```'
)
FIX_OTHER = (
    "```python\ndef underscore(word):\n"
    '    word = re.sub(r"([a-z\\d])([A-Z])", r"\\1_\\2", word)\n'
    '    return word.lower().replace("-", "_").replace(" ", "_")\n```'
)
ONE_SHOT = {"one_shot": True, "top_k": 1}


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("import re\nx = re.sub('a', 'b', s)\n", "from re import sub\nx = sub('a', 'b', s)\n", True),
        ("import re\nx = re.sub('a', 'b', s)\n", "import re\nfrom re import sub\nx = sub('a', 'b', s)\n", True),
        ("from a import f\nf()\n", "from a import f\nfrom a import f\nf()\n", True),  # a duplicate
        ("from a import f\nf()\n", "from a import f\nfrom a import g\nf()\n", True),  # unused, nothing new runs
        ("from a import f\nf()\n", "from a import f\nimport b\nf()\n", False),  # importing b runs it
        ("from a import f\nf()\n", "from b import f\nf()\n", False),  # f names another function
        (
            "import re\nx = re.sub(p, r, s)\n",
            "from re import sub\ndef g(sub):\n    return sub\nx = sub(p, r, s)\n",
            False,
        ),
        ("from a import f\n__all__ = ['f']\n", "from a import f\nfrom a import g\n__all__ = ['f', 'g']\n", False),
        ("import os.path\nos.path.join(p)\n", "import os\nos.path.join(p)\n", False),  # another module runs
    ],
)
def test_the_key_ignores_the_spelling_of_imports_but_not_what_they_name(a: str, b: str, same: bool) -> None:
    assert (normalize_source(a) == normalize_source(b)) is same


def test_what_a_package_init_imports_from_its_package_is_its_interface() -> None:
    plain, added = "from .core import f\n", "from .core import f\nfrom .core import g\n"
    assert normalize_source(plain) == normalize_source(added)
    assert normalize_source(plain, package="pkg") != normalize_source(added, package="pkg")
    absolute = "from pkg.core import f\n", "from pkg.core import f\nfrom pkg.core import g\n"
    assert normalize_source(absolute[0], package="pkg") != normalize_source(absolute[1], package="pkg")
    used = "import re\nx = re.sub(p, r, s)\n", "import re\nfrom re import sub\nx = sub(p, r, s)\n"
    assert normalize_source(used[0], package="pkg") == normalize_source(used[1], package="pkg")


def candidate(sample: int, key: str, lines: int, **found: object) -> CandidatePatch:
    return replace(CandidatePatch(sample, "diff --git a/x b/x\n+y\n", key, lines), **found)  # type: ignore[arg-type]


def test_evidence_ranks_before_votes_and_the_smallest_change_breaks_a_tie() -> None:
    majority = [candidate(0, "k1", 4), candidate(1, "k1", 6)]
    evidenced = candidate(2, "k2", 9, passed=("reproduction",), reproduces=True)
    assert select([*majority, evidenced]) == evidenced  # two samples agreeing do not outvote evidence
    assert select(majority) == majority[0]  # the same behaviour: the fewer changed lines
    fewer_against = candidate(3, "k3", 50, against=("snippet 1",))
    assert select([fewer_against, candidate(4, "k4", 1, against=("snippet 1", "reproduction"))]) == fewer_against
    assert select([candidate(5, "k5", 2), candidate(6, "k6", 2)]).sample == 5  # deterministic to the last key


@pytest.mark.parametrize(
    ("found", "status", "keep"),
    [
        ({}, "submitted", True),
        ({"reproduces": True, "passed": ("reproduction",)}, "validated", True),
        ({"reproduces": False, "against": ("reproduction",)}, "no_valid_patch", False),
        ({"reproduces": False, "against": ("reproduction",), "fixed": 2}, "validated", True),
        ({"fixes_failing": True, "against": ("reproduction",)}, "validated", True),
        # a partial fix: related tests now pass, but the issue's own session still shows the wrong value
        ({"against": ("snippet 1", "reproduction"), "fixed": 12}, "no_valid_patch", False),
        ({"against": ("snippet 1",), "fixed": 1}, "no_valid_patch", False),
        ({"fixes_failing": True, "against": ("snippet 1",)}, "validated", True),
    ],
)
def test_the_exit_status_says_what_the_evidence_says(found: dict[str, object], status: str, keep: bool) -> None:
    end = ending(candidate(0, "k", 2, **found), 3, veto=True)
    assert (end.status, end.keep) == (status, keep)
    assert ending(candidate(0, "k", 2, **found), 3, veto=False).keep  # without the veto the best guess stays
    assert ending(None, 3, veto=False) == ending(None, 3, veto=True) and ending(None, 3, veto=True).status == (
        "no_valid_patch"
    )


def test_cosmetically_different_right_samples_win_the_vote(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "words", {"words.py": WORDS, "tests/test_words.py": WORDS_TEST})
    answers = [DASH_REPRO, FIX_NEW_DOCSTRING, FIX_OTHER, FIX_FROM_IMPORT]
    server = scripted([{"content": a} for a in answers])
    out = tmp_path / "run"
    attempt = agentless(repo, DASH_ISSUE, server.base_url, out, samples=3, early_stop=False, **ONE_SHOT)
    assert attempt.exit_status == "validated", stages(out)
    stage = [e for e in read_trajectory(out / "trajectory.jsonl").of_type("stage") if e["stage"] in ("validate",)]
    assert [s["passed"] for s in stage] == [["reproduction"]] * 3
    assert stage[0]["key"] == stage[2]["key"] != stage[1]["key"]  # a docstring and `from re import sub` aside
    select_stage = [e for e in read_trajectory(out / "trajectory.jsonl").of_type("stage") if e["stage"] == "select"]
    assert sorted(select_stage[0]["votes"].values()) == [1, 2]
    assert select_stage[0]["decision"] == "sample 0"  # the majority's smaller change (sample 2 has fewer lines)
    assert 'replace("-", "_")\n' in attempt.patch and "from re import sub" not in attempt.patch


def test_a_patch_that_only_respells_an_import_is_not_a_fix(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "words", {"words.py": WORDS, "tests/test_words.py": WORDS_TEST})
    respelled = (
        "```python\nfrom re import sub\n\n\ndef underscore(word):\n"
        '    word = sub(r"([a-z\\d])([A-Z])", r"\\1_\\2", word)\n    return word.lower()\n```'
    )
    server = scripted([{"content": respelled}])
    out = tmp_path / "run"
    attempt = agentless(repo, DASH_ISSUE, server.base_url, out, samples=1, reproduce=False, **ONE_SHOT)
    assert attempt.exit_status == "no_valid_patch" and attempt.patch == "", stages(out)
    validate = [e for e in read_trajectory(out / "trajectory.jsonl").of_type("stage") if e["stage"] == "validate"]
    assert validate[0]["semantic"] is False


def test_a_best_guess_failing_the_reproduction_is_kept_but_never_applied(scripted: Start, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "words", {"words.py": WORDS, "tests/test_words.py": WORDS_TEST})
    server = scripted([{"content": DASH_REPRO}, {"content": FIX_FROM_IMPORT.replace('.replace("-", "_")', ".strip()")}])
    out = tmp_path / "run"
    attempt = agentless(repo, DASH_ISSUE, server.base_url, out, samples=1, evidence_veto=False, **ONE_SHOT)
    assert attempt.exit_status == "no_valid_patch", stages(out)
    assert "+    return word.lower().strip()\n" in attempt.patch  # patch.diff holds the best guess...
    result = json.loads((out / "result.json").read_text())
    assert result["applied"] is False and "no_valid_patch" in result["not_applied"]  # ...that --apply refuses
    assert (repo / "words.py").read_text() == WORDS
    assert ("veto", "kept as a best guess") in stages(out)
