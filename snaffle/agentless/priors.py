"""A prior against generic files, learned from the repository itself (no issue, no gold): hubness under BM25.

Each file's own prose (the first lines of its docstrings: module, classes, functions) is a query, worded like an
issue; BM25F over whole files (the localizer's `FileBm25` arithmetic) ranks every other file for it. A file that
lands in the top `HUB_DEPTH` for many other files' queries matches any text about the repository (a project
generator full of prompts, an application object that touches everything) and is discounted by `[tuning]
generic_prior`. (Measured first with names, signatures and docstrings as the query: the fit left it off.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from snaffle.agentless.documents import Bm25Params, FileDocuments, idf, query_weights
from snaffle.agentless.issue_text import tokenize

HUB_DEPTH = 5
"""A file counts as a hit for another file's query when it ranks in the top this many."""
HUB_MAX_SHARE = 0.5
"""Terms in more than this share of the files are left out of the queries: their idf is small and their outer
products (queries x files) are most of the cost."""


def hubness(
    paths: Sequence[str], documents: Sequence[FileDocuments], params: Bm25Params, prose: Sequence[str]
) -> dict[str, float]:
    """Per file, how often it ranks in the top `HUB_DEPTH` for the other files' `prose` (one text per file),
    over the most often any file does (1 = the repository's most generic file); files never ranked there are
    left out."""
    count = len(paths)
    if count <= HUB_DEPTH:
        return {}
    scores = _self_scores(paths, documents, params, [query_weights(tokenize(text)) for text in prose])
    np.fill_diagonal(scores, 0.0)
    top = np.argpartition(-scores, HUB_DEPTH, axis=1)[:, :HUB_DEPTH]
    rows = np.repeat(np.arange(count), HUB_DEPTH)
    hits = top.ravel()[scores[rows, top.ravel()] > 0]
    counted = np.bincount(hits, minlength=count)
    best = int(counted.max(initial=0))
    return {paths[int(i)]: float(counted[i]) / best for i in np.flatnonzero(counted)} if best else {}


def _self_scores(
    paths: Sequence[str], documents: Sequence[FileDocuments], params: Bm25Params, queries: Sequence[dict[str, float]]
) -> npt.NDArray[np.float64]:
    """queries x files: the BM25F score of each file for each query (a sum of per-term outer products: the
    queries holding the term times the files holding it)."""
    path_terms = [Counter(tokenize(p)) for p in paths]
    postings = _fielded(documents, path_terms, params, {t for q in queries for t in q})
    lengths = np.array(
        [
            params.body * d.length + params.head * sum(d.head_lengths) + params.path * sum(t.values())
            for d, t in zip(documents, path_terms, strict=True)
        ]
    )
    norm = params.k1 * (1 - params.b + params.b * lengths / max(float(lengths.mean()), 1e-9))
    by_term: dict[str, tuple[list[int], list[float]]] = {}
    for number, query in enumerate(queries):
        for term, weight in query.items():
            found = by_term.setdefault(term, ([], []))
            found[0].append(number)
            found[1].append(weight)
    scores = np.zeros((len(paths), len(paths)))
    for term, (files, tf) in postings.items():
        if term not in by_term or len(files) > HUB_MAX_SHARE * len(paths):
            continue
        held, frequency = np.asarray(files), np.asarray(tf)
        matched = idf(len(files), len(paths)) * frequency / (frequency + norm[held])
        asking, weights = by_term[term]
        scores[np.ix_(np.asarray(asking), held)] += np.outer(weights, matched)
    return scores


def _fielded(
    documents: Sequence[FileDocuments], path_terms: Sequence[Counter[str]], params: Bm25Params, vocabulary: set[str]
) -> dict[str, tuple[list[int], list[float]]]:
    """Per term of `vocabulary`, the files holding it and its fielded frequency there (`FileBm25.frequencies`)."""
    postings: dict[str, tuple[list[int], list[float]]] = {}
    for number, (document, in_path) in enumerate(zip(documents, path_terms, strict=True)):
        terms = (document.terms.keys() | document.heads.keys() | in_path.keys()) & vocabulary
        for term in terms:
            heads = document.heads.get(term)
            value = params.body * document.terms.get(term, 0) + params.path * in_path.get(term, 0)
            value += params.head * (sum(heads[1::2]) if heads else 0)
            found = postings.setdefault(term, ([], []))
            found[0].append(number)
            found[1].append(value)
    return postings


def discount(hub: float, strength: float) -> float:
    """The factor a file's score is scaled by: 1 - strength x hubness (1 when the prior is off)."""
    return 1.0 - strength * hub if strength > 0 else 1.0
