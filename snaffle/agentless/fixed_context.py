"""The agentless arm's fixed context: the prompt text each kind of model call pays whatever the issue, in estimated
tokens (the issue and the localized code come on top; the localize stage line says how much)."""

from __future__ import annotations

from snaffle import prompts
from snaffle.agentless.config import PipelineConfig
from snaffle.agentless.repair import ONE_SHOT_PROMPTS
from snaffle.arms import AGENTLESS
from snaffle.model import tokens
from snaffle.primitives.extract import AUTO_FORMATS, repair_table


def _template_tokens(name: str, **slots: str) -> int:
    return tokens.count(prompts.render(prompts.load(name), issue="", context="", **slots))


def one_shot_tokens(edit_format: str) -> int:
    """A one-shot repair prompt's instructions (search_replace's example block is task text, left out)."""
    if edit_format == "search_replace":
        return _template_tokens("oneshot_search_replace.md", example="")
    return _template_tokens(ONE_SHOT_PROMPTS[edit_format])


def repair_tokens(config: PipelineConfig, model: str, protocol: str) -> int:
    """What each repair sample's call pays: the one-shot template, or the loop's system prompt and tool schemas.
    With `auto` edit format the entity's size picks the template, so the smaller one is what every call pays."""
    if not config.one_shot:
        return int(AGENTLESS.fixed_context(protocol)["fixed_context_tokens"])
    chosen = config.edit_format or repair_table().form_for(model).edit_format
    formats = AUTO_FORMATS if chosen == "auto" else (chosen,)
    return min(one_shot_tokens(f) for f in formats)


def fixed_context(config: PipelineConfig, model: str, protocol: str, failing_test: str | None) -> dict[str, int]:
    """Per kind of call (`reproduce` when the run asks for a reproduction test, `repair`), its fixed tokens."""
    reproduces = config.reproduce and failing_test is None
    parts = {"reproduce": _template_tokens("reproduce.md", observed="")} if reproduces else {}
    return {**parts, "repair": repair_tokens(config, model, protocol)}
