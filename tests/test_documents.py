"""Localization documents: tokenized per file and entity, cached by content hash, ranked by fielded BM25."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from snaffle.agentless.documents import (
    DOCUMENTS_DIR,
    Bm25Params,
    DocumentStore,
    EntityBm25,
    FileBm25,
    build_documents,
    idf,
    query_weights,
)
from snaffle.index.parse import parse_source

SOURCE = b'''"""Parcel shipping."""


class Parcel:
    """A parcel with a weight."""

    def cost(self, weight):
        return base_rate(weight) * 2


def base_rate(weight):
    return 5 + weight
'''
OTHER = b"def weigh(parcel):\n    return parcel.grams / 1000\n"


def test_documents_hold_heads_bodies_and_the_whole_file() -> None:
    entities = parse_source("ship.py", SOURCE).entities
    assert [e.selector for e in entities] == [
        "ship.py",
        "ship.py::Parcel",
        "ship.py::Parcel.cost",
        "ship.py::base_rate",
    ]
    built = build_documents(SOURCE, entities)
    assert built.head("parcel") == [0, 1, 1, 3, 2, 1]  # module doc; class name, signature, doc; method qualname
    assert built.body("weight")[0::2] == [2, 3]  # only functions and methods have bodies
    assert "shipping" in built.terms and built.length == sum(map(int, built.terms.values()))
    assert built.head_lengths[0] == len(["parcel", "shipping"]) and built.body_lengths[1] == 0


def test_store_reuses_the_disk_cache_by_content_hash(tmp_path: Path) -> None:
    entities = parse_source("ship.py", SOURCE).entities
    built = DocumentStore(tmp_path).get("ab" * 20, entities, lambda: SOURCE)
    assert list((tmp_path / DOCUMENTS_DIR).rglob("*.json"))

    def unreadable() -> bytes:
        raise AssertionError("the cached documents should have been used")

    assert DocumentStore(tmp_path).get("ab" * 20, entities, unreadable) == built
    rebuilt = DocumentStore(tmp_path).get("ab" * 20, entities[:2], lambda: SOURCE[:60])
    assert len(rebuilt.head_lengths) == 2  # another parse of the text (another grammar): tokenized anew


@pytest.mark.parametrize(
    ("table", "damage"),
    [
        ("bodies", ["weight", "2 1\n3 x"]),  # not decimal text: it would fail where read, long after the load
        ("heads", ["parcel shipping", "0 1"]),  # one term more than values
        ("terms", ["parcel shipping weight", "1\n2  3"]),  # counts of the right number, not one per term
        ("terms", "parcel 1"),  # not the two columns
        ("head_lengths", [1, 2]),  # not text
    ],
)
def test_a_damaged_entry_is_rebuilt_when_loaded_not_when_read(tmp_path: Path, table: str, damage: object) -> None:
    entities = parse_source("ship.py", SOURCE).entities
    built = DocumentStore(tmp_path).get("ab" * 20, entities, lambda: SOURCE)
    (entry,) = (tmp_path / DOCUMENTS_DIR).rglob("*.json")
    payload = json.loads(entry.read_text())
    payload[table] = damage
    entry.write_text(json.dumps(payload))
    store = DocumentStore(tmp_path)
    assert store.get("ab" * 20, entities, lambda: SOURCE) == built
    assert store.report_damaged() == 1


def test_entity_bm25_weighs_the_name_above_the_body() -> None:
    entities = parse_source("ship.py", SOURCE).entities
    docs = [build_documents(SOURCE, entities)]
    heavy_head = EntityBm25(["ship.py"], docs, Bm25Params(k1=1.2, b=0.75, path=1.0, head=4.0, body=0.5)).scores(
        ["rate"]
    )
    assert int(heavy_head.argmax()) == 3  # base_rate is named so; Parcel.cost only calls it
    assert heavy_head[0] == 0.0  # the module has no body document


def test_file_bm25_counts_path_and_content() -> None:
    docs = [build_documents(SOURCE, parse_source("a.py", SOURCE).entities)]
    docs.append(build_documents(OTHER, parse_source("b.py", OTHER).entities))
    scores = FileBm25(
        ["ship.py", "scale/weigh.py"], docs, Bm25Params(k1=1.2, b=0.75, path=3.0, head=1.0, body=1.0)
    ).scores(["weigh"])
    assert scores[1] > scores[0] == 0.0


@pytest.mark.parametrize(("words", "expected"), [(["a"], {"a": 1.0}), (["a", "b", "a"], {"a": 1.693, "b": 1.0})])
def test_query_weights_damp_repeats(words: list[str], expected: dict[str, float]) -> None:
    assert query_weights(words) == pytest.approx(expected, abs=1e-3)


def test_idf_is_positive_and_falls_with_frequency() -> None:
    assert idf(1, 100) > idf(50, 100) > idf(100, 100) > 0
