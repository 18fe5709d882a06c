"""One-point mutants (agentless/mutants.py): each operator on a small source, the line filter, what is never made."""

from __future__ import annotations

import ast

import pytest

from snaffle.agentless.mutants import Operators, mutants, operators

SOURCE = '''def tail(n, seq):
    """The last n items."""
    return seq[n:]


def get_in(keys, coll, default=None):
    try:
        return coll[keys[0]]
    except (KeyError, TypeError):
        return default


def count(x, lo=0):
    if x > 10 and not lo:
        x = x + 1
        lo = -lo
    for i in range(lo, max(x, 3)):
        pass
    return bisect_left(x, lo) - 1


def bisect_left(x, lo):
    return x


def bisect_right(x, lo):
    return x
'''


def changes(found: list) -> set[tuple[str, str, str]]:
    return {(m.operator, m.before, m.after) for m in found}


def test_every_operator_makes_its_change() -> None:
    found = changes(mutants(SOURCE, "m.py", [(1, 27)]))
    expected = {
        ("sign_added", "n", "-n"),
        ("exception_widened", "KeyError", "KeyError, IndexError"),
        ("exception_swapped", "KeyError", "IndexError"),
        ("relational", ">", ">="),
        ("relational", ">", "!="),
        ("boolean", "and", "or"),
        ("unary_removed", "not lo", "lo"),
        ("unary_removed", "-lo", "lo"),
        ("condition_negated", "x > 10 and not lo", "not (x > 10 and not lo)"),
        ("arithmetic", "+", "-"),
        ("term_dropped", "x + 1", "x"),
        ("term_dropped", "bisect_left(x, lo) - 1", "bisect_left(x, lo)"),
        ("term_added", "max(x, 3)", "max(x, 3) + 1"),
        ("constant", "0", "1"),
        ("constant", "10", "9"),
        ("name_swapped", "max", "min"),
        ("name_swapped", "bisect_left", "bisect_right"),
        ("statement_deleted", "        lo = -lo\n", ""),
    }
    assert expected <= found, expected - found


def test_every_mutant_parses_and_differs_from_the_original() -> None:
    found = mutants(SOURCE, "m.py", [(1, 27)])
    data = SOURCE.encode()
    results = [m.apply(data) for m in found]
    assert len(set(results)) == len(results) and data not in results
    for result in results:
        ast.parse(result)


@pytest.mark.parametrize(
    ("lines", "present", "absent"),
    [
        ({3}, {"-n"}, {"IndexError"}),
        ({9}, {"IndexError"}, {"-n"}),
        (None, {"-n", "IndexError"}, set()),
    ],
)
def test_only_the_given_lines_are_mutated(lines: set[int] | None, present: set[str], absent: set[str]) -> None:
    afters = {m.after for m in mutants(SOURCE, "m.py", [(1, 27)], lines)}
    assert present <= afters and not (absent & afters)


def test_spans_bound_the_mutants_and_keep_their_order() -> None:
    found = mutants(SOURCE, "m.py", [(6, 10), (1, 3)])
    lines = [m.line for m in found]
    assert set(lines) <= {3, 6, 7, 8, 9, 10}
    first_tail = lines.index(3)
    assert all(line >= 6 for line in lines[:first_tail])  # the first span's mutants come first


def test_never_a_docstring_a_lone_statement_or_an_undefined_name() -> None:
    found = mutants(SOURCE, "m.py", [(1, 27)])
    deleted = {m.before.strip() for m in found if m.operator == "statement_deleted"}
    assert '"""The last n items."""' not in deleted
    assert "pass" not in deleted and "return x" not in deleted  # the only statement of its block
    assert not any(m.after in ("hi", "high") for m in found)  # `lo` -> `hi`: nothing binds `hi`


def test_the_name_pairs_and_exception_siblings_are_data() -> None:
    table = Operators(pairs=(("odd", "even"),), exceptions=(("ValueError", "RuntimeError"),), max_constant=5)
    source = "def f(x):\n    try:\n        return is_odd(x) + 7\n    except ValueError:\n        return 0\n\n\n"
    source += "def is_odd(x):\n    return x % 2\n\n\ndef is_even(x):\n    return not x % 2\n"
    found = changes(mutants(source, "m.py", [(1, 5)], table=table))
    assert ("name_swapped", "is_odd", "is_even") in found
    assert ("exception_swapped", "ValueError", "RuntimeError") in found
    assert not any(op == "constant" and before == "7" for op, before, _ in found)  # above max_constant


def test_the_packaged_tables_load() -> None:
    table = operators()
    assert table.partner("left") == "right" and "IndexError" in table.siblings("KeyError")


@pytest.mark.parametrize("text", ["def f(:\n", "x = 1\x00\n", ""])
def test_unparsable_or_empty_source_gives_no_mutant(text: str) -> None:
    assert mutants(text, "m.py", [(1, 5)]) == []


def test_offsets_count_bytes_so_non_ascii_lines_mutate_cleanly() -> None:
    source = 'def f(s):\n    return "é" * 2 if s > 1 else s\n'
    found = mutants(source, "m.py", [(1, 2)])
    relational = [m for m in found if m.operator == "relational" and m.after == ">="]
    (mutant,) = relational
    assert mutant.apply(source.encode()).decode() == 'def f(s):\n    return "é" * 2 if s >= 1 else s\n'


def test_a_returned_positive_integer_is_negated_as_a_returned_negative_one_loses_its_sign() -> None:
    source = "def cmp(a, b):\n    if a < b:\n        return -1\n    if a > b:\n        return 1\n    return 0\n"
    found = changes(mutants(source, "m.py", [(1, 6)]))
    assert {("sign_added", "1", "-1"), ("unary_removed", "-1", "1")} <= found
    assert not any(after == "-0" for _, _, after in found)  # zero has no sign to flip
