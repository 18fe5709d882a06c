"""Dollar prices per model, loaded from a TOML table (data, not code); no web framework imported here."""

from __future__ import annotations

import importlib.util
import json
import logging
import threading
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from snaffle.exceptions import UserError
from snaffle.types import Usage

log = logging.getLogger("snaffle.shim")

PER_TOKEN = 1e-6
"""Prices in the table are dollars per million tokens."""
LITELLM_COST_MAP = "model_prices_and_context_window_backup.json"
"""The cost map litellm ships inside its package (what it uses offline, `LITELLM_LOCAL_MODEL_COST_MAP`)."""


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens for one model."""

    input: float
    cached_input: float
    output: float


@dataclass
class Pricing:
    """A pricing table; `dollars` prices a call. A model the table lacks is priced from litellm's cost map when
    litellm is installed; else its cost is unknown (None), said once per model."""

    models: dict[str, Price]
    source: str = "<memory>"
    warned: set[str] = field(default_factory=set)
    fallback: Callable[[], Mapping[str, Price]] | None = None
    """Where prices the table lacks come from (read on the first such model); None: litellm's cost map."""
    _fallback_models: Mapping[str, Price] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def price(self, model: str) -> Price | None:
        """The price of `model` in the table: exact, then without `provider/`, then the longest `name-` prefix."""
        return _match(self.models, model, prefixes=True)

    def lookup(self, model: str) -> Price | None:
        """The table's price, else litellm's (exact, then without `provider/`), else None; warns once when None."""
        found = self.price(model)
        if found is not None:
            return found
        with self._lock:
            if self._fallback_models is None:
                self._fallback_models = (self.fallback or litellm_prices)()
            found = _match(self._fallback_models, model, prefixes=False)
            if found is None and model not in self.warned:
                self.warned.add(model)
                log.warning("%s", unknown_price_message(model, self.source, bool(self._fallback_models)))
        return found

    def dollars(self, model: str, usage: Usage) -> float | None:
        """Dollars for one call (None: the model's price is unknown); cached tokens are part of the prompt,
        reasoning tokens of the completion."""
        price = self.lookup(model)
        if price is None:
            return None
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        fresh = usage.prompt_tokens - cached
        total = fresh * price.input + cached * price.cached_input + usage.completion_tokens * price.output
        return total * PER_TOKEN


def _match(models: Mapping[str, Price], model: str, prefixes: bool) -> Price | None:
    for name in (model, model.rsplit("/", 1)[-1]):
        if name in models:
            return models[name]
    if not prefixes:
        return None
    bare = model.rsplit("/", 1)[-1]
    matching = [key for key in models if bare.startswith(key + "-")]
    return models[max(matching, key=len)] if matching else None


def unknown_price_message(model: str, source: str, litellm: bool) -> str:
    """The one line said when a model has no price: where it was looked for, what is recorded, how to fix it."""
    where = f"{source} or litellm's cost map" if litellm else f"{source} (litellm is not installed to look further)"
    fix = "price it in a table: snaffle shim serve --pricing FILE"
    return f"no price for model {model!r} in {where}: its cost is recorded as unknown ({fix})"


def litellm_prices() -> dict[str, Price]:
    """litellm's cost map as $ per million tokens, read from the JSON its package ships (importing litellm takes
    seconds); {} when litellm is not installed."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return {}
    for location in (spec.submodule_search_locations or ()) if spec is not None else ():
        path = Path(location) / LITELLM_COST_MAP
        if path.is_file():
            return parse_litellm_costs(json.loads(path.read_text(encoding="utf-8")))
    return {}


def parse_litellm_costs(table: Mapping[str, Any]) -> dict[str, Price]:
    """litellm's `{model: {input_cost_per_token, output_cost_per_token, cache_read_input_token_cost}}` as prices;
    entries without both numeric costs are skipped."""
    prices: dict[str, Price] = {}
    for name, entry in table.items():
        if not isinstance(entry, Mapping):
            continue
        fresh, output = _number(entry.get("input_cost_per_token")), _number(entry.get("output_cost_per_token"))
        cached = _number(entry.get("cache_read_input_token_cost", fresh))
        if fresh is not None and output is not None and cached is not None:
            prices[name] = Price(fresh / PER_TOKEN, cached / PER_TOKEN, output / PER_TOKEN)
    return prices


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


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
