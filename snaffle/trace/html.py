"""`snaffle trace html`: one self-contained HTML report (no script, no network: a CSP forbids fetching anything):
an overview table with small inline SVG plots, then per attempt a timeline of turns with folded observations
and the final diff."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from html import escape

from snaffle.trace.analysis import Analysis
from snaffle.trace.calls import describe
from snaffle.trajectory import redact
from snaffle.types import Event

PLOT_W, PLOT_H, PLOT_PAD = 300, 110, 22
BAR_LIMIT = 150
"""Above this many points a plot draws a line instead of bars."""
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5rem auto;max-width:72rem;padding:0 1rem;color:#1b1f24}
table{border-collapse:collapse;font-size:12px;margin:.5rem 0}td,th{border:1px solid #d0d7de;padding:2px 6px;
text-align:right}th{background:#f6f8fa}td:first-child,th:first-child,td:nth-child(2),td:last-child{text-align:left}
.plots{display:flex;gap:1rem;flex-wrap:wrap}.plot{border:1px solid #d0d7de;background:#fff}
ol.timeline{list-style:none;padding:0}li.turn{border-left:3px solid #0969da;margin:.6rem 0;padding:.2rem .7rem}
.meta{color:#57606a;font-size:12px}.call{font-family:monospace;color:#0550ae}.bad{color:#cf222e}
.gate{color:#8250df;font-size:13px}.say{white-space:pre-wrap}pre{background:#f6f8fa;padding:.5rem;overflow:auto;
max-height:32rem;font-size:12px;margin:.2rem 0}summary{cursor:pointer;font-size:13px}.add{color:#116329}
.del{color:#cf222e}.hunk{color:#8250df}.exit{font-weight:bold;border-left-color:#1a7f37}.label{background:#fff8c5;
border:1px solid #d4a72c;border-radius:3px;padding:0 4px;margin-right:4px;font-size:12px}
"""
COLUMNS: tuple[tuple[str, Callable[[Analysis], str]], ...] = (
    ("status", lambda x: escape(x.stats.status)),
    ("resolved", lambda x: {True: "yes", False: "no", None: "—"}[x.stats.resolved]),
    ("calls", lambda x: str(x.stats.calls)),
    ("fixed ctx", lambda x: str(x.stats.fixed_context if x.stats.fixed_context is not None else "—")),
    ("prompt/call", lambda x: f"{x.stats.prompt_per_call:.0f}"),
    ("out tok", lambda x: str(x.stats.output_tokens)),
    ("wall s", lambda x: f"{x.stats.wall_s:.1f}"),
    ("tests", lambda x: str(x.stats.test_runs)),
    ("re-runs", lambda x: str(x.stats.test_reruns_unchanged)),
    ("test edits", lambda x: str(x.stats.test_file_edits)),
    ("rejected", lambda x: str(x.stats.rejected_calls)),
    ("malformed", lambda x: str(x.stats.malformed_turns)),
    ("$", lambda x: f"{x.stats.dollars:.4f}"),
    ("labels", lambda x: " ".join(f'<span class="label">{escape(lab.name)}</span>' for lab in x.labels)),
)


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
    """Prompt tokens per call, seconds per call and cumulative dollars, over every call in order."""
    calls = [e for x in analyses for e in x.run.trajectory.events if e.get("type") == "model_call"]
    tokens = [float((e.get("usage") or {}).get("prompt_tokens") or 0) for e in calls]
    seconds = [float(e.get("latency_s") or 0.0) for e in calls]
    dollars: list[float] = []
    for x in analyses:
        offset = dollars[-1] if dollars else 0.0
        dollars.extend(offset + d for d in cumulative_dollars(x.run.trajectory.events))
    return (
        f'<div class="plots">{svg_plot(tokens, "prompt tokens per call")}'
        f"{svg_plot(seconds, 'seconds per call')}{svg_plot(dollars, 'cumulative dollars', line=True)}</div>"
    )


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


def overview(analyses: Sequence[Analysis]) -> str:
    head = "<th>instance</th>" + "".join(f"<th>{escape(name)}</th>" for name, _ in COLUMNS)
    rows = "".join(
        f'<tr><td><a href="#a{i}">{escape(x.stats.instance_id)}</a></td>'
        + "".join(f"<td>{cell(x)}</td>" for _, cell in COLUMNS)
        + "</tr>"
        for i, x in enumerate(analyses)
    )
    table = f"<table><tr>{head}</tr>{rows}</table>"
    return f'<section id="overview"><h2>Overview</h2>{table}{plots(analyses)}</section>'


def _fold(summary: str, body: str, css: str = "") -> str:
    return f'<details class="{css}"><summary>{escape(summary)}</summary><pre>{escape(body)}</pre></details>'


def _turn_items(events: Sequence[Event]) -> Iterator[str]:
    """One <li> per model call, holding what followed it up to the next call."""
    item: list[str] = []
    for e in events:
        kind = e.get("type")
        if kind in ("model_call", "exit", "stage") and item:
            yield "".join(item) + "</li>"
            item = []
        if kind == "model_call":
            item.append('<li class="turn">' + _model_call(e))
        elif kind in ("exit", "stage"):
            yield (
                _exit(e)
                if kind == "exit"
                else f'<li class="turn"><b>stage</b> {escape(str(e.get("stage")))}: '
                f"{escape(str(e.get('decision', '')))}</li>"
            )
        elif kind != "header":
            item.append(_event(e))
    if item:
        yield "".join(item) + "</li>"


def _model_call(e: Event) -> str:
    usage, response = e.get("usage") or {}, e.get("response") or {}
    meta = (
        f"turn {e.get('turn')} · prompt {usage.get('prompt_tokens', 0)} tok · out "
        f"{usage.get('completion_tokens', 0)} · {(e.get('latency_s') or 0):.2f} s · "
        f"${(usage.get('dollars') or 0):.6f}"
    )
    parts = [f'<div class="meta">{escape(meta)}</div>']
    reasoning = str(response.get("reasoning_content") or "")
    if reasoning:
        parts.append(_fold(f"reasoning ({len(reasoning)} chars)", reasoning, "reasoning"))
    content = str(response.get("content") or "").strip()
    if content:
        parts.append(f'<div class="say">{escape(content)}</div>')
    return "".join(parts)


def _event(e: Event) -> str:
    kind = e.get("type")
    if kind == "tool_call":
        text = describe(str(e.get("name")), e.get("arguments"), 200)
        if not e.get("valid", True):
            return f'<div class="call bad">✗ {escape(text)} — rejected: {escape(str(e.get("error")))}</div>'
        return f'<div class="call">→ {escape(text)}</div>'
    if kind == "tool_result":
        output = str(e.get("output") or "")
        first = output.strip().splitlines()[0][:90] if output.strip() else "(empty)"
        elapsed = e.get("elapsed_s") or 0
        flags = f"{'ok' if e.get('ok') else 'failed'} · {elapsed:.2f} s · {len(output.splitlines())} lines"
        changed = " · changed the repo" if e.get("changed") else ""
        return _fold(f"← {flags}{changed} — {first}", output, "obs")
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


def _exit(e: Event) -> str:
    totals = " · ".join(f"{k} {v}" for k, v in (e.get("totals") or {}).items())
    return (
        f'<li class="turn exit">exit: {escape(str(e.get("status")))} — {escape(str(e.get("message", "")))}'
        f'<div class="meta">{escape(totals)}</div></li>'
    )


def _diff(patch: str) -> str:
    css = {"+": "add", "-": "del", "@": "hunk"}
    lines = (
        f'<span class="{css.get(line[:1], "")}">{escape(line)}</span>' if line[:1] in css else escape(line)
        for line in patch.splitlines()
    )
    body = "\n".join(lines) or "(empty patch)"
    summary = f"final diff ({len(patch.splitlines())} lines)"
    return f'<details class="diff" open><summary>{summary}</summary><pre>{body}</pre></details>'


def attempt_section(x: Analysis, anchor: str, with_plots: bool) -> str:
    s = x.stats
    labels = "".join(
        f'<span class="label" title="{escape(lab.evidence)}">{escape(lab.name)}</span>' for lab in x.labels
    )
    torn = " · <b>torn last line skipped</b>" if s.torn else ""
    head = (
        f'<h2>{escape(s.instance_id)} — {escape(s.status)}</h2><div class="meta">{escape(s.path)} · arm '
        f"{escape(s.arm)} · model {escape(s.model)}{torn}</div><p>{labels}</p>"
    )
    timeline = "".join(_turn_items(x.run.trajectory.events))
    return (
        f'<section class="attempt" id="{anchor}">{head}{plots([x]) if with_plots else ""}'
        f'<ol class="timeline">{timeline}</ol>{_diff(x.run.patch)}</section>'
    )


def report(analyses: Sequence[Analysis], title: str = "snaffle run report", secrets: Sequence[str] = ()) -> str:
    """The whole page, with `secrets` redacted (runs of an older snaffle may hold an unredacted key)."""
    sections = "".join(attempt_section(x, f"a{i}", len(analyses) > 1) for i, x in enumerate(analyses))
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{escape(title)}</h1>{overview(analyses)}{sections}</body></html>\n"
    )
    return redact(page, [*secrets, *(escape(s) for s in secrets)])
