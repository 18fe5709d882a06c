"""Dollar prices per model, loaded from a TOML table (data, not code); no web framework imported here."""

from __future__ import annotations

import logging
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from snaffle.exceptions import UserError
from snaffle.types import Usage

log = logging.getLogger("snaffle.shim")

PER_TOKEN = 1e-6
"""Prices in the table are dollars per million tokens."""


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens for one model."""

    input: float
    cached_input: float
    output: float


@dataclass
class Pricing:
    """A pricing table; `dollars` prices a call. Unknown models cost $0 and are warned about once each."""

    models: dict[str, Price]
    source: str = "<memory>"
    warned: set[str] = field(default_factory=set)

    def price(self, model: str) -> Price | None:
        """The price of `model`: exact, then without `provider/`, then the longest `name-` prefix."""
        for name in (model, model.rsplit("/", 1)[-1]):
            if name in self.models:
                return self.models[name]
        bare = model.rsplit("/", 1)[-1]
        prefixes = [key for key in self.models if bare.startswith(key + "-")]
        return self.models[max(prefixes, key=len)] if prefixes else None

    def dollars(self, model: str, usage: Usage) -> float:
        """Dollars for one call; cached tokens are part of the prompt, reasoning tokens of the completion."""
        price = self.price(model)
        if price is None:
            if model not in self.warned:
                self.warned.add(model)
                log.warning("no price for model %r in %s: counting it as $0", model, self.source)
            return 0.0
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        fresh = usage.prompt_tokens - cached
        total = fresh * price.input + cached * price.cached_input + usage.completion_tokens * price.output
        return total * PER_TOKEN


def parse_pricing(text: str, source: str = "<memory>") -> Pricing:
    """Parse a pricing table: `[models."name"]` sections with `input`, optional `cached_input`, `output`."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"pricing file {source} is not valid TOML ({exc}): fix it or drop --pricing") from exc
    models: dict[str, Price] = {}
    for name, entry in table.get("models", {}).items():
        try:
            price_in = float(entry["input"])
            models[name] = Price(price_in, float(entry.get("cached_input", price_in)), float(entry["output"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(
                f"pricing file {source}: model {name!r} needs numeric `input` and `output` ($ per 1M tokens)"
            ) from exc
    return Pricing(models, source)


def load_pricing(path: Path | str | None = None) -> Pricing:
    """Load a pricing table from `path`, or the packaged default table when `path` is None."""
    if path is None:
        text = resources.files("snaffle.shim").joinpath("pricing.toml").read_text(encoding="utf-8")
        return parse_pricing(text, "the packaged pricing.toml")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read pricing file {path} ({exc.strerror}): pass an existing --pricing") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"pricing file {path} is not UTF-8 text: pass a TOML file") from exc
    return parse_pricing(text, str(path))
