"""Prompt templates (data). `render` fills `{{name}}` slots; nothing else in a template is special.

`system_prompt` assembles a system prompt: the arm's template, and with the text protocol the tools and call format.

A file of the same name in the directory named by SNAFFLE_PROMPTS replaces the packaged one (for prompt tuning).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

OVERRIDE_ENV = "SNAFFLE_PROMPTS"


def load(name: str) -> str:
    """The text of a template, e.g. `load("minimal_system.md")`: $SNAFFLE_PROMPTS/name if present, else packaged."""
    override = os.environ.get(OVERRIDE_ENV)
    if override and (Path(override) / name).is_file():
        return (Path(override) / name).read_text(encoding="utf-8")
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


SLOT = re.compile(r"\{\{(\w+)\}\}")


def render(template: str, **values: str) -> str:
    """Fill each `{{key}}` slot of `template` with its value in one pass, so a value is never read as a template (an
    issue may quote Jinja's `{{ x }}`, a repr may hold `{{call}}`); a slot with no value is an error, so no
    placeholder reaches a model."""

    def fill(slot: re.Match[str]) -> str:
        if slot[1] not in values:
            raise KeyError(f"unfilled template slot near {slot[0]!r}")
        return values[slot[1]]

    return SLOT.sub(fill, template)


def system_prompt(base: str, schemas: Sequence[Mapping[str, Any]], protocol: str, example: Mapping[str, Any]) -> str:
    """The system prompt; with the text protocol it also describes the tools and the call format (`example`)."""
    if protocol != "text":
        return base.strip()
    described = "\n".join(json.dumps(schema, separators=(",", ":")) for schema in schemas)
    protocol_text = render(
        load("text_protocol.md"),
        example_name=str(example["name"]),
        example_arguments=json.dumps(example["arguments"]),
        tools=described,
    )
    return f"{base.strip()}\n\n{protocol_text.strip()}"
