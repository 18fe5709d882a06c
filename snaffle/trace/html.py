"""`snaffle trace html`: one self-contained HTML report (nothing fetched: a CSP forbids it, and the one inline script,
the filter, runs only by its hash): an overview of the runs with a filter by status and label and plots of what was
measured, then per attempt the issue, the validation verdicts (which tests regressed, which reproduced), and a
timeline of calls — the messages sent folded, answers as highlighted code, tool arguments in full, the final diff."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from html import escape

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from snaffle.trace.analysis import Analysis
from snaffle.trace.calls import describe
from snaffle.trace.runs import run_names
from snaffle.trace.show import call_title, fixed_context_text, stage_text
from snaffle.trajectory import redact
from snaffle.types import Event

PLOT_W, PLOT_H, PLOT_PAD = 300, 110, 22
BAR_LIMIT = 150
"""Above this many points a plot draws a line instead of bars."""
ARGUMENT_LINES_SHOWN = 12
"""Tool arguments longer than this many lines are folded (still whole inside the fold)."""
FENCE_RE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
CODE = HtmlFormatter(nowrap=True, classprefix="hl-")
FILTER_SCRIPT = """
const pick = id => document.getElementById(id);
function keep(node) {
  const status = pick("status").value, label = pick("label").value, text = pick("text").value.toLowerCase();
  const labels = (node.dataset.labels || "").split(" ");
  return (!status || node.dataset.status === status) && (!label || labels.includes(label)) &&
    (!text || node.dataset.text === undefined || node.textContent.toLowerCase().includes(text));
}
function filter() {
  let shown = 0;
  for (const node of document.querySelectorAll("[data-status]")) {
    node.hidden = !keep(node);
    if (node.tagName === "SECTION" && !node.hidden) shown++;
  }
  pick("shown").textContent = shown + " shown";
}
for (const id of ["status", "label", "text"]) pick(id).addEventListener("input", filter);
filter();
"""


def _script_hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()


CSP = f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src '{_script_hash(FILTER_SCRIPT)}'"
"""Only the filter script runs (by its hash): a script a model wrote into its answer is text, and inert."""
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5rem auto;max-width:76rem;padding:0 1rem;color:#1b1f24}
table{border-collapse:collapse;font-size:12px;margin:.5rem 0}td,th{border:1px solid #d0d7de;padding:2px 6px;
text-align:right;vertical-align:top}th{background:#f6f8fa}td.l,th.l{text-align:left}
.plots{display:flex;gap:1rem;flex-wrap:wrap}.plot{border:1px solid #d0d7de;background:#fff}
ol.timeline{list-style:none;padding:0}li.turn{border-left:3px solid #0969da;margin:.6rem 0;padding:.2rem .7rem}
li.stage{border-left:3px solid #bf8700;margin:.4rem 0;padding:.1rem .7rem;font-size:13px}
.meta{color:#57606a;font-size:12px}.call{font-family:monospace;color:#0550ae}.bad{color:#cf222e}
.gate{color:#8250df;font-size:13px}.say{white-space:pre-wrap}pre{background:#f6f8fa;padding:.5rem;overflow:auto;
max-height:32rem;font-size:12px;margin:.2rem 0;white-space:pre-wrap}summary{cursor:pointer;font-size:13px}
.add{color:#116329}.del{color:#cf222e}.hunk{color:#8250df}.exit{font-weight:bold;border-left-color:#1a7f37}
.label{background:#fff8c5;border:1px solid #d4a72c;border-radius:3px;padding:0 4px;margin-right:4px;font-size:12px}
pre.code{background:#f6f8fa;border:1px solid #d0d7de;font-family:ui-monospace,monospace}
details.sample{border:1px solid #d0d7de;border-radius:4px;margin:.5rem 0;padding:.2rem .6rem}
.issue{border-left:3px solid #8c959f}.role{font-weight:bold;font-size:12px;color:#57606a}
.filters{display:flex;gap:.8rem;align-items:center;font-size:13px;margin:.5rem 0}
""" + CODE.get_style_defs(".code")


def svg_plot(values: Sequence[float], title: str, line: bool = False) -> str:
    """A small inline SVG: bars (a line when `line` or when there are many points), the maximum labelled."""
    top = max(values, default=0.0) or 1.0
    inner_w, inner_h = PLOT_W - 2 * PLOT_PAD, PLOT_H - 2 * PLOT_PAD
    step = inner_w / max(len(values), 1)
    y = [PLOT_PAD + inner_h * (1 - v / top) for v in values]
    if line or len(values) > BAR_LIMIT:
        points = " ".join(f"{PLOT_PAD + step * (i + 0.5):.1f},{v:.1f}" for i, v in enumerate(y))
        marks = f'<polyline fill="none" stroke="#0969da" stroke-width="1.5" points="{points}"/>'
    else:
        marks = "".join(
            f'<rect x="{PLOT_PAD + step * i + 0.5:.1f}" y="{yi:.1f}" width="{max(step - 1, 0.5):.1f}" '
            f'height="{PLOT_PAD + inner_h - yi:.1f}" fill="#0969da"><title>{i + 1}: {v:g}</title></rect>'
            for i, (v, yi) in enumerate(zip(values, y, strict=True))
        )
    return (
        f'<svg class="plot" role="img" width="{PLOT_W}" height="{PLOT_H}" viewBox="0 0 {PLOT_W} {PLOT_H}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
        f'<text x="{PLOT_PAD}" y="14" font-size="11">{escape(title)} (max {top:g})</text>'
        f'<line x1="{PLOT_PAD}" y1="{PLOT_PAD + inner_h}" x2="{PLOT_W - PLOT_PAD}" y2="{PLOT_PAD + inner_h}" '
        f'stroke="#8c959f"/>{marks}<text x="{PLOT_PAD}" y="{PLOT_H - 6}" font-size="10">{len(values)} calls</text>'
        "</svg>"
    )


def plots(analyses: Sequence[Analysis]) -> str:
    """Prompt tokens per call, seconds per call and cumulative dollars over every call in order — each only when
    it was measured (a series of zeros, such as the dollars of a free or unpriced model, is no measurement)."""
    calls = [e for x in analyses for e in x.run.trajectory.events if e.get("type") == "model_call"]
    tokens = [float((e.get("usage") or {}).get("prompt_tokens") or 0) for e in calls]
    seconds = [float(e.get("latency_s") or 0.0) for e in calls]
    dollars: list[float] = []
    for x in analyses:
        offset = dollars[-1] if dollars else 0.0
        dollars.extend(offset + d for d in cumulative_dollars(x.run.trajectory.events))
    series = (
        (tokens, "prompt tokens per call", False),
        (seconds, "seconds per call", False),
        (dollars, "cumulative dollars", True),
    )
    drawn = "".join(svg_plot(values, title, line) for values, title, line in series if any(values))
    return f'<div class="plots">{drawn}</div>' if drawn else ""


def cumulative_dollars(events: Sequence[Event]) -> list[float]:
    """Per model call, the dollars spent so far: the shim's figure when the call carries one, else the harness's."""
    values: list[float] = []
    for e in events:
        if e.get("type") != "model_call":
            continue
        shim, cumulative = e.get("shim") or {}, e.get("cumulative") or {}
        value = shim.get("dollars") if isinstance(shim.get("dollars"), int | float) else cumulative.get("dollars")
        values.append(round(float(value or 0.0), 8))
    return values


COLUMNS: tuple[tuple[str, Callable[[Analysis], str]], ...] = (
    ("instance", lambda x: escape(x.stats.instance_id)),
    ("arm", lambda x: escape(x.stats.arm)),
    ("status", lambda x: escape(x.stats.status)),
    ("resolved", lambda x: {True: "yes", False: "no", None: "—"}[x.stats.resolved]),
    ("calls", lambda x: str(x.stats.calls)),
    ("fixed ctx", lambda x: str(x.stats.fixed_context if x.stats.fixed_context is not None else "—")),
    ("prompt/call", lambda x: f"{x.stats.prompt_per_call:.0f}"),
    ("out tok", lambda x: str(x.stats.output_tokens)),
    ("wall s", lambda x: f"{x.stats.wall_s:.1f}"),
    ("tests", lambda x: str(x.stats.test_runs)),
    ("harness tests", lambda x: str(x.stats.harness_test_runs)),
    ("regressed", lambda x: str(len(x.stats.regressions))),
    ("rejected", lambda x: str(x.stats.rejected_calls)),
    ("$", lambda x: f"{x.stats.dollars:.4f}"),
    ("labels", lambda x: " ".join(f'<span class="label">{escape(lab.name)}</span>' for lab in x.labels)),
)
LEFT = frozenset({"run", "instance", "arm", "status", "labels"})


def _filter_attrs(x: Analysis) -> str:
    labels = " ".join(lab.name for lab in x.labels)
    return f'data-status="{escape(x.stats.status)}" data-labels="{escape(labels)}"'


def overview(analyses: Sequence[Analysis], names: Sequence[str]) -> str:
    head = "".join(
        f'<th class="{"l" if n in LEFT else ""}">{escape(n)}</th>' for n in ("run", *(c for c, _ in COLUMNS))
    )
    rows = "".join(
        f'<tr {_filter_attrs(x)}><td class="l"><a href="#a{i}">{escape(name)}</a></td>'
        + "".join(f'<td class="{"l" if n in LEFT else ""}">{cell(x)}</td>' for n, cell in COLUMNS)
        + "</tr>"
        for i, (x, name) in enumerate(zip(analyses, names, strict=True))
    )
    table = f"<table><tr>{head}</tr>{rows}</table>"
    return f'<section id="overview"><h2>Overview</h2>{filters(analyses)}{table}{plots(analyses)}</section>'


def filters(analyses: Sequence[Analysis]) -> str:
    """The status and label pickers and a text search (the filter script reads them)."""
    statuses = sorted({x.stats.status for x in analyses})
    labels = sorted({lab.name for x in analyses for lab in x.labels})

    def options(values: Sequence[str], every: str) -> str:
        return f'<option value="">{every}</option>' + "".join(f"<option>{escape(v)}</option>" for v in values)

    return (
        '<div class="filters"><label>status <select id="status">'
        f'{options(statuses, "any status")}</select></label><label>label <select id="label">'
        f"{options(labels, 'any label')}</select></label>"
        '<label>text <input id="text" type="search" placeholder="in the attempts"></label>'
        f'<span id="shown" class="meta">{len(analyses)} shown</span></div>'
    )


def _fold(summary: str, body: str, css: str = "", is_open: bool = False) -> str:
    state = " open" if is_open else ""
    return f'<details class="{css}"{state}><summary>{escape(summary)}</summary><pre>{escape(body)}</pre></details>'


def code_html(text: str) -> str:
    """A model's answer: prose as text, fenced blocks as highlighted monospace code."""
    parts, at = [], 0
    for match in FENCE_RE.finditer(text):
        prose = text[at : match.start()].strip()
        if prose:
            parts.append(f'<div class="say">{escape(prose)}</div>')
        parts.append(_code_block(match.group(2), match.group(1)))
        at = match.end()
    rest = text[at:].strip()
    if rest:
        parts.append(f'<div class="say">{escape(rest)}</div>')
    return "".join(parts)


def _code_block(code: str, language: str) -> str:
    if language in ("", "python", "py", "python3"):
        return f'<pre class="code">{highlight(code, PythonLexer(), CODE)}</pre>'
    return f'<pre class="code">{escape(code)}</pre>'


def messages_html(e: Event) -> str:
    """The messages appended since the previous call (all of them for a first call), folded."""
    delta = [m for m in e.get("messages_delta") or [] if isinstance(m, dict)]
    if not delta:
        return ""
    body = "".join(
        f'<div class="role">{escape(str(m.get("role", "?")))}</div><pre>{escape(_message_text(m))}</pre>' for m in delta
    )
    total = e.get("n_messages", len(delta))
    summary = f"messages sent: {len(delta)} new of {total} (~{e.get('prompt_estimate', '?')} tokens in all)"
    return f'<details class="sent"><summary>{escape(summary)}</summary>{body}</details>'


def _message_text(message: dict[str, object]) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content, indent=1)
    calls = message.get("tool_calls")
    return text + (f"\n[tool calls] {json.dumps(calls, indent=1)}" if calls else "")


def _model_call(e: Event) -> str:
    usage, response = e.get("usage") or {}, e.get("response") or {}
    meta = (
        f"{call_title(e)} · prompt {usage.get('prompt_tokens', 0)} tok · out "
        f"{usage.get('completion_tokens', 0)} · {(e.get('latency_s') or 0):.2f} s · "
        f"${(usage.get('dollars') or 0):.6f}"
    )
    parts = [f'<div class="meta">{escape(meta)}</div>', messages_html(e)]
    reasoning = str(response.get("reasoning_content") or "")
    if reasoning:
        parts.append(_fold(f"reasoning ({len(reasoning)} chars)", reasoning, "reasoning"))
    content = str(response.get("content") or "").strip()
    if content:
        parts.append(code_html(content))
    return "".join(parts)


def arguments_html(arguments: object) -> str:
    """A call's arguments in full: each value whole (code highlighted when it is a Python snippet)."""
    if not isinstance(arguments, dict):
        return f"<pre>{escape(str(arguments))}</pre>"
    lines = "".join(
        f'<div class="role">{escape(str(k))}</div><pre>{escape(v if isinstance(v, str) else json.dumps(v))}</pre>'
        for k, v in arguments.items()
    )
    size = sum(str(v).count("\n") + 1 for v in arguments.values())
    if size <= ARGUMENT_LINES_SHOWN:
        return lines
    return f"<details><summary>arguments ({size} lines)</summary>{lines}</details>"


def _tool_call(e: Event) -> str:
    text = escape(describe(str(e.get("name")), e.get("arguments"), 200))
    if not e.get("valid", True):
        rejected = escape(str(e.get("error")))
        return f'<div class="call bad">✗ {text} — rejected: {rejected}</div>{arguments_html(e.get("arguments"))}'
    return f'<div class="call">→ {text}</div>{arguments_html(e.get("arguments"))}'


def _tool_result(e: Event) -> str:
    output = str(e.get("output") or "")
    first = output.strip().splitlines()[0][:90] if output.strip() else "(empty)"
    elapsed = e.get("elapsed_s") or 0
    flags = f"{'ok' if e.get('ok') else 'failed'} · {elapsed:.2f} s · {len(output.splitlines())} lines"
    changed = " · changed the repo" if e.get("changed") else ""
    return _fold(f"← {flags}{changed} — {first}", output, "obs")


def _event(e: Event) -> str:
    kind = e.get("type")
    if kind == "tool_call":
        return _tool_call(e)
    if kind == "tool_result":
        return _tool_result(e)
    if kind == "gate":
        verdict = "passed" if e.get("ok") else f"refused: {e.get('reason', '')}"
        return f'<div class="gate">gate {escape(str(e.get("gate")))} {escape(verdict)}</div>'
    if kind == "collapse":
        return f'<div class="meta">collapsed: {escape(str(e.get("label")))}</div>'
    if kind == "compaction":
        sizes = f"compaction: {e.get('before_tokens')} → {e.get('after_tokens')} tokens"
        return _fold(sizes, str(e.get("summary") or ""), "compaction")
    if kind == "retry":
        return f'<div class="meta">retry {e.get("attempt")}: {escape(str(e.get("error")))}</div>'
    return f'<div class="meta">{escape(str(kind))}</div>'


def _items(events: Sequence[Event]) -> Iterator[str]:
    """One <li> per model call holding what followed it up to the next call, one per stage line, the exit."""
    item: list[str] = []
    for e in events:
        kind = e.get("type")
        if kind in ("model_call", "exit", "stage") and item:
            yield "".join(item) + "</li>"
            item = []
        if kind == "model_call":
            item.append('<li class="turn">' + _model_call(e))
        elif kind == "stage":
            yield f'<li class="stage">{escape(stage_text(e).removeprefix("■ "))}</li>'
        elif kind == "exit":
            yield _exit(e)
        elif kind != "header":
            item.append(_event(e))
    if item:
        yield "".join(item) + "</li>"


def timeline(events: Sequence[Event]) -> str:
    """The events in order; an agentless sample's events grouped under one fold where the sample starts."""
    groups: dict[int, list[Event]] = {}
    order: list[Event | int] = []
    for e in events:
        sample = e.get("sample")
        if isinstance(sample, int) and sample >= 0:
            if sample not in groups:
                groups[sample] = []
                order.append(sample)
            groups[sample].append(e)
        else:
            order.append(e)
    parts = [_sample(n, groups[n]) if isinstance(n, int) else "".join(_items([n])) for n in order]
    return f'<ol class="timeline">{"".join(parts)}</ol>'


def _sample(number: int, events: Sequence[Event]) -> str:
    verdicts = [str(e.get("decision")) for e in events if e.get("type") == "stage"]
    calls = sum(1 for e in events if e.get("type") == "model_call")
    summary = f"sample {number}: {calls} call(s) · " + (" → ".join(verdicts) or "no verdict")
    inner = "".join(_items(events))
    body = f'<summary>{escape(summary)}</summary><ol class="timeline">{inner}</ol>'
    return f'<li><details class="sample">{body}</details></li>'


def _exit(e: Event) -> str:
    totals = " · ".join(f"{k} {v}" for k, v in (e.get("totals") or {}).items())
    return (
        f'<li class="turn exit">exit: {escape(str(e.get("status")))} — {escape(str(e.get("message", "")))}'
        f'<div class="meta">{escape(totals)}</div></li>'
    )


def verdicts(events: Sequence[Event]) -> str:
    """The agentless verdicts: the reproduction test, then per sample what was applied, which tests regressed,
    whether the reproduction (and the given failing) test passed with it."""
    stages = [e for e in events if e.get("type") == "stage"]
    repro = next((e for e in stages if e.get("stage") == "reproduce"), None)
    repairs = {e.get("sample"): e for e in stages if e.get("stage") == "repair"}
    checks = [e for e in stages if e.get("stage") == "validate"]
    if repro is None and not checks:
        return ""
    head = ""
    if repro is not None:
        failing = ", ".join(map(str, repro.get("failed") or [])) or "none"
        head = f"<p>reproduction test: <b>{escape(str(repro.get('decision')))}</b> (failing on the original: "
        head += f"{escape(failing)})</p>"
    names = ("sample", "applied", "verdict", "regressed", "reproduces", "fixes failing test", "newly passing")
    rows = "".join(_verdict_row(e, repairs.get(e.get("sample"), {})) for e in checks)
    table = f"<table><tr>{''.join(f'<th class=l>{n}</th>' for n in names)}</tr>{rows}</table>"
    return f'<div class="verdicts"><h3>Validation</h3>{head}{table if checks else ""}</div>'


def _verdict_row(check: Event, repair: Event) -> str:
    regressed = check.get("regressions") or []
    cells = (
        str(check.get("sample")),
        str(repair.get("message") or repair.get("decision") or "—"),
        str(check.get("decision")),
        "<br>".join(escape(str(t)) for t in regressed) or "none",
        {True: "yes", False: "no", None: "—"}.get(check.get("reproduces"), "—"),
        {True: "yes", False: "no", None: "—"}.get(check.get("fixes_failing"), "—"),
        str(check.get("fixed", "—")),
    )
    escaped = [c if i == 3 else escape(c) for i, c in enumerate(cells)]
    return "<tr>" + "".join(f'<td class="l">{c}</td>' for c in escaped) + "</tr>"


def _diff(patch: str) -> str:
    css = {"+": "add", "-": "del", "@": "hunk"}
    lines = (
        f'<span class="{css.get(line[:1], "")}">{escape(line)}</span>' if line[:1] in css else escape(line)
        for line in patch.splitlines()
    )
    body = "\n".join(lines) or "(empty patch)"
    summary = f"final diff ({len(patch.splitlines())} lines)"
    return f'<details class="diff" open><summary>{summary}</summary><pre class="code">{body}</pre></details>'


def attempt_section(x: Analysis, anchor: str, name: str, with_plots: bool) -> str:
    s, header = x.stats, x.run.header
    labels = "".join(
        f'<span class="label" title="{escape(lab.evidence)}">{escape(lab.name)}</span>' for lab in x.labels
    )
    evidence = "".join(f"<li>{escape(lab.name)}: {escape(lab.evidence)}</li>" for lab in x.labels)
    torn = " · <b>torn last line skipped</b>" if s.torn else ""
    head = (
        f'<h2>{escape(name)} — {escape(s.status)}</h2><div class="meta">{escape(s.path)} · instance '
        f"{escape(s.instance_id)} · arm {escape(s.arm)} · model {escape(s.model)} · "
        f"{escape(fixed_context_text(header))}{torn}</div><p>{labels}</p>"
        + (f"<ul>{evidence}</ul>" if evidence else "")
    )
    issue = str((header.get("task") or {}).get("issue") or "")
    return (
        f'<section class="attempt" id="{anchor}" {_filter_attrs(x)} data-text>{head}'
        f"{_fold('issue', issue, 'issue', is_open=True)}{verdicts(x.run.trajectory.events)}"
        f"{plots([x]) if with_plots else ''}{timeline(x.run.trajectory.events)}{_diff(x.run.patch)}</section>"
    )


def report(analyses: Sequence[Analysis], title: str = "snaffle run report", secrets: Sequence[str] = ()) -> str:
    """The whole page, with `secrets` redacted (runs of an older snaffle may hold an unredacted key)."""
    names = run_names([x.run for x in analyses])
    sections = "".join(
        attempt_section(x, f"a{i}", name, len(analyses) > 1)
        for i, (x, name) in enumerate(zip(analyses, names, strict=True))
    )
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{escape(title)}</h1>{overview(analyses, names)}{sections}"
        f"<script>{FILTER_SCRIPT}</script></body></html>\n"
    )
    return redact(page, [*secrets, *(escape(s) for s in secrets)])
