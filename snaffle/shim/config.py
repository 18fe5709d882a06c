"""The shim's configuration record and its checks (bind address, upstream key)."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from snaffle.exceptions import UserError
from snaffle.types import Limits

RESERVE_OUTPUT_TOKENS = 4096
"""Completion tokens a request without `max_tokens` is assumed to use at most, while token or dollar caps are on."""
MAX_BODY_BYTES = 8 << 20
"""The largest request body the shim reads (a long prompt is well under 1 MiB)."""


@dataclass(frozen=True)
class ShimConfig:
    """Everything the shim needs: upstream, ledger, pricing, limits (0 = off), pacer and bind settings."""

    upstream: str
    """An OpenAI-compatible base URL, e.g. `http://127.0.0.1:8080/v1`."""
    db: Path | str
    api_key_env: str | None = None
    """The environment variable holding the upstream API key; None sends no key."""
    pricing: Path | str | None = None
    """A pricing TOML; None uses the packaged `pricing.toml`."""
    limits: Limits = field(default_factory=Limits)
    run_max_dollars: float = 0.0
    max_in_flight: int = 0
    tokens_per_minute: int = 0
    upstream_timeout_s: float = 600.0
    reserve_output_tokens: int = RESERVE_OUTPUT_TOKENS
    """A call's worst case, held against the token and dollar caps while it is in flight, is its prompt estimate
    plus its `max_tokens` (or `max_completion_tokens`), else this many completion tokens; 0 reserves the prompt."""
    max_body_bytes: int = MAX_BODY_BYTES
    """Longer request bodies are refused with 413 (read no further than this); 0 means off."""
    host: str = "127.0.0.1"
    port: int = 0
    allow_remote: bool = False
    token: str | None = None
    """When set, every request must carry `Authorization: Bearer <token>` (or `x-snaffle-token`)."""

    def check_bind(self) -> None:
        """Refuse a non-loopback bind address unless `allow_remote` and a `token` are both given."""
        if is_loopback(self.host):
            return
        if not (self.allow_remote and self.token):
            raise UserError(
                f"refusing to bind the shim to {self.host}: it spends money for whoever reaches it; "
                "use 127.0.0.1, or pass both --allow-remote and --token"
            )

    def api_key(self) -> str | None:
        """The upstream API key from the named environment variable (never from a request)."""
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise UserError(f"--api-key-env {self.api_key_env}: that environment variable is not set")
        return key


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
