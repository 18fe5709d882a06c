"""Prompt templates (data). `render` fills `{{name}}` slots; nothing else in a template is special."""

from __future__ import annotations

from importlib import resources


def load(name: str) -> str:
    """The text of a packaged template, e.g. `load("minimal_system.md")`."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def render(template: str, **values: str) -> str:
    """Replace each `{{key}}` with its value; unknown slots are an error, so no placeholder reaches a model."""
    for key, value in values.items():
        template = template.replace("{{" + key + "}}", value)
    if "{{" in template:
        start = template.index("{{")
        raise KeyError(f"unfilled template slot near {template[start : start + 30]!r}")
    return template
