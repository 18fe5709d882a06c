"""Both embedded servers side by side on one repair prompt, in one run so the ratios share the machine's load.

    nice -n 10 python bench/server_bench.py [--size 1.5b] [--samples 3] [--max-tokens 200] [--rounds 1]
    nice -n 10 python bench/server_bench.py --prompt-from RUN/trajectory.jsonl   # a real run's first repair prompt

Variants, each on its own freshly started server over the same GGUF: llama-cpp-python with the samples one after
another (today's agentless arm), the same with prompt-lookup decoding (`--prompt-lookup`), llama-server
`--parallel 1` (one after another) and `--parallel N` (the N requests at once). Each sample is one streamed
chat request at temperature 0.8 (seed = its number) on the one-shot rewrite prompt (snaffle/prompts/
oneshot_rewrite.md, the built-in issue and candidates below unless --prompt-from), which opens with a nonce so no
server starts with it cached. Per variant: wall seconds for the N, tokens/s per sequence (its tokens after the
first over its decode time), aggregate tokens/s (every token over the wall), first-token seconds, prefill tokens/s
(prompt tokens before the first token), the server's peak RSS, the load average before and
after; ratios against llama-cpp-python sequential. Rows go to --out (JSONL).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from snaffle import prompts
from snaffle.model import engines
from snaffle.model import local as local_model
from snaffle.model.engines import LLAMA_CPP_PYTHON, LLAMA_SERVER, EngineChoice

ISSUE = """paginate() drops the last page

I split search results into pages with `paginate(items, per_page)`. When the number of items is not a multiple of
the page size the final, shorter page is missing:

    >>> from shelf.pages import paginate
    >>> paginate([1, 2, 3, 4, 5], 2)
    [[1, 2], [3, 4]]

I expected `[[1, 2], [3, 4], [5]]`. With 6 items it is fine."""
CONTEXT = '''# shelf/pages.py::paginate
def paginate(items, per_page, first_page=1, strict=False):
    """Split `items` into consecutive pages of `per_page` items each.

    The last page may be shorter unless `strict` is true, in which case a short last page raises ValueError.
    `first_page` only affects the numbering used by `page_numbers`; the pages themselves are returned in order.
    """
    if per_page < 1:
        raise ValueError(f"per_page must be at least 1, got {per_page}")
    items = list(items)
    count = len(items) // per_page
    pages = []
    for index in range(count):
        start = index * per_page
        pages.append(items[start : start + per_page])
    if strict and len(items) % per_page:
        raise ValueError(f"{len(items)} items do not fill pages of {per_page}")
    return pages

# shelf/pages.py::page_numbers
def page_numbers(total, per_page, first_page=1, window=None):
    """The page numbers to show for `total` items: every page, or `window` pages around the middle one."""
    if per_page < 1:
        raise ValueError(f"per_page must be at least 1, got {per_page}")
    last = first_page + max(0, (total - 1) // per_page)
    numbers = list(range(first_page, last + 1))
    if window is None or window >= len(numbers):
        return numbers
    middle = len(numbers) // 2
    start = max(0, middle - window // 2)
    return numbers[start : start + window]

# shelf/pages.py::Page.__init__
class Page:
    def __init__(self, number, items, total_pages):
        """One page of results: its number, its items and how many pages there are in all."""
        self.number = number
        self.items = list(items)
        self.total_pages = total_pages
        self.has_next = number < total_pages
        self.has_previous = number > 1

    def __repr__(self):
        return f"Page({self.number} of {self.total_pages}, {len(self.items)} items)"'''
TEMPERATURE = 0.8
BASELINE = "llama-cpp-python sequential"


@dataclass(frozen=True)
class Variant:
    """One server configuration and how its samples are sent."""

    label: str
    engine: EngineChoice
    prompt_lookup: bool
    together: bool
    one_request: bool = False
    """The samples as the `n` choices of one request (llama-server evaluates the prompt once for them)."""


@dataclass(frozen=True)
class Decoded:
    """One streamed sample: when it was sent, got its first token and ended; its tokens and how they were counted."""

    sent: float
    first: float
    ended: float
    tokens: int
    prompt_tokens: int
    counted: str

    @property
    def decode_tps(self) -> float:
        """Tokens after the first over the time after the first."""
        span = self.ended - self.first
        return (self.tokens - 1) / span if self.tokens > 1 and span > 0 else 0.0


def variants(samples: int, binary: str | None = None) -> list[Variant]:
    """In the order they run (the comparison the issue asks for first, so a run cut short still has it)."""
    return [
        Variant(BASELINE, EngineChoice(LLAMA_CPP_PYTHON), False, False),
        Variant(f"llama-server --parallel {samples}", EngineChoice(LLAMA_SERVER, samples, binary), False, True),
        Variant("llama-server --parallel 1", EngineChoice(LLAMA_SERVER, 1, binary), False, False),
        Variant(
            f"llama-server --parallel {samples} n={samples}",
            EngineChoice(LLAMA_SERVER, samples, binary),
            False,
            True,
            True,
        ),
        Variant("llama-cpp-python prompt lookup", EngineChoice(LLAMA_CPP_PYTHON), True, False),
    ]


def repair_prompt(trajectory: Path | None) -> str:
    """The first repair sample's prompt of a run, else the built-in issue and candidates in the one-shot template."""
    if trajectory is None:
        return prompts.render(prompts.load("oneshot_rewrite.md"), issue=ISSUE, context=CONTEXT)
    for line in trajectory.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event.get("type") == "model_call" and "sample" in event and event.get("messages_delta"):
            return str(event["messages_delta"][-1]["content"])
    raise SystemExit(f"--prompt-from {trajectory}: no repair sample's model call in it")


def stream(base_url: str, model: str, prompt: str, max_tokens: int, seed: int, n: int = 1) -> list[Decoded]:
    """One streamed chat request, a Decoded per choice; tokens from the usage chunk when the server sends one for
    a single choice, else one per content chunk."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": TEMPERATURE,
        "seed": seed,
        "stream": True,
        "stream_options": {"include_usage": True},
        **({"n": n} if n > 1 else {}),
    }
    sent, usage = time.monotonic(), None
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    chunks: dict[int, int] = dict.fromkeys(range(n), 0)
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=1800) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: ") :])
            usage = event.get("usage") or usage
            for choice in event.get("choices") or []:
                if choice.get("delta", {}).get("content"):
                    index, now = int(choice.get("index", 0)), time.monotonic()
                    first.setdefault(index, now)
                    last[index] = now
                    chunks[index] = chunks.get(index, 0) + 1
    ended = time.monotonic()
    single = n == 1 and bool(usage and usage.get("completion_tokens"))
    return [
        Decoded(
            sent,
            first.get(i, ended),
            last.get(i, ended) if n > 1 else ended,
            int(usage["completion_tokens"]) if single and usage else count,
            int(usage.get("prompt_tokens", 0)) if usage else 0,
            "usage" if single else "chunks",
        )
        for i, count in sorted(chunks.items())
    ]


def prompt_tokens_of(base_url: str, model: str, prompt: str) -> int:
    """The prompt's token count, asked after the samples (its prefix is cached then, so this costs ~nothing)."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 1, "temperature": 0}
    answer = httpx.post(f"{base_url}/chat/completions", json=body, timeout=1800)
    answer.raise_for_status()
    return int(answer.json()["usage"]["prompt_tokens"])


def prefill_tps(decoded: Sequence[Decoded], prompt_tokens: int, variant: Variant) -> float:
    """Prompt tokens per second before the first token: of the first sample sent (the fresh prompt), or of all
    the prompts evaluated at once when the samples went together (one prompt for one request's choices)."""
    if not variant.together:
        return prompt_tokens / max(1e-9, decoded[0].first - decoded[0].sent)
    prompts = 1 if variant.one_request else len(decoded)
    return prompts * prompt_tokens / max(1e-9, max(d.first - d.sent for d in decoded))


def decode_samples(
    base_url: str, model: str, prompt: str, samples: int, max_tokens: int, variant: Variant
) -> list[Decoded]:
    """The samples one after another, all at once (one thread each), or as the choices of one request."""
    if variant.one_request:
        return stream(base_url, model, prompt, max_tokens, 1, samples)
    if not variant.together:
        return [d for seed in range(1, samples + 1) for d in stream(base_url, model, prompt, max_tokens, seed)]
    results: list[list[Decoded] | BaseException] = [RuntimeError("not run")] * samples

    def run(index: int) -> None:
        try:
            results[index] = stream(base_url, model, prompt, max_tokens, index + 1)
        except BaseException as exc:  # noqa: BLE001 - reported after the join, in the main thread
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(samples)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise failed[0]
    return [d for r in results if not isinstance(r, BaseException) for d in r]


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM) in MB; the mapped model file's pages count."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(variant: Variant, args: argparse.Namespace, prompt: str, log: Callable[[str], None]) -> dict[str, Any]:
    """Start the variant's server, warm it, decode the samples on a fresh prompt; the row."""
    load_before = os.getloadavg()[0]
    with local_model.serve(
        args.size, ctx=args.ctx, log=log, prompt_lookup=variant.prompt_lookup, engine=variant.engine
    ) as server:
        decode_samples(server.base_url, server.model, "Say OK.", 1, 4, variants(1)[0])  # page in the weights
        fresh = f"Run {time.time_ns()}.\n{prompt}"
        started = time.monotonic()
        try:
            decoded = decode_samples(server.base_url, server.model, fresh, args.samples, args.max_tokens, variant)
        except httpx.HTTPError:
            log(f"{variant.label}: the server failed; its log's tail:\n{server.log_tail(40)}")
            raise
        wall = time.monotonic() - started
        prompt_tokens = prompt_tokens_of(server.base_url, server.model, fresh)
        rss = peak_rss_mb(server.process.pid)
    prefill = prefill_tps(decoded, prompt_tokens, variant)
    tokens = sum(d.tokens for d in decoded)
    return {
        "variant": variant.label,
        "engine": variant.engine.name,
        "parallel": variant.engine.parallel,
        "prompt_lookup": variant.prompt_lookup,
        "together": variant.together,
        "samples": args.samples,
        "prompt_tokens": prompt_tokens,
        "wall_s": round(wall, 2),
        "tokens": tokens,
        "tokens_each": [d.tokens for d in decoded],
        "counted": sorted({d.counted for d in decoded}),
        "per_seq_tps": round(statistics.mean(d.decode_tps for d in decoded), 2),
        "aggregate_tps": round(tokens / wall, 2),
        "first_token_s": round(statistics.mean(d.first - d.sent for d in decoded), 2),
        "prefill_tps": round(prefill, 1),
        "rss_mb": round(rss),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "size": args.size,
        "max_tokens": args.max_tokens,
        "t": round(time.time(), 1),
    }


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "-"


def table(rows: Sequence[dict[str, Any]]) -> str:
    """One line per variant (means over rounds), ratios against llama-cpp-python sequential of the same run."""
    labels = list(dict.fromkeys(r["variant"] for r in rows))

    def mean(label: str, key: str) -> float:
        return statistics.mean(float(r[key]) for r in rows if r["variant"] == label)

    base_wall, base_agg = mean(BASELINE, "wall_s"), mean(BASELINE, "aggregate_tps")
    head = (
        f"{'variant':34} {'wall s':>7} {'x wall':>7} {'tok':>5} {'tok/s/seq':>9} {'agg tok/s':>9} {'x agg':>6} "
        f"{'1st tok s':>9} {'prefill/s':>9} {'RSS MB':>7} {'load':>11}"
    )
    lines = [head, "-" * len(head)]
    for label in labels:
        mine = [r for r in rows if r["variant"] == label]
        wall, agg = mean(label, "wall_s"), mean(label, "aggregate_tps")
        load = f"{min(r['load_before'] for r in mine):.1f}-{max(r['load_after'] for r in mine):.1f}"
        lines.append(
            f"{label:34} {wall:7.1f} {ratio(wall, base_wall):>7} {mean(label, 'tokens'):5.0f} "
            f"{mean(label, 'per_seq_tps'):9.2f} {agg:9.2f} {ratio(agg, base_agg):>6} "
            f"{mean(label, 'first_token_s'):9.2f} {mean(label, 'prefill_tps'):9.1f} {mean(label, 'rss_mb'):7.0f} "
            f"{load:>11}"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1.5b", choices=tuple(local_model.SPECS))
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--ctx", type=int, default=4096, help="context per slot (prompt lookup: n_ctx x vocab floats)")
    parser.add_argument("--rounds", type=int, default=1, help="every variant this many times, in turn")
    parser.add_argument("--variants", default="", help="comma-separated substrings of the labels to run")
    parser.add_argument("--prompt-from", type=Path, help="a trajectory whose first repair prompt to use")
    parser.add_argument("--out", type=Path, default=Path("/tmp/server_bench/results.jsonl"))
    parser.add_argument("--server-binary", help="the llama-server to run (default: the snaffle[server] extra's)")
    parser.add_argument("--report-only", action="store_true", help="print the table of the rows in --out")
    return parser.parse_args(argv)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    engines.check_engine(LLAMA_SERVER, args.samples)
    if args.report_only:
        rows = [json.loads(line) for line in args.out.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        rows = run_rounds(args)
    if not rows:
        raise SystemExit(f"no rows in {args.out}")
    first = rows[0]
    print(
        f"{first['size']} model, {first['samples']} samples at temperature {TEMPERATURE}, max_tokens "
        f"{first['max_tokens']}, prompt {first['prompt_tokens']} tokens, {os.cpu_count()} cores; "
        f"load average (1 min) before-after each variant"
    )
    print(table(rows) if any(r["variant"] == BASELINE for r in rows) else json.dumps(rows, indent=1))
    return 0


def run_rounds(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every chosen variant, `--rounds` times in turn; each row appended to --out as it is measured."""
    prompt = repair_prompt(args.prompt_from)
    wanted = [w.strip() for w in args.variants.split(",") if w.strip()]
    chosen = [v for v in variants(args.samples, args.server_binary) if not wanted or any(w in v.label for w in wanted)]
    rows: list[dict[str, Any]] = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for round_number in range(args.rounds):
        for variant in chosen:
            log(f"round {round_number + 1}: {variant.label}")
            row = {**measure(variant, args, prompt, log), "round": round_number + 1}
            rows.append(row)
            with args.out.open("a", encoding="utf-8") as out:
                out.write(json.dumps(row) + "\n")
            log(json.dumps(row))
    return rows


if __name__ == "__main__":
    sys.exit(main())
