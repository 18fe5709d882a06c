"""The skeleton of one file: its signatures in source order, nested ones indented, bodies elided; an assignment is
its name and the head of its value, one line."""

from __future__ import annotations

from collections.abc import Sequence

from snaffle.index.parse import Entity

SKELETON_INDENT = "    "
DOC_LINE = '"""{}"""'
BODY_ELIDED = "..."
ASSIGNMENT_RUN = 8
"""Consecutive assignments shown before the rest of the run is summed up in one line (a generated table module
must not become a thousand-line observation)."""
RUN_NOTE = "# ... {} more assignments ({} ... {}); read one by name"
PARSE_ERROR_NOTE = "# snaffle: {} syntax error(s) here; the signatures below are the parts that parsed"
DECODE_NOTE = "# snaffle: not valid UTF-8; undecodable bytes are shown as U+FFFD"


def render_skeleton(entities: Sequence[Entity], parse_errors: int = 0, decode_errors: bool = False) -> str:
    """Signatures in source order, nested ones indented, bodies elided; docstring heads as docstrings."""
    lines = [PARSE_ERROR_NOTE.format(parse_errors)] if parse_errors else []
    lines += [DECODE_NOTE] if decode_errors else []
    if entities and entities[0].kind == "module" and entities[0].doc:
        lines.append(DOC_LINE.format(_escape_doc(entities[0].doc)))
    members = [e for e in entities if e.kind != "module"]
    run: list[Entity] = []
    for index, entity in enumerate(members):
        pad = SKELETON_INDENT * entity.qualname.count(".")
        if entity.kind == "assignment":
            if run and run[-1].qualname.count(".") == entity.qualname.count("."):
                run.append(entity)
            else:
                run = [entity]
            lines.extend(_assignment_lines(run, pad, _run_ends(members, index)))
            continue
        run = []
        lines.extend(pad + line for line in entity.signature.split("\n"))
        inner = pad + SKELETON_INDENT
        if entity.doc:
            lines.append(inner + DOC_LINE.format(_escape_doc(entity.doc)))
        nested = index + 1 < len(members) and members[index + 1].start_byte < entity.end_byte
        if entity.kind != "class" or not (nested or entity.doc):
            lines.append(inner + BODY_ELIDED)
    return "".join(line + "\n" for line in lines)


def _escape_doc(doc: str) -> str:
    return doc.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def _run_ends(members: Sequence[Entity], index: int) -> bool:
    """Whether the assignment at `index` is the last of its run (the next member is no assignment at its depth)."""
    if index + 1 >= len(members):
        return True
    following, current = members[index + 1], members[index]
    return following.kind != "assignment" or following.qualname.count(".") != current.qualname.count(".")


def _assignment_lines(run: Sequence[Entity], pad: str, last: bool) -> list[str]:
    """The lines the newest assignment of a run adds: its signature while the run is short, else nothing until the
    run ends, then one line summing up the rest."""
    if len(run) <= ASSIGNMENT_RUN:
        return [pad + run[-1].signature]
    if not last:
        return []
    rest = run[ASSIGNMENT_RUN:]
    return [pad + RUN_NOTE.format(len(rest), rest[0].name, rest[-1].name)]
