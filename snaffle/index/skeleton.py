"""The skeleton of one file: its signatures in source order, nested ones indented, bodies elided."""

from __future__ import annotations

from collections.abc import Sequence

from snaffle.index.parse import Entity

SKELETON_INDENT = "    "
DOC_LINE = '"""{}"""'
BODY_ELIDED = "..."
PARSE_ERROR_NOTE = "# snaffle: {} syntax error(s) here; the signatures below are the parts that parsed"
DECODE_NOTE = "# snaffle: not valid UTF-8; undecodable bytes are shown as U+FFFD"


def render_skeleton(entities: Sequence[Entity], parse_errors: int = 0, decode_errors: bool = False) -> str:
    """Signatures in source order, nested ones indented, bodies elided; docstring heads as docstrings."""
    lines = [PARSE_ERROR_NOTE.format(parse_errors)] if parse_errors else []
    lines += [DECODE_NOTE] if decode_errors else []
    if entities and entities[0].kind == "module" and entities[0].doc:
        lines.append(DOC_LINE.format(_escape_doc(entities[0].doc)))
    members = [e for e in entities if e.kind != "module"]
    for index, entity in enumerate(members):
        pad = SKELETON_INDENT * entity.qualname.count(".")
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
