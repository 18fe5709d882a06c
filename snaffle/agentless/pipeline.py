"""The agentless arm: localize (no model) -> repair samples (the only model step) -> validate -> select.

Each sample starts from a clean copy of the starting tree; samples never see each other. Every stage writes a
`stage` line to the trajectory with its decision; sample events carry `sample`.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from snaffle import prompts
from snaffle.agentless import baseline, calls, line_repair, mutation, origin
from snaffle.agentless import facts as snippet_facts
from snaffle.agentless.budget import Budget
from snaffle.agentless.config import PipelineConfig, decode_config
from snaffle.agentless.evidence import TEST_EVIDENCE_NAMES, Evidence, TestEvidence, Verdict, test_evidence
from snaffle.agentless.facts import ExecutionFacts
from snaffle.agentless.feedback import FollowUp, closed_fence, decode_model, follow_up_model, judge_all
from snaffle.agentless.localize import Localization, Localizer
from snaffle.agentless.mutants import Mutant
from snaffle.agentless.mutation import Survivor
from snaffle.agentless.repair import RepairContext, repair_sample
from snaffle.agentless.sampling import SamplingPlan
from snaffle.agentless.sbfl import Spectrum, spectrum
from snaffle.agentless.validate import (
    DOCTEST_ADDOPTS,
    TESTS_TIMEOUT_S,
    CandidatePatch,
    Ending,
    TestOutcomes,
    changed_lines,
    doctest_modules,
    ending,
    evidence_named,
    normalized_key,
    patched_files,
    related_tests,
    run_tests,
    select,
    unguarded,
    with_addopts,
)
from snaffle.cache import cache_dir
from snaffle.exceptions import Interrupt, LimitsExceeded
from snaffle.harness import Outcome, Pricer
from snaffle.index.parse import Entity
from snaffle.index.repo import RepoIndex
from snaffle.model import tokens
from snaffle.model.client import ModelConfig, OpenAIModel
from snaffle.model.engines import sample_workers
from snaffle.primitives.extract import code_blocks
from snaffle.sandbox import Sandbox
from snaffle.trajectory import model_call_event, retry_event, stage_event
from snaffle.types import Event, Limits, Message, ModelReply, Task, TrajectorySink, Usage
from snaffle.workspace import Workspace


class LockedSink:
    """A sink shared by concurrent samples: one writer, one lock, each event tagged with its sample."""

    def __init__(self, sink: TrajectorySink, lock: threading.Lock, sample: int | None = None) -> None:
        self.sink, self.lock, self.sample = sink, lock, sample

    def write(self, event: Event) -> None:
        tagged = event if self.sample is None else {**event, "sample": self.sample}
        with self.lock:
            self.sink.write(tagged)

    def close(self) -> None:
        return None

    def tagged(self, sample: int) -> LockedSink:
        return LockedSink(self.sink, self.lock, sample)


class Pipeline:
    """One agentless run over one workspace."""

    def __init__(
        self,
        task: Task,
        workspace: Workspace,
        sandbox: Sandbox,
        model: ModelConfig,
        limits: Limits,
        sink: TrajectorySink,
        pricer: Pricer,
        config: PipelineConfig,
        scratch: Path,
    ) -> None:
        self.task, self.workspace, self.sandbox, self.model = task, workspace, sandbox, model
        self.limits, self.pricer, self.config, self.scratch = limits, pricer, config, scratch
        self.sink = LockedSink(sink, threading.Lock())
        self.started = time.monotonic()
        self.budget = Budget(limits, self.deadline)  # what the run spent; samples running at once share its caps
        self.workers = 1
        self.related: list[str] = []
        self.before = TestOutcomes(frozenset(), frozenset(), False)
        self.repro: Path | None = None
        self.repro_made = False
        """The kept reproduction test was made from the issue's snippet (not written by the model)."""
        self.test_runs = 0
        self.facts: ExecutionFacts | None = None
        self.existing_failing: tuple[str, ...] = ()
        self.origins: list[str] = []
        """Selectors of the calls that first returned the wrong part of a reproduced wrong value (`value_origin`)."""
        self.spectrum: Spectrum | None = None
        """SBFL's covered run of the failing tests, when there are any."""
        self.evidence: list[Evidence] = []
        self.screenings = 0
        """Screenings of changes so far (each on its own scratch copy)."""
        """What reproduced the issue on the original tree: feedback rounds and validation ask it of patches."""

    @property
    def sbfl(self) -> dict[Entity, float] | None:
        return self.spectrum.scores if self.spectrum is not None else None

    def executed_lines(self) -> dict[str, frozenset[int]] | None:
        """The lines the reproducing evidence ran: the snippets' (their coverage) and the given failing test's
        (SBFL's covered run); None when some evidence's lines are unknown (every line of an entity is then tried)."""
        parts: list[dict[str, frozenset[int]]] = []
        if self.facts is not None and self.facts.reproducing:
            parts.append(self.facts.executed())
        if self.task.failing_test:
            parts.append(self.spectrum.failing_lines if self.spectrum is not None else {})
        return snippet_facts.merged_lines(parts) if parts and all(parts) else None

    @property
    def deadline(self) -> float | None:
        return self.started + self.limits.timeout_s if self.limits.timeout_s else None

    def run(self) -> Outcome:
        try:
            return self._run()
        except Interrupt as stop:
            return self.outcome(stop.status, stop.message)
        except KeyboardInterrupt:
            return self.outcome("interrupted", "interrupted by the user")

    def _run(self) -> Outcome:
        index = RepoIndex(self.workspace.root, cache_dir=cache_dir("structure"))
        failing = self.task.failing_test if self.config.mechanisms.sbfl else None
        self.spectrum = self.covered_run(index, failing) if failing else None
        execution = self.issue_facts(index)
        located, context = self.localize(index, self.sbfl, execution)
        self.baseline(index, located, context)
        if self.existing_failures(index) and self.config.mechanisms.sbfl:
            self.spectrum = self.covered_run(index, self.existing_failing)
            located, context = self.localize(index, self.sbfl, execution)
        mutated, decided = self.mutation(index, located) if self.config.mutation else ([], False)
        if decided:
            return self.finish(mutated)  # the one fix the issue's evidence allows among the mutants: no model call
        corrected, decided = self.line_corrections(index, located) if self.config.line_repair else ([], False)
        if decided:
            return self.finish(corrected)  # the one corrected line the issue's evidence allows: no rewrite sample
        samples = self.repair(self.call_trace(index, context))
        return self.finish(samples + mutation.seconded(mutated, samples) + corrected)

    def mutation(self, index: RepoIndex, located: Localization) -> tuple[list[CandidatePatch], bool]:
        """One-point mutants of the top localized entities, screened against the issue's own evidence on a scratch
        copy (zero tokens); the survivors are validated like samples (numbered after the samples' ceiling), and
        whether they are decisive: every mutant tried, and one validated behaviour with better evidence than every
        other. A search over many mutants fits whatever evidence it is given, so nothing less ends the repair: a
        tie (two behaviours the evidence cannot tell apart), or a repository whose related tests cannot run
        (nothing would catch what a mutant breaks elsewhere), is left to the model's samples."""
        limits = mutation.screening_limits()
        evidence = self.screening_evidence("mutation")
        if not evidence:
            return [], False
        selectors = [c.selector for c in located.entities if c.selector != c.path][: limits.entities]
        entities = [index.resolve(s) for s in selectors]
        planned = mutation.plan(entities, index.source, self.executed_lines())
        first = max(self.config.samples, self.config.max_samples)
        found, stopped = self.screened("mutation", planned, evidence, first)
        if self.config.mutation_compose and not stopped:
            found += self.composed(index, entities, found, first + len(found))
        return found, self.decisive("mutation", found, stopped)

    def composed(
        self, index: RepoIndex, entities: Sequence[Entity], found: Sequence[CandidatePatch], first: int
    ) -> list[CandidatePatch]:
        """Where the best survivor is part of a fix (it fixes some related tests failing on the original and leaves
        others failing), one more point is changed on top of it: the same entities' mutants, on the lines those
        tests ran on the original, screened by all of them. A two-point bug (two swapped `return`s) whose halves the
        issue's evidence sees apart is found this way; the survivors are validated like any other mutant."""
        partial = mutation.partial(found)
        failing = snippet_facts.existing_failures(self.before, index, len(self.before.asserted)) if partial else ()
        if partial is None or not failing:
            return []
        lines = self.covered_run(index, failing).failing_lines
        copy = self.workspace.clone(self.scratch / "mutation-composed")
        copy.apply(partial.patch)
        planned = mutation.plan(entities, lambda path: (copy.root / path).read_bytes(), lines or None)
        self.stage("mutation", f"{partial.label} is part of a fix: a second point screened by {len(failing)} tests")
        more, _ = self.screened("mutation", planned, [TestEvidence("failing_existing", failing)], first, copy)
        return more

    def screening_evidence(self, name: str, existing: bool = False, untested: bool = False) -> list[Evidence]:
        """The issue's own evidence a search over changes may be screened by (a model-written reproduction test can
        be wrong), and with `existing` the related tests failing on the original; none, said in a `name` stage, when
        there is none or no related test passes on the original (nothing would catch what a change breaks
        elsewhere). With `untested`, a repository with no related test file at all is screened by the issue's
        evidence alone (said in the stage); tests that exist but never pass still refuse."""
        evidence = [e for e in self.evidence if e.name != "reproduction" or self.repro_made]
        if existing and self.existing_failing:
            evidence.append(TestEvidence("failing_existing", self.existing_failing))
        alone = untested and not self.related
        if not evidence or not (self.before.passed or alone):
            why = "no related test passes on the original" if evidence else "nothing from the issue could tell a fix"
            self.stage(name, why)
            return []
        if alone:
            self.stage(name, "no related test file: screened by the issue's evidence alone")
        return evidence

    def screened(
        self,
        name: str,
        planned: Sequence[Mutant],
        evidence: Sequence[Evidence],
        first: int,
        copy: Workspace | None = None,
    ) -> tuple[list[CandidatePatch], str]:
        """`planned` screened on a scratch copy (`copy`, or a clean one); the survivors validated (numbered from
        `first`), and why the screening stopped early ('' when it did not)."""
        limits = mutation.screening_limits()
        self.screenings += 1
        copy = copy or self.workspace.clone(self.scratch / f"{name}-{self.screenings}")
        report = mutation.screen(copy, planned, evidence, self.sandbox, limits)
        self.stage(name, report.decision(), **report.fields())
        found, stopped = self.validated_survivors(report.survivors, first)
        if self.config.handler_least_change:
            kept = mutation.least_handler_change(report.survivors[: len(found)], found)
            if aside := [c.origin for c in found if c not in kept]:
                self.stage(name, f"{len(aside)} handler changes set aside: another catches less", aside=aside)
            found = kept
        return found, report.stopped or stopped

    def validated_survivors(self, survivors: Sequence[Survivor], first: int) -> tuple[list[CandidatePatch], str]:
        """Each survivor validated (numbered from `first`) while `survivor_validation_s` lasts; why it stopped
        short ('' when every one was)."""
        started, budget = time.monotonic(), self.config.survivor_validation_s
        found: list[CandidatePatch] = []
        for number, survivor in enumerate(survivors, first):
            if time.monotonic() - started > budget:
                return found, f"validation budget of {budget:g} s spent: {len(found)} of {len(survivors)} validated"
            found.append(self.validate(number, survivor.patch, survivor.mutant.describe()))
        return found, ""

    def decisive(self, name: str, found: Sequence[CandidatePatch], stopped: str) -> bool:
        """Whether the screened survivors end the repair (agentless/mutation.py, `indecision`); why not, in a stage."""
        if found and (why := mutation.indecision(found, stopped)):
            self.stage(name, f"not decisive: {why}; the model's samples decide")
            return False
        return bool(found)

    def line_corrections(self, index: RepoIndex, located: Localization) -> tuple[list[CandidatePatch], bool]:
        """Each statement of the first-ranked functions that the evidence ran is called wrong in turn and the model
        answers with its correction (agentless/line_repair.py); the corrections are screened and validated as
        mutation's are. The calls never take the turns the samples need."""
        evidence = self.screening_evidence("line_repair", existing=True, untested=self.config.line_untested)
        if not evidence:
            return [], False
        targets = self.line_targets(index, located)
        if not targets:
            self.stage("line_repair", f"none of the first {self.config.line_entities} candidates is a function")
            return [], False
        first = max(self.config.samples, self.config.max_samples) + mutation.screening_limits().max_survivors
        found: list[CandidatePatch] = []
        screened_before: set[tuple[int, str]] = set()
        for kind, temperature in self.line_passes():
            asked = targets[: self.lines_allowed()]
            answers = self.line_answers(asked, kind, temperature)
            planned = [m for m in answers if (m.start, m.after) not in screened_before]
            screened_before |= {(m.start, m.after) for m in planned}
            decision = f"{len(planned)} corrections of {len(asked)} lines asked"
            entities = list(dict.fromkeys(t.selector for t in asked))
            self.stage("line_repair", decision, entities=entities, temperature=temperature, question=kind)
            more, stopped = self.screened("line_repair", planned, evidence, first + len(found))
            found += more
            if self.decisive("line_repair", found, stopped):
                return found, True
        return found, False

    def line_targets(self, index: RepoIndex, located: Localization) -> list[line_repair.Target]:
        """The statements to ask about: of each function among the first `line_entities` candidates, in rank
        order (with `line_origin_first`, a located function the wrong value came from first), those the screening
        evidence ran."""
        executed = self.screened_lines()
        ranked = [c.selector for c in located.entities if c.selector != c.path]
        if self.config.line_origin_first:
            ranked = [s for s in self.origins if s in ranked] + [s for s in ranked if s not in self.origins]
        selectors = ranked[: self.config.line_entities]
        targets: list[line_repair.Target] = []
        for entity in (index.resolve(s) for s in selectors):
            if entity.kind not in ("function", "method"):
                continue
            source = index.source(entity.path).decode("utf-8", errors="replace")
            ran = executed.get(entity.path, frozenset()) if executed is not None else None
            code = "\n".join(source.split("\n")[entity.start_line : entity.end_line + 1])
            spans = line_repair.statement_spans(source, entity, ran, self.config.line_nested)
            targets += [line_repair.Target(span, source, code, entity.selector) for span in spans]
        return targets

    def line_passes(self) -> list[tuple[str, float]]:
        """(question, temperature) of each pass over the lines: is it wrong, greedy, then `line_passes` - 1 times
        again at the sample temperature; with `line_insert`, is a line missing after it, greedy."""
        passes = [("replace", 0.0)] + [("replace", self.config.temperature)] * (self.config.line_passes - 1)
        return passes + ([("insert", 0.0)] if self.config.line_insert else [])

    def screened_lines(self) -> dict[str, frozenset[int]] | None:
        """The lines the screening evidence ran: the issue's (`executed_lines`) and the related tests' failing on the
        original (SBFL's covered run of them); None when some evidence's lines are unknown."""
        issue = self.executed_lines() if self.evidence else {}
        if not self.existing_failing:
            return issue
        existing = self.spectrum.failing_lines if self.spectrum is not None else {}
        return snippet_facts.merged_lines([issue, existing]) if issue is not None and existing else None

    def lines_allowed(self) -> int:
        """The lines to ask about: the data's `max_lines`, less what the turn cap must keep for the samples."""
        most = line_repair.line_limits().max_lines
        if not self.limits.max_turns:
            return most
        samples = self.config.max_samples if self.config.extra_samples else self.config.samples
        return max(0, min(most, self.limits.max_turns - self.turns - samples))

    def line_answers(self, targets: Sequence[line_repair.Target], kind: str, temperature: float) -> list[Mutant]:
        """One call per target, in order; each answer as a mutant (distinct ones only). A cap reached ends the calls,
        not the run: the samples have their own turns."""
        limits, found = line_repair.line_limits(), dict[tuple[int, str], Mutant]()
        for number, target in enumerate(targets, 1):
            span = target.span
            bound = limits.max_tokens(span.text)
            config = replace(self.model, temperature=temperature, max_output_tokens=bound, stop=decode_config().stop)
            model = OpenAIModel(config, deadline=self.deadline)
            messages = line_repair.messages(self.task.issue, target.code, span, kind)
            try:
                reply = model.complete(messages, [])
            except Interrupt as stop:
                self.stage("line_repair", f"calls stopped: {stop.message}")
                break
            self.recorded(model, messages, reply, "line_repair", number)
            answer = closed_fence(reply.content)
            changed = line_repair.mutant(target.source, span, answer, kind, self.config.line_header_only)
            if changed is not None:
                found.setdefault((changed.start, changed.after), changed)
        return list(found.values())

    def finish(self, candidates: list[CandidatePatch]) -> Outcome:
        """Select among the candidates; the exit status says what the evidence says of the chosen one."""
        chosen = select(candidates)
        votes = Counter(c.key for c in candidates if c.valid)
        self.stage("select", "no valid patch" if chosen is None else f"sample {chosen.sample}", votes=dict(votes))
        end = ending(chosen, len(candidates), self.config.evidence_veto)
        if chosen is not None and end.status == "validated" and self.config.unguarded_submitted:
            end = self.guarded(end, chosen)
        if chosen is not None and chosen.against and end.status == "no_valid_patch":
            decision = "kept as a best guess" if end.keep else "dropped"
            self.stage("veto", decision, sample=chosen.sample, against=list(chosen.against))
        if chosen is not None and end.keep:
            self.workspace.apply(chosen.patch)  # the run's private copy; only `solve --apply` writes the user's tree
        return self.outcome(end.status, end.message)

    def guarded(self, end: Ending, chosen: CandidatePatch) -> Ending:
        """`end` unless a patched file's own test module could not be collected on the original: then `submitted`,
        the module named (the patch is kept; only the claim is weaker)."""
        modules = unguarded(self.before, self.related, patched_files(chosen.patch))
        if not modules:
            return end
        self.stage("unguarded", f"{len(modules)} test modules of the patched files never ran", modules=modules)
        named = ", ".join(modules)
        why = f"{named} could not be collected on the original, so nothing checked what else it changes"
        return Ending("submitted", f"{chosen.label} selected: the evidence shows the fix, but {why}", True)

    def localize(
        self, index: RepoIndex, sbfl: dict[Entity, float] | None, execution: dict[str, dict[Entity, float]] | None
    ) -> tuple[Localization, RepairContext]:
        located = Localizer(index).localize(
            self.task.issue, sbfl=sbfl, top=max(10, self.config.top_k), execution=execution
        )
        context = RepairContext.build(index, located, self.config.top_k)
        self.stage(
            "localize",
            f"{len(context.selectors)} candidates",
            candidates=list(context.selectors),
            files=[p for p, _ in located.files[:5]],
            elapsed_s=round(located.elapsed_s, 3),
            context_tokens=tokens.count(self.task.issue.strip()) + tokens.count(context.text),
        )
        return located, context

    def covered_run(self, index: RepoIndex, failing: str | Sequence[str]) -> Spectrum:
        """SBFL's covered run of the failing tests, said in an `sbfl` stage (or why it measured nothing)."""
        found = spectrum(index, failing, self.sandbox)
        self.stage("sbfl", found.decision(), tests=[failing] if isinstance(failing, str) else list(failing))
        return found

    def issue_facts(self, index: RepoIndex) -> dict[str, dict[Entity, float]] | None:
        """Run the issue's snippets on the original tree (zero tokens); their execution signals, if switched on."""
        if not self.config.uses("issue_facts"):
            return None
        self.facts = snippet_facts.gather(self.task.issue, self.workspace.root, self.sandbox, self.config.snippets)
        if self.facts.runs:  # an issue without a runnable snippet adds no line
            self.stage("issue_facts", snippet_facts.decision(self.facts), **snippet_facts.facts_fields(self.facts))
        if self.config.uses("snippet_evidence"):
            self.evidence += self.facts.evidence()
        if not self.config.uses("execution_localize"):
            return None
        return {**snippet_facts.signals(self.facts, index), "origin": self.value_origin(index)}

    def value_origin(self, index: RepoIndex) -> dict[Entity, float]:
        """The `origin` signal: where the wrong part of a reproduced wrong value was first returned
        (agentless/origin.py), said in a `value_origin` stage when there is one."""
        if not self.config.uses("value_origin") or self.facts is None:
            return {}
        started = time.monotonic()
        found = origin.origins(self.facts, index, self.workspace.root, self.sandbox, self.config.snippets)
        self.origins = list(dict.fromkeys(o.entity.selector for o in found))
        if found:
            lines = {o.entity.selector: o.line for o in found}
            seconds = round(time.monotonic() - started, 2)
            self.stage("value_origin", f"{len(found)} calls returned the wrong part", calls=lines, seconds=seconds)
        return origin.scores(found)

    def call_trace(self, index: RepoIndex, context: RepairContext) -> RepairContext:
        """The context with what each candidate's calls did when the reproducing snippets ran (agentless/calls.py)."""
        if not self.config.uses("call_trace") or self.facts is None or not self.facts.reproducing:
            return context
        entities = [index.resolve(s) for s in context.selectors]
        expected = self.config.uses("call_expected")
        found = calls.trace(self.facts, entities, self.workspace.root, self.sandbox, self.config.snippets, expected)
        decision = f"{found.count} calls of {len(found.lines)} candidates"
        self.stage("call_trace", decision, calls=dict(found.lines), seconds=found.seconds)
        return context.with_calls(found.lines)

    def existing_failures(self, index: RepoIndex) -> bool:
        """Related tests failing on the original become the failing tests when none was given."""
        if self.task.failing_test is not None or not self.config.uses("failing_existing"):
            return False
        cap, by_function = self.config.max_existing_failures, self.config.failing_by_function
        self.existing_failing = snippet_facts.existing_failures(self.before, index, cap, by_function)
        decision = (
            f"{len(self.existing_failing)} related tests fail on the original" if self.existing_failing else "none"
        )
        self.stage("failing_tests", decision, tests=list(self.existing_failing))
        return bool(self.existing_failing)

    def baseline(self, index: RepoIndex, located: Localization, context: RepairContext) -> None:
        """Tests before any edit: related test files' outcomes, and a reproduction test if none was given."""
        files = [p for p, _ in located.files[:5]]
        self.related = related_tests(index, files)
        wanted = self.config.doctest_always or (self.config.doctest_fallback and not self.related)
        doctests = self.doctests(index, files) if wanted else []
        self.related += doctests
        self.before = self.run_tests(self.workspace, self.related)
        relaxed = self.relaxed_baseline() if self.related and not baseline.works(self.before) else ""
        decision, fields = baseline.verdict(self.before, self.related, self.workspace, self.sandbox)
        fields = {**fields, relaxed: True} if relaxed else fields
        fields = {**fields, "doctests": doctests} if doctests else fields
        self.stage("regression_baseline", decision, files=self.related, **fields)
        if self.task.failing_test is None and self.config.reproduce:
            self.reproduction(context)
        self.evidence += test_evidence(self.task.failing_test, str(self.repro) if self.repro else None)

    def doctests(self, index: RepoIndex, files: Sequence[str]) -> list[str]:
        """The located source files with docstring examples, to run as related tests (`doctest_fallback`,
        `doctest_always`); when there are any, every later pytest run of this run collects doctests."""
        found = doctest_modules(index, files)
        if found:
            self.sandbox = replace(self.sandbox, env=with_addopts(self.sandbox.env, DOCTEST_ADDOPTS))
        return found

    def relaxed_baseline(self) -> str:
        """When no related test runs, once more in each of `baseline.RELAXATIONS` (the repository's `addopts` left
        out, then its conftest.py files too); the first in which tests run holds for every later pytest run of this
        run (PYTEST_ADDOPTS, in the sandbox's env). Its name, or '' when none made tests run."""
        for name, options in baseline.RELAXATIONS:
            relaxed = replace(self.sandbox, env=with_addopts(self.sandbox.env, options))
            again = self.run_tests(self.workspace, self.related, sandbox=relaxed)
            if baseline.works(again):
                self.sandbox, self.before = relaxed, again
                return name
        return ""

    def reproduction(self, context: RepairContext) -> None:
        """A test reproducing the issue (from a reproducing snippet, zero tokens, or asked of the model once); kept
        only if it fails (not errors) on the original."""
        made = snippet_facts.snippet_test(self.facts) if self.facts and self.config.uses("snippet_test") else None
        source, usage = (made, Usage()) if made is not None else self.reproduction_reply(context)
        path = self.sandbox.scratch / "repro" / "test_snaffle_repro.py"  # visible inside the sandbox
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
        outcome = self.run_tests(self.workspace, [], [str(path)])
        kept = outcome.ran and bool(outcome.failed) and not outcome.errored
        self.repro = path if kept else None
        self.repro_made = kept and made is not None
        self.stage(
            "reproduce",
            "kept" if kept else "discarded",
            failed=sorted(outcome.failed),
            errored=sorted(outcome.errored),
            usage=usage.as_dict(),
            source="issue snippet" if made is not None else "model",
        )

    def reproduction_reply(self, context: RepairContext) -> tuple[str, Usage]:
        """Ask the model once for a reproduction test (told what the issue's snippets did, if switched on)."""
        observed = snippet_facts.observed_text(self.facts) if self.facts and self.config.uses("reproduce_facts") else ""
        observed = f"\nWhat the issue's code does now:\n\n{observed}\n" if observed else ""
        template = prompts.load("reproduce.md")
        prompt = prompts.render(template, issue=self.task.issue.strip(), context=context.text, observed=observed)
        model = OpenAIModel(self.model, deadline=self.deadline, on_retry=self.retry_logger(-1))
        messages: list[Message] = [{"role": "user", "content": prompt}]
        reply = model.complete(messages, [])
        self.recorded(model, messages, reply, "reproduce")
        return code_blocks(reply.content)[0], reply.usage

    def recorded(
        self, model: OpenAIModel, messages: list[Message], reply: ModelReply, stage: str, turn: int = 1
    ) -> None:
        """A call made outside the samples, counted against the run's caps and written as a `model_call` with its
        `stage`."""
        usage = reply.usage.with_dollars(self.pricer(model.name, reply.usage))
        self.account(Outcome(stage, "", usage, 1, 0))
        cumulative = {**self.usage.as_dict(), "turns": self.turns}
        self.sink.write(model_call_event(turn, messages, 0, reply, usage, cumulative, stage=stage))

    def repair(self, context: RepairContext) -> list[CandidatePatch]:
        """Draw the samples and validate them: all of them, then validation (the fixed plan), or batch by batch
        until the plan says enough (agentless/sampling.py)."""
        self.workers = sample_workers(self.config.concurrency, self.config.samples, self.model.base_url)
        plan = self.sampling_plan()
        if not plan.adaptive:
            return self.draw(context, range(self.config.samples))
        candidates: list[CandidatePatch] = []
        can_validate, capped = self.can_validate(), ""
        while (numbers := plan.next_batch(candidates, can_validate)) is not None:
            try:
                candidates += self.draw(context, numbers)
            except LimitsExceeded as stop:
                if len(candidates) < self.config.samples and not out_of_time_with_a_valid(stop, candidates):
                    raise  # a cap reached among the base samples ends the run, as without the plan
                capped = stop.message
                break
        self.stage("sampling", plan.decision(candidates, can_validate, capped), drawn=len(candidates))
        return candidates

    def sampling_plan(self) -> SamplingPlan:
        config = self.config
        return SamplingPlan(config.samples, config.max_samples, self.workers, config.early_stop, config.extra_samples)

    def can_validate(self) -> bool:
        """Something could show a sample's fix: the evidence that reproduced the issue, or related tests that fail
        on the original."""
        return bool(self.evidence) or bool(self.before.asserted)

    def draw(self, context: RepairContext, numbers: range) -> list[CandidatePatch]:
        """Samples `numbers`, `self.workers` at once, then each validated."""
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            patches = list(pool.map(lambda i: self.sample(context, i), numbers))
        candidates: list[CandidatePatch] = []
        for i, patch in zip(numbers, patches, strict=True):
            try:
                candidates.append(self.validate(i, patch))
            except LimitsExceeded as stop:
                if not out_of_time_with_a_valid(stop, candidates):
                    raise
                self.stage("validate", "not validated", sample=i, message=stop.message)
                break  # the wall clock ran out while validating: a valid patch already found is kept
        return candidates

    def sample(self, context: RepairContext, number: int) -> str:
        """One repair attempt on a clean copy, within its share of the caps; returns its patch ('' for none)."""
        limits = self.budget.share(self.workers, self.config.repair_turns)
        try:
            return self.sample_within(context, number, limits)
        finally:
            self.budget.release(limits)

    def sample_within(self, context: RepairContext, number: int, limits: Limits) -> str:
        clone = self.workspace.clone(self.scratch / f"sample-{number}")
        temperature = 0.0 if number == 0 else self.config.temperature
        context = context.focused(number) if self.config.targets_one(number) else context
        tempered = replace(self.model, temperature=temperature)
        decoded = decode_model(tempered, self.config, decode_config(), context.target_chars)
        model = OpenAIModel(decoded, deadline=self.deadline, on_retry=self.retry_logger(number))
        follow_up = self.follow_ups(tempered, context.target_chars, number)
        try:
            outcome = repair_sample(
                clone,
                self.sandbox,
                model,
                context,
                limits,
                self.sink.tagged(number),
                self.pricer,
                self.config,
                self.task,
                self.evidence,
                follow_up,
            )
        except Exception:  # samples are a batch: one sample's crash is recorded, the others go on
            self.stage("repair", "crashed", sample=number, traceback=traceback.format_exc(limit=8))
            return ""
        self.account(outcome)
        patch = clone.patch()
        self.stage("repair", outcome.status, sample=number, patch_lines=changed_lines(patch), message=outcome.message)
        return patch

    def follow_ups(self, model: ModelConfig, target_chars: int, number: int) -> FollowUp:
        """A sample's follow-up calls, each bounded from the target's size or the answer it follows."""

        def make(previous: ModelReply) -> tuple[OpenAIModel, int | None]:
            config = follow_up_model(model, self.config, decode_config(), target_chars, previous)
            bounded = OpenAIModel(config, deadline=self.deadline, on_retry=self.retry_logger(number))
            return bounded, config.max_output_tokens

        return make

    def validate(self, number: int, patch: str, mutant: str = "") -> CandidatePatch:
        """Apply to a clean copy; related tests that passed before must pass, the given failing test must pass;
        the evidence that reproduced the issue (the reproduction test, snippets) and tests that newly pass rank the
        survivors. `mutant` describes a mutant's patch (agentless/mutation.py); '' for a sample's."""
        clone = self.workspace.clone(self.scratch / f"validate-{number}")
        unpatched = normalized_key(clone, patch)
        clone.apply(patch)
        key = normalized_key(clone, patch)
        semantic = key != unpatched
        worth_testing = bool(patch.strip()) and semantic  # an empty or comment-only patch is invalid anyway
        after = self.run_tests(clone, self.related if worth_testing else [])
        regressions = sorted(self.before.passed - after.passed) if worth_testing else []
        fixes_failing = self.passes(clone, [self.task.failing_test], patch) if self.task.failing_test else None
        if fixes_failing is None and self.existing_failing and worth_testing:
            fixes_failing = self.fixes_existing(after)
        reproduction, judged = self.judged(clone, patch, worth_testing)
        verdicts = [(v.evidence, v.passed) for v in judged]
        reproduces = snippet_facts.combined(reproduction, judged)
        found = (fixes_failing, reproduction, verdicts) if worth_testing else (None, None, [])
        candidate = CandidatePatch(
            number,
            patch,
            key,
            changed_lines(patch),
            tuple(regressions[:20]),
            fixes_failing,
            reproduces,
            len(self.before.failed & after.passed),
            semantic,
            evidence_named(*found, passed=False),
            evidence_named(*found, passed=True),
            len(self.before.asserted - after.passed) if worth_testing else 0,
            f"mutant {mutant}" if mutant else "",
        )
        self.validate_stage(candidate, judged, mutant, after.stopped)
        return candidate

    def judged(self, clone: Workspace, patch: str, worth_testing: bool) -> tuple[bool | None, tuple[Verdict, ...]]:
        """The kept reproduction test's result, and each other evidence's verdict (snippets) on the patched copy."""
        reproduces = self.passes(clone, [str(self.repro)], patch) if self.repro is not None else None
        others = [e for e in self.evidence if e.name not in TEST_EVIDENCE_NAMES] if worth_testing else []
        return reproduces, judge_all(others, clone, self.sandbox)

    def validate_stage(
        self, candidate: CandidatePatch, judged: Sequence[Verdict], mutant: str = "", stopped: str = ""
    ) -> None:
        self.stage(
            "validate",
            "valid" if candidate.valid else "invalid",
            sample=candidate.sample,
            **({"mutant": mutant} if mutant else {}),
            key=candidate.key,
            regressions=list(candidate.regressions),
            fixes_failing=candidate.fixes_failing,
            reproduces=candidate.reproduces,
            fixed=candidate.fixed,
            unfixed=candidate.unfixed,
            semantic=candidate.semantic,
            snippets=[{"evidence": v.evidence, "passed": v.passed, "failure": v.failure} for v in judged],
            against=list(candidate.against),
            passed=list(candidate.passed),
            **({"stopped": stopped} if stopped else {}),
        )

    def fixes_existing(self, after: TestOutcomes) -> bool:
        """Every related test that failed on the original passes with the patch."""
        names = self.before.asserted
        return bool(names) and names <= after.passed

    def passes(self, clone: Workspace, targets: list[str], patch: str) -> bool | None:
        if not patch.strip():
            return None
        outcome = self.run_tests(clone, targets)
        return outcome.ran and not outcome.failed and bool(outcome.passed)

    def account(self, outcome: Outcome) -> None:
        self.budget.spend(outcome.usage, outcome.turns)

    @property
    def usage(self) -> Usage:
        return self.budget.usage

    @property
    def turns(self) -> int:
        return self.budget.turns

    def retry_logger(self, number: int) -> Callable[[int, str, float], None]:
        def log(attempt: int, error: str, wait_s: float) -> None:
            self.sink.write(retry_event(attempt, error, wait_s, sample=number))

        return log

    def run_tests(
        self, workspace: Workspace, targets: list[str], extra: list[str] | None = None, sandbox: Sandbox | None = None
    ) -> TestOutcomes:
        """Every test run the harness makes goes through here, so the next stage line can say how many it made."""
        self.test_runs += bool(targets or extra)
        return run_tests(workspace, sandbox or self.sandbox, targets, extra or [], self.test_timeout())

    def test_timeout(self) -> float:
        """A test run's seconds: its own cap, or what is left of the run's wall clock (none left ends the run)."""
        if self.deadline is None:
            return TESTS_TIMEOUT_S
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise LimitsExceeded("timeout", f"wall-clock cap reached ({self.limits.timeout_s:g} s)")
        return min(TESTS_TIMEOUT_S, left)

    def stage(self, name: str, decision: str, **fields: object) -> None:
        runs, self.test_runs = self.test_runs, 0
        self.sink.write(stage_event(name, decision, **fields, **({"test_runs": runs} if runs else {})))

    def outcome(self, status: str, message: str) -> Outcome:
        return Outcome(status, message, self.usage, self.turns, time.monotonic() - self.started)


def out_of_time_with_a_valid(stop: LimitsExceeded, candidates: Sequence[CandidatePatch]) -> bool:
    """The wall clock ran out after a valid patch was found: the run ends with it rather than with nothing."""
    return stop.status == "timeout" and any(c.valid for c in candidates)
