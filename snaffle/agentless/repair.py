"""One repair sample: a short capped loop with five primitives, or one tool-less call (one-shot) for weak models."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from snaffle import prompts
from snaffle.agentless import calls
from snaffle.agentless.config import PipelineConfig
from snaffle.agentless.docstrings import docstring_apart, without_doc_lines
from snaffle.agentless.evidence import Evidence
from snaffle.agentless.feedback import (
    CUT,
    Answer,
    Conversation,
    FollowUp,
    closed_fence,
    rounds_allowed,
    run_rounds,
    scope,
)
from snaffle.agentless.localize import Localization
from snaffle.arms import AGENTLESS, Parts, toolbox
from snaffle.cache import cache_dir
from snaffle.exceptions import Interrupt, Submitted, ToolFailure
from snaffle.gates import stop_after_green
from snaffle.harness import Loop, LoopConfig, Outcome, Pricer
from snaffle.index.parse import Entity
from snaffle.index.repo import RepoIndex
from snaffle.primitives.edit import EntityEditor
from snaffle.primitives.extract import (
    closest,
    defining_blocks,
    edit_format_for,
    is_unified_diff,
    isolate_definition,
    line_diff_blocks,
    reindent,
    search_replace_blocks,
)
from snaffle.primitives.reader import INLINE_BODY_LINES, RepoView
from snaffle.primitives.run_test import PytestRunner
from snaffle.sandbox import Sandbox
from snaffle.tools import Registry
from snaffle.trajectory import gate_event, model_call_event
from snaffle.types import GateResult, Limits, Mechanisms, Message, Model, Task, TrajectorySink, Usage
from snaffle.workspace import Workspace, printable


@dataclass(frozen=True)
class RepairContext:
    """The localized candidates a sample starts from: selectors and their shown text (no whole files)."""

    selectors: tuple[str, ...]
    names: tuple[str, ...]
    text: str
    lines: tuple[int, ...] = ()
    blocks: tuple[str, ...] = ()
    """Each candidate's shown text, in the order of `selectors`."""
    signatures: tuple[str, ...] = ()
    """Each candidate's signature only (decorators and the `def`/`class` header), in the same order."""
    apart: tuple[str, ...] = ()
    """Each candidate's shown text with its docstring above the code (agentless/docstrings.py), in the same order."""

    @classmethod
    def build(cls, index: RepoIndex, located: Localization, top_k: int) -> RepairContext:
        entities = [index.resolve(c.selector) for c in located.entities if c.selector != c.path][:top_k]
        sources = [_lines(index, e) for e in entities]
        blocks = tuple(_shown(e, lines) for e, lines in zip(entities, sources, strict=True))
        names = tuple(e.name for e in entities)
        sizes = tuple(e.end_line - e.start_line + 1 for e in entities)
        signatures = tuple(signature_of(block) for block in blocks)
        apart = tuple(_shown(e, docstring_apart(lines)) for e, lines in zip(entities, sources, strict=True))
        selectors = tuple(e.selector for e in entities)
        return cls(selectors, names, "\n\n".join(blocks), sizes, blocks, signatures, apart)

    @property
    def target_chars(self) -> int:
        """The size of the first candidate's shown text: what a rewrite of it costs to decode."""
        return len(self.blocks[0]) if self.blocks else len(self.text)

    def focused(self, sample: int) -> RepairContext:
        """The context of sample `sample` with one-entity samples: candidate `sample mod k` shown whole and the
        only one it may rewrite, the others as signatures (so samples cover different location hypotheses)."""
        if len(self.selectors) < 2 or len(self.blocks) != len(self.selectors):
            return self
        i = sample % len(self.selectors)
        shown = [self.blocks[i], *(s for j, s in enumerate(self.signatures) if j != i)]
        one = (self.lines[i],) if self.lines else ()
        apart = (self.apart[i],) if self.apart else ()
        text = "\n\n".join(shown)
        return RepairContext((self.selectors[i],), (self.names[i],), text, one, (self.blocks[i],), (), apart)

    def with_calls(self, lines: Mapping[str, Sequence[str]]) -> RepairContext:
        """This context with comment lines under each candidate's `# selector` line (what its calls did when the
        issue's code ran: agentless/calls.py), in its whole text and its signature."""
        if not lines or len(self.blocks) != len(self.selectors):
            return self

        comments = {selector: calls.comment_lines(shown) for selector, shown in lines.items()}

        def noted(block: str, selector: str) -> str:
            head, _, rest = block.partition("\n")
            added = comments.get(selector)
            return "\n".join([head, *added, rest]) if added else block

        blocks = tuple(noted(b, s) for b, s in zip(self.blocks, self.selectors, strict=True))
        apart = tuple(noted(b, s) for b, s in zip(self.apart, self.selectors, strict=False))
        signatures = tuple(signature_of(block) for block in blocks)
        return replace(self, text="\n\n".join(blocks), blocks=blocks, signatures=signatures, apart=apart)

    def docstrings_apart(self) -> RepairContext:
        """This context with each whole candidate's docstring shown above its code, not in it."""
        text = self.text
        for block, apart in zip(self.blocks, self.apart, strict=False):
            text = text.replace(block, apart, 1)
        return replace(self, text=text)


def signature_of(block: str) -> str:
    """A shown block cut after its header: the `# selector` line, decorators, the `def`/`class` line(s) up to `:`."""
    lines = without_doc_lines(block.splitlines())
    heads = [i for i, line in enumerate(lines) if line.lstrip().startswith(HEADER_STARTS)]
    if not heads:
        return lines[0] if lines else block
    end = heads[0]
    while end + 1 < len(lines) and not lines[end].split("#")[0].rstrip().endswith(":"):
        end += 1  # a signature over several lines
    indent = len(lines[heads[0]]) - len(lines[heads[0]].lstrip())
    return "\n".join(lines[: end + 1]) + "\n" + " " * (indent + 4) + "..."


HEADER_STARTS = ("def ", "async def ", "class ")


def _lines(index: RepoIndex, entity: Entity) -> list[str]:
    return index.source(entity.path).decode("utf-8", "replace").splitlines()[entity.start_line : entity.end_line + 1]


def _shown(entity: Entity, lines: list[str]) -> str:
    cut = f"\n    ... ({len(lines) - INLINE_BODY_LINES} more lines)" if len(lines) > INLINE_BODY_LINES else ""
    return f"# {entity.selector}\n" + "\n".join(lines[:INLINE_BODY_LINES]) + cut


class GreenStop:
    """`run_test` that ends the sample once an accepted edit makes the known failing test pass."""

    def __init__(self, runner: PytestRunner, view: RepoView, failing_test: str | None) -> None:
        self.runner, self.view, self.failing_test = runner, view, failing_test

    def run_test(self, target: str) -> str:
        """Run tests with pytest and summarize: counts, then the failing tests' short tracebacks.

        Args:
          target: a pytest node id (tests/test_x.py::test_y), a test file, or "-k expression"
        """
        before = self.runner.last.get(target)
        output = self.runner.run_test(target)
        run = self.runner.last[target]
        passed = run.passed and run is not before  # a remembered result was not produced by the edit
        if stop_after_green(self.view.edits > 0, target, passed, self.failing_test):
            raise Submitted(f"stop-after-green: {target} passes after the edit\n{output}")
        return output


def repair_sample(
    workspace: Workspace,
    sandbox: Sandbox,
    model: Model,
    context: RepairContext,
    limits: Limits,
    sink: TrajectorySink,
    pricer: Pricer,
    config: PipelineConfig,
    task: Task,
    evidence: Sequence[Evidence] = (),
    follow_up: FollowUp | None = None,
) -> Outcome:
    """Run one sample in `workspace` (a clean copy); the caller reads the patch from it. One-shot samples whose
    answer fails `evidence` get feedback rounds (agentless/feedback.py, on `follow_up`'s model, else `model`) when
    the config turns them on."""
    registry = Registry()
    index = RepoIndex(workspace.root, cache_dir=cache_dir("structure"))
    view = RepoView(workspace, index)
    view.shown.update(context.selectors)
    if config.one_shot:
        rounds = rounds_allowed(config, limits, 1)
        grounding = Grounding(sandbox, evidence, rounds, limits, follow_up, scope(config))
        return one_shot(view, model, context, sink, pricer, config, task, grounding)
    parts = Parts(workspace, sandbox, None, config.mechanisms, view)
    runner = PytestRunner(workspace, sandbox, None)
    test_tool = GreenStop(runner, view, task.failing_test) if config.stop_after_green else runner
    toolbox(AGENTLESS, parts, registry, {"run_test": test_tool.run_test})
    policy = AGENTLESS.policy(config.mechanisms)
    loop_config = LoopConfig(AGENTLESS.name, limits, refuse_early_done=AGENTLESS.refuse_early_done, observations=policy)
    loop = Loop(model, registry, sink, loop_config, workspace.fingerprint, pricer)
    return loop.run(repair_messages(context, task, model))


def repair_messages(context: RepairContext, task: Task, model: Model) -> tuple[Message, ...]:
    protocol = model.protocol
    example = {"name": "read_entity", "arguments": {"selector": context.selectors[0]}} if context.selectors else None
    note = f"\nThe failing test is {task.failing_test}." if task.failing_test else ""
    return AGENTLESS.messages(protocol, example, issue=task.issue.strip(), context=context.text, test_note=note)


@dataclass(frozen=True)
class Grounding:
    """What a one-shot sample's feedback rounds judge with: the sandbox, the evidence, the rounds and caps left."""

    sandbox: Sandbox | None = None
    evidence: Sequence[Evidence] = ()
    rounds: int = 0
    limits: Limits = Limits()
    follow_up: FollowUp | None = None
    only: frozenset[str] = frozenset()
    """Rounds only for these cases (feedback.SCOPES: a partial fix, an unapplied answer); empty: every failure."""


def one_shot(
    view: RepoView,
    model: Model,
    context: RepairContext,
    sink: TrajectorySink,
    pricer: Pricer,
    config: PipelineConfig,
    task: Task,
    grounding: Grounding = Grounding(),
) -> Outcome:
    """No tools: one call; the answer's edit is extracted and applied through edit_entity's gates; then, while
    the evidence still fails, up to `grounding.rounds` follow-up calls in the same conversation."""
    started = time.monotonic()
    edit_format = edit_format_for(model.name, context.lines[0] if context.lines else 0, config.edit_format)
    if config.docstrings_apart and edit_format in DOCSTRINGS_APART:
        context = context.docstrings_apart()
    messages: list[Message] = [{"role": "user", "content": one_shot_prompt(context, task, edit_format)}]
    try:
        reply = model.complete(messages, [])
    except Interrupt as stop:
        return Outcome(stop.status, stop.message, Usage(), 0, time.monotonic() - started)
    usage = reply.usage.with_dollars(pricer(model.name, reply.usage))
    sink.write(model_call_event(1, messages, 0, reply, usage, {**usage.as_dict(), "turns": 1}))
    status, message = apply_answer(view, context, closed_fence(reply.content), sink, config.mechanisms, edit_format)
    if reply.finish_reason == CUT:  # said as such: a cut answer is never silently taken for a failed one
        sink.write(gate_event(1, None, Answer.of(reply, (status, message)).gate(None)))
    if grounding.sandbox is None or not grounding.evidence or grounding.rounds < 1:
        return Outcome(status, message, usage, 1, time.monotonic() - started)
    rounds = run_rounds(
        Conversation(tuple(messages), reply, 1, Answer.of(reply, (status, message))),
        grounding.evidence,
        view.workspace,
        grounding.sandbox,
        grounding.follow_up or (lambda _reply: (model, None)),
        lambda answer: apply_answer(view, context, answer, sink, config.mechanisms, edit_format),
        context.names,
        (sink, pricer),
        grounding.rounds,
        grounding.limits,
        grounding.only,
    )
    if rounds is None:
        return Outcome(status, message, usage, 1, time.monotonic() - started)
    return Outcome(rounds.status, rounds.message, usage + rounds.usage, 1 + rounds.calls, time.monotonic() - started)


ONE_SHOT_PROMPTS = {
    "rewrite": "oneshot_rewrite.md",
    "search_replace": "oneshot_search_replace.md",
    "line_diff": "oneshot_line_diff.md",
}
"""The prompt of each one-shot answer form (snaffle/prompts)."""
DOCSTRINGS_APART = ("rewrite", "line_diff")
"""The forms whose context shows docstrings apart when `docstrings_apart` is on (a SEARCH block copies code)."""


def one_shot_prompt(context: RepairContext, task: Task, edit_format: str) -> str:
    if edit_format == "search_replace":
        first = next((line for line in context.text.splitlines()[1:] if not line.lstrip().startswith("#")), "")
        example = f"{context.selectors[0]}\n<<<<<<< SEARCH\n{first}\n=======\n{first}\n>>>>>>> REPLACE"
        return prompts.render(
            prompts.load("oneshot_search_replace.md"), issue=task.issue.strip(), context=context.text, example=example
        )
    return prompts.render(prompts.load(ONE_SHOT_PROMPTS[edit_format]), issue=task.issue.strip(), context=context.text)


def apply_answer(
    view: RepoView,
    context: RepairContext,
    answer: str,
    sink: TrajectorySink,
    mechanisms: Mechanisms,
    edit_format: str = "rewrite",
) -> tuple[str, str]:
    """Apply the answer's SEARCH/REPLACE blocks (or, asked for `line_diff`, its `-`/`+` line changes), else its
    rewritten definition; report each gate decision and each recovery as a gate line."""
    editor = EntityEditor(view, mechanisms)
    blocks, kind = search_replace_blocks(answer), "SEARCH/REPLACE block(s)"
    if not blocks and edit_format == "line_diff":
        blocks, kind = line_diff_blocks(answer), "line change(s)"
    gates: list[GateResult] = []
    try:
        if blocks:
            for block in blocks:
                _apply_block(editor, view, context, block.selector, block.search, block.replace, gates)
            return "submitted", f"applied {len(blocks)} {kind}"
        found = defining_blocks(answer, context.names)
        if not found:
            reason = "a unified diff is not accepted" if is_unified_diff(answer) else "no edit found in the answer"
            return "no_edit", reason
        rewrites = [(rewritten(context, name, code), code) for name, code in found]
        return _apply_rewrites(editor, view, rewrites, gates)
    except ToolFailure as failure:
        return "no_edit", str(failure)
    except Exception as exc:
        # The one-shot path's execution boundary (its Registry.run): edit_entity over a hostile repository may fail
        # in any way; the failure is recorded, the sample's edits so far are undone and the pipeline goes on.
        view.workspace.restore(view.workspace.base_tree)
        reason = printable(f"{type(exc).__name__}: {exc}")
        gates.append(GateResult("apply", False, reason))
        return "no_edit", reason
    finally:
        for gate in gates:
            sink.write(gate_event(1, None, gate))


def rewritten(context: RepairContext, name: str, code: str) -> str:
    """The candidate an answer's definition of `name` replaces: the only one of that name, or of several (a module's
    `parse` and `Version.parse`), the one its definition reads most like."""
    same = [i for i, n in enumerate(context.names) if n == name]
    if len(same) == 1 or len(context.blocks) != len(context.names):
        return context.selectors[same[0]]
    defined = isolate_definition(code, name) or code
    return context.selectors[same[closest(defined, [context.blocks[i] for i in same])]]


def _edit(editor: EntityEditor, gates: list[GateResult], selector: str, **change: str) -> None:
    """One `edit_entity` call; its gate decisions, whether it lands or is refused, are added to `gates`."""
    try:
        gates.extend(editor.edit_entity(selector, **change).gates)
    except ToolFailure as failure:
        gates.extend(failure.gates)
        raise


def _apply_rewrites(
    editor: EntityEditor, view: RepoView, rewrites: list[tuple[str, str]], gates: list[GateResult]
) -> tuple[str, str]:
    """Apply each rewritten candidate definition (answers often repeat several, changing only one); the ones that
    change nothing are skipped, a refused one does not stop the others."""
    changed, refused = [], []
    for selector, code in rewrites:
        path = view.workspace.root / view.entity(selector).path
        before = path.read_bytes()
        try:
            _edit(editor, gates, selector, new_source=code)
        except ToolFailure as failure:
            refused.append(f"{selector}: {failure}")
            continue
        if path.read_bytes() != before:
            changed.append(selector)
    if changed:
        return "submitted", f"applied a rewrite of {', '.join(changed)}"
    if refused:
        return "no_edit", "; ".join(refused)
    return "no_edit", "the answer repeats the definitions unchanged"


def _apply_block(
    editor: EntityEditor,
    view: RepoView,
    context: RepairContext,
    selector: str | None,
    search: str,
    replace: str,
    gates: list[GateResult],
) -> None:
    """Apply one block (SEARCH/REPLACE, or a line change) to the named entity, or to the candidate whose text holds
    the lines it replaces."""
    targets = [selector] if selector in context.selectors else list(context.selectors)
    for target in targets:
        entity = view.index.resolve(target)
        text = "\n".join(view.lines(entity.path)[entity.start_line : entity.end_line + 1])
        fixed = search if search.rstrip("\n") in text else reindent(search, text)
        if fixed is None:
            continue
        if fixed != search:
            gates.append(GateResult("edit_recovery", True, "SEARCH lines re-indented against the file"))
            replace = _reindent_like(replace, search, fixed)
        _edit(editor, gates, target, search=fixed.rstrip("\n"), replace=replace.rstrip("\n"))
        return
    raise ToolFailure("the lines to replace match none of the candidate entities")


def _reindent_like(replace: str, search: str, fixed: str) -> str:
    """Shift the replacement by the indentation the search lines were missing."""
    lost = len(fixed) - len(fixed.lstrip()) - (len(search) - len(search.lstrip()))
    return "\n".join((" " * lost + line) if line.strip() else line for line in replace.splitlines())
