"""pytest's junit XML, read once for everyone who needs per-test outcomes (validation, SBFL)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


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


def read_cases(path: Path) -> list[Case] | None:
    """Every test case in a junit XML file; None when pytest wrote no file (it did not run)."""
    if not path.exists():
        return None
    return [_case(case) for case in ET.parse(path).getroot().iter("testcase")]


def _case(case: ET.Element) -> Case:
    tags = {child.tag for child in case}
    outcome = (
        "error" if "error" in tags else "failed" if "failure" in tags else "skipped" if "skipped" in tags else "passed"
    )
    return Case(str(case.get("classname")), str(case.get("name")), outcome)
