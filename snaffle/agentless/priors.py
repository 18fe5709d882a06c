"""A prior against generic files, learned from the repository itself (no issue, no gold): hubness under BM25.

Each file's own prose (the first lines of its docstrings: module, classes, functions) is a query, worded like an
issue; the localizer's own BM25F over whole files (`FileBm25`) ranks every other file for it. A file that
lands in the top `HUB_DEPTH` for many other files' queries matches any text about the repository (a project
generator full of prompts, an application object that touches everything) and is discounted by `[tuning]
generic_prior`. (Measured first with names, signatures and docstrings as the query: the fit left it off.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from snaffle.agentless.documents import FileBm25, idf, query_weights
from snaffle.agentless.issue_text import tokenize

HUB_DEPTH = 5
"""A file counts as a hit for another file's query when it ranks in the top this many."""
HUB_MAX_SHARE = 0.5
"""Terms in more than this share of the files are left out of the queries: their idf is small and their outer
products (queries x files) are most of the cost."""


def hubness(paths: Sequence[str], files: FileBm25, prose: Sequence[str]) -> dict[str, float]:
    """Per file, how often it ranks in the top `HUB_DEPTH` under `files` (the BM25F over `paths`) for the other
    files' `prose` (one text per file), over the most often any file does (1 = the repository's most generic file);
    files never ranked there are left out."""
    count = len(paths)
    if count <= HUB_DEPTH:
        return {}
    scores = _self_scores(files, count, [query_weights(tokenize(text)) for text in prose])
    np.fill_diagonal(scores, 0.0)
    top = np.argpartition(-scores, HUB_DEPTH, axis=1)[:, :HUB_DEPTH]
    rows = np.repeat(np.arange(count), HUB_DEPTH)
    hits = top.ravel()[scores[rows, top.ravel()] > 0]
    counted = np.bincount(hits, minlength=count)
    best = int(counted.max(initial=0))
    return {paths[int(i)]: float(counted[i]) / best for i in np.flatnonzero(counted)} if best else {}


def _self_scores(files: FileBm25, count: int, queries: Sequence[dict[str, float]]) -> npt.NDArray[np.float64]:
    """queries x files: the BM25F score of each file for each query (a sum of per-term outer products: the
    queries holding the term times the files holding it)."""
    by_term: dict[str, tuple[list[int], list[float]]] = {}
    for number, query in enumerate(queries):
        for term, weight in query.items():
            found = by_term.setdefault(term, ([], []))
            found[0].append(number)
            found[1].append(weight)
    scores = np.zeros((count, count))
    for term, holders in files.holders(by_term).items():
        if len(holders) > HUB_MAX_SHARE * count:
            continue
        held = np.asarray(holders)
        frequency = files.frequencies(term, holders)[held]
        matched = idf(len(holders), count) * frequency / (frequency + files.norm[held])
        asking, weights = by_term[term]
        scores[np.ix_(np.asarray(asking), held)] += np.outer(weights, matched)
    return scores


def discount(hub: float, strength: float) -> float:
    """The factor a file's score is scaled by: 1 - strength x hubness (1 when the prior is off)."""
    return 1.0 - strength * hub if strength > 0 else 1.0
