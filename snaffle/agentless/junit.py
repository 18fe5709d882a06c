"""pytest's junit XML, read once for everyone who needs per-test outcomes (validation, SBFL)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from snaffle.gates import is_test_file


@dataclass(frozen=True)
class Case:
    """One test case: junit's class name and name, and its outcome."""

    classname: str
    name: str
    outcome: str
    """`passed`, `failed` (an assertion), `error` (collection, fixture) or `skipped`."""

    @property
    def failed(self) -> bool:
        """Failed or errored: it did not pass, and not because it was skipped."""
        return self.outcome in ("failed", "error")

    @property
    def test_file_doctest(self) -> bool:
        """A docstring example of a test module (`--doctest-modules` collects every given file's; a test file's
        docstrings are prose about its tests, not tests): its name is a dotted path under its module's,
        `tests.test_x.Helper` or `test_x.Helper`. A name without a dot is a test's (an unpackaged test module's own
        docstring example, named `test_x` like a test function, is left in)."""
        name, parts = self.name.split("[", 1)[0], self.classname.split(".")
        if "." not in name:
            return False
        heads = (".".join(parts[start:]) for start in range(len(parts)))
        under = any(name == head or name.startswith(head + ".") for head in heads)
        return under and is_test_file("/".join(parts) + ".py")


def read_cases(path: Path) -> list[Case] | None:
    """Every test case in a junit XML file but a test module's docstring examples; None when pytest wrote no file
    (it did not run)."""
    if not path.exists():
        return None
    cases = (_case(case) for case in ET.parse(path).getroot().iter("testcase"))
    return [case for case in cases if not case.test_file_doctest]


def _case(case: ET.Element) -> Case:
    tags = {child.tag for child in case}
    outcome = (
        "error" if "error" in tags else "failed" if "failure" in tags else "skipped" if "skipped" in tags else "passed"
    )
    return Case(str(case.get("classname")), str(case.get("name")), outcome)
