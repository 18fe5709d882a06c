"""What the candidates did when the issue's code ran, zero tokens: each localized function's calls (the arguments,
and the value it returned, the values it yielded or the exception that left it), for the repair prompt.

The snippets that reproduced the issue run once more on the original tree, watching the candidates (a run watches
or measures coverage, not both: agentless/snippet_driver.py). A weak model reads `ordinal(number=11) returned 'st'`
above `ordinal` where the issue only said that `ordinalize(11)` gave '11st': the fact points into the function
whose value is wrong. Only functions and methods are watched; a class or an assignment is shown as it is.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from snaffle import prompts
from snaffle.agentless.facts import Call, ExecutionFacts, SnippetLimits, SnippetRun, Watched, run_snippet
from snaffle.index.parse import Entity
from snaffle.sandbox import Sandbox

CALLABLE_KINDS = ("function", "method")
SHOWN_PER_FUNCTION = 3
"""Calls shown above one candidate, over all the reproducing snippets (the driver records at most 3 per run)."""
TEMPLATE = "call_fact.md"
EXPECTED_TEMPLATE = "call_expected.md"


@dataclass(frozen=True)
class CallFacts:
    """Per candidate selector, one line per recorded call (`Class.meth(x=1) returned 2`), and the seconds it took."""

    lines: Mapping[str, tuple[str, ...]]
    seconds: float

    @property
    def count(self) -> int:
        return sum(len(shown) for shown in self.lines.values())


def watched(entities: Sequence[Entity], root: Path) -> list[Watched]:
    """Each of `entities` as the driver matches it (file, 1-based span, `def` name)."""
    return [Watched(str((root / e.path).resolve()), e.start_line + 1, e.end_line + 1, e.name) for e in entities]


def trace(
    facts: ExecutionFacts,
    entities: Sequence[Entity],
    root: Path,
    sandbox: Sandbox,
    limits: SnippetLimits | None = None,
    expected: bool = False,
) -> CallFacts:
    """Run each reproducing snippet on the tree at `root` watching the functions and methods among `entities`; what
    their calls did (`expected`: the call a line's value came from also says the value the issue expects there,
    when the line missed it)."""
    started = time.monotonic()
    targets = [e for e in entities if e.kind in CALLABLE_KINDS]
    watch = watched(targets, root)
    lines: dict[str, list[str]] = {}
    for run in facts.reproducing if targets else ():
        wanted = missed(run) if expected else {}
        for call in run_snippet(run.snippet, root, sandbox, limits, watch).calls:
            if 0 <= call.function < len(targets):
                entity = targets[call.function]  # the driver numbers the calls by their place in `watch`
                shown = lines.setdefault(entity.selector, [])
                line = described(entity, call, wanted.get(call.statement, "") if call.shown else "")
                if len(shown) < SHOWN_PER_FUNCTION and line not in shown:
                    shown.append(line)
    return CallFacts({s: tuple(v) for s, v in lines.items()}, time.monotonic() - started)


def missed(run: SnippetRun) -> dict[int, str]:
    """The expected value of each statement whose value missed it on the original tree, by statement."""
    met = run.seen.met
    return {e.statement: e.expected for e, ok in zip(run.snippet.expectations, met, strict=False) if ok is False}


def described(entity: Entity, call: Call, expected: str = "") -> str:
    """`Class.method(arg=value) returned value`: the qualified name without its `@N` occurrence mark; with
    `expected`, what the issue expects in its place (prompts/call_expected.md)."""
    line = f"{entity.qualname.split('@')[0]}({call.args}) {call.ended}"
    if not expected:
        return line
    return prompts.render(prompts.load(EXPECTED_TEMPLATE).strip(), call=line, expected=expected)


def comment_lines(shown: Sequence[str]) -> list[str]:
    """The lines put above a candidate's code in the prompt (snaffle/prompts/call_fact.md, one per call)."""
    template = prompts.load(TEMPLATE).strip()
    return [prompts.render(template, call=" ".join(line.split())) for line in shown]
