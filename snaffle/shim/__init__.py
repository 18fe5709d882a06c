"""The metering shim: an OpenAI-compatible proxy that meters, paces and limits model calls per instance."""

from snaffle.shim.pricing import Price, Pricing, load_pricing

__all__ = ["Price", "Pricing", "load_pricing"]
