"""How many real fixes are one mutant away? Zero tokens, no checkout: SWE-bench gold patches against the operators.

    python bench/mutation_reach.py [--instances /work/shared/data/swebench_verified_dev.jsonl.gz] [--show 10]

For each instance, the gold patch's changes to non-test Python files are read; a patch whose change is one
contiguous block of removed and added lines in one file (the shape a one-point mutant can have) is checked: the old
block (dedented, wrapped so that a lone `elif`/`except`/`def` line parses) is mutated with snaffle's operators
(agentless/mutants.py, every line), and a mutant whose syntax tree equals the new block's is a hit. A lower bound:
a change inside a multi-line statement whose block does not parse alone is missed. Prints the share per operator and
per repository, and how many of the hits have an issue with a runnable snippet (what screening needs; without a
given failing test that is the evidence a mutant is judged by).
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import re
import textwrap
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from snaffle.agentless.mutants import mutants
from snaffle.agentless.snippets import Reading, extract
from snaffle.gates import is_test_file

DEFAULT_INSTANCES = Path("/work/shared/data/swebench_verified_dev.jsonl.gz")
WRAPPERS = (
    ("", ""),
    ("", "\n    pass"),
    ("if _:\n    pass\n", "\n    pass"),
    ("try:\n    pass\n", "\n    pass"),
    ("def _():\n", ""),
)
"""Text put before and after a dedented block so that a lone clause or a `return` line parses."""


@dataclass(frozen=True)
class Change:
    """One file's contiguous change: the old lines and the new lines."""

    path: str
    old: str
    new: str


def read_rows(path: Path) -> list[dict[str, object]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:  # type: ignore[operator]
        return [json.loads(line) for line in handle if line.strip()]


def changes(patch: str) -> list[Change]:
    """Every contiguous run of removed/added lines in non-test Python files."""
    found: list[Change] = []
    path, old, new = "", [], []
    for line in [*patch.splitlines(), "@@"]:
        if line.startswith("+++ b/"):
            path = line[6:]
            continue
        if line.startswith("---"):
            continue
        if line.startswith("-"):
            old.append(line[1:])
        elif line.startswith("+"):
            new.append(line[1:])
        else:
            if old or new:
                found.append(Change(path, "\n".join(old), "\n".join(new)))
            old, new = [], []
    return [c for c in found if c.path.endswith(".py") and not is_test_file(c.path)]


def wrap(before: str, block: str, after: str) -> str:
    """The dedented block between `before` and `after`, indented under a `before` that opens a suite."""
    body = textwrap.dedent(block)
    return before + (textwrap.indent(body, "    ") if before.endswith(":\n") else body) + after


def wrapped(block: str) -> Iterator[tuple[str, str, str]]:
    """(before, after, text) for each wrapper under which the dedented block parses."""
    for before, after in WRAPPERS:
        text = wrap(before, block, after)
        try:
            ast.parse(text)
        except SyntaxError:
            continue
        yield before, after, text


def dump(text: str) -> str | None:
    try:
        return ast.dump(ast.parse(text))
    except SyntaxError:
        return None


def reach(change: Change) -> str | None:
    """The operator of a mutant of `change.old` whose tree is `change.new`'s, or None. Names the new block uses are
    taken as bound (the file around a block binds its names; a swap is only made to a bound name)."""
    for before, after, text in wrapped(change.old):
        target_text = wrap(before, change.new, after)
        if not change.new.strip():
            target_text = before + "pass" + after if before.endswith(":\n") else before + after
        names = bound_in(target_text)
        target = dump(names + target_text)
        if target is None:
            continue
        source = names + text + "\n"
        lines = source.count("\n") + 1
        for mutant in mutants(source, change.path, [(names.count("\n") + 1, lines)]):
            if dump(mutant.apply(source.encode()).decode()) == target:
                return mutant.operator
    return None


def bound_in(text: str) -> str:
    """A first line naming every identifier of `text` (`a; b`), or '' when it does not parse."""
    try:
        found = sorted({n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)})
    except SyntaxError:
        return ""
    return "; ".join(found) + "\n" if found else ""


def has_snippet(issue: str) -> bool:
    return bool(extract(issue, Reading(ordered=True, indented=True)).snippets)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=Path, default=DEFAULT_INSTANCES)
    parser.add_argument("--show", type=int, default=10, help="print this many hits")
    args = parser.parse_args(argv)
    rows = read_rows(args.instances)
    single, hits, shown = 0, [], 0
    by_repo: Counter[str] = Counter()
    hit_repo: Counter[str] = Counter()
    for row in rows:
        repo = str(row["repo"])
        by_repo[repo] += 1
        found = changes(str(row["patch"]))
        if len(found) != 1:
            continue
        single += 1
        operator = reach(found[0])
        if operator is None:
            continue
        snippet = has_snippet(str(row["problem_statement"]))
        hits.append((row["instance_id"], operator, snippet))
        hit_repo[repo] += 1
        if shown < args.show:
            shown += 1
            old, new = (re.sub(r"\s+", " ", t).strip()[:70] for t in (found[0].old, found[0].new))
            print(f"{row['instance_id']}: {operator}: `{old}` -> `{new}`")
    total = len(rows)
    print(f"\n{total} instances; one contiguous change in one file: {single}; one mutant away: {len(hits)}")
    print(f"share of all: {len(hits) / total:.1%}; of the one-change patches: {len(hits) / max(1, single):.1%}")
    print(f"hits whose issue has a runnable snippet: {sum(1 for h in hits if h[2])} of {len(hits)}")
    print("\n| operator | hits |\n|---|---|")
    for operator, count in Counter(h[1] for h in hits).most_common():
        print(f"| {operator} | {count} |")
    print("\n| repository | instances | hits |\n|---|---|---|")
    for repo, count in by_repo.most_common():
        print(f"| {repo} | {count} | {hit_repo[repo]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
