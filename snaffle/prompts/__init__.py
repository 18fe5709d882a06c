"""Prompt templates (data). `render` fills `{{name}}` slots; nothing else in a template is special.

A file of the same name in the directory named by SNAFFLE_PROMPTS replaces the packaged one (for prompt tuning).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

OVERRIDE_ENV = "SNAFFLE_PROMPTS"


def load(name: str) -> str:
    """The text of a template, e.g. `load("minimal_system.md")`: $SNAFFLE_PROMPTS/name if present, else packaged."""
    override = os.environ.get(OVERRIDE_ENV)
    if override and (Path(override) / name).is_file():
        return (Path(override) / name).read_text(encoding="utf-8")
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def render(template: str, **values: str) -> str:
    """Replace each `{{key}}` with its value; unknown slots are an error, so no placeholder reaches a model."""
    for key, value in values.items():
        template = template.replace("{{" + key + "}}", value)
    if "{{" in template:
        start = template.index("{{")
        raise KeyError(f"unfilled template slot near {template[start : start + 30]!r}")
    return template
