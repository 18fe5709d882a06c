"""The shim's ledger: one flat row per model call, appended durably to SQLite (WAL) with named migrations."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path

from snaffle.exceptions import UserError
from snaffle.types import Usage

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "0001_calls",
        """
        CREATE TABLE calls (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            ts REAL NOT NULL,
            run TEXT NOT NULL,
            instance TEXT NOT NULL,
            call INTEGER NOT NULL,
            model TEXT NOT NULL,
            stream INTEGER NOT NULL,
            status INTEGER NOT NULL,
            latency_ms REAL NOT NULL,
            ttfb_ms REAL,
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            cached_tokens INTEGER NOT NULL,
            reasoning_tokens INTEGER NOT NULL,
            dollars REAL NOT NULL,
            usage_unknown INTEGER NOT NULL,
            bytes INTEGER NOT NULL,
            error_type TEXT
        );
        CREATE INDEX calls_by_instance ON calls (run, instance);
        """,
    ),
    (
        "0002_append_only",
        """
        CREATE TRIGGER calls_no_update BEFORE UPDATE ON calls
            BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
        CREATE TRIGGER calls_no_delete BEFORE DELETE ON calls
            BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
        """,
    ),
    (
        "0003_usage_estimated",
        "ALTER TABLE calls ADD COLUMN usage_estimated INTEGER NOT NULL DEFAULT 0",
    ),
    (
        "0004_dollars_unknown",  # dollars NULL: the model's price is unknown (SQLite alters no constraint: rebuild)
        """
        CREATE TABLE calls_priced (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            ts REAL NOT NULL,
            run TEXT NOT NULL,
            instance TEXT NOT NULL,
            call INTEGER NOT NULL,
            model TEXT NOT NULL,
            stream INTEGER NOT NULL,
            status INTEGER NOT NULL,
            latency_ms REAL NOT NULL,
            ttfb_ms REAL,
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            cached_tokens INTEGER NOT NULL,
            reasoning_tokens INTEGER NOT NULL,
            dollars REAL,
            usage_unknown INTEGER NOT NULL,
            bytes INTEGER NOT NULL,
            error_type TEXT,
            usage_estimated INTEGER NOT NULL DEFAULT 0
        );
        INSERT INTO calls_priced SELECT * FROM calls;
        DROP TABLE calls;
        ALTER TABLE calls_priced RENAME TO calls;
        CREATE INDEX calls_by_instance ON calls (run, instance);
        CREATE TRIGGER calls_no_update BEFORE UPDATE ON calls
            BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
        CREATE TRIGGER calls_no_delete BEFORE DELETE ON calls
            BEGIN SELECT RAISE(ABORT, 'the ledger is append-only'); END;
        """,
    ),
)
"""Append-only: never edit or reorder an applied migration; add a new one at the end."""

CHECKPOINT_EVERY_S = 1.0
"""WAL checkpoints (the only fsyncs) run on a side thread this often, never on the event loop."""

REFUSALS = frozenset({"budget_exceeded", "max_turns_exceeded", "timeout"})


@dataclass(frozen=True)
class LedgerRow:
    """One model call as the shim saw it; `call` numbers the instance's requests from 1."""

    ts: float
    run: str
    instance: str
    call: int
    model: str
    stream: bool
    status: int
    latency_ms: float
    ttfb_ms: float | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    dollars: float | None = 0.0
    """None: the model's price is unknown."""
    usage_unknown: bool = False
    bytes: int = 0
    error_type: str | None = None
    usage_estimated: bool = False
    """The upstream never reported usage (a stream that broke): the tokens are the shim's cl100k estimate."""

    @property
    def usage(self) -> Usage:
        return Usage(
            self.prompt_tokens,
            self.completion_tokens,
            self.cached_tokens,
            self.reasoning_tokens,
            self.dollars or 0.0,
            int(self.dollars is None),
        )

    @property
    def ok(self) -> bool:
        """A successful call: a 2xx answer that arrived whole."""
        return 200 <= self.status < 300 and self.error_type is None


@dataclass(frozen=True)
class Totals:
    """Cumulative usage of one instance: `calls` counts successful calls, `requests` every row (refused,
    failed or successful); `errors` the failed ones."""

    requests: int = 0
    calls: int = 0
    usage: Usage = Usage()
    usage_unknown: int = 0
    usage_estimated: int = 0
    refused: int = 0
    errors: int = 0
    first_ts: float | None = None

    def add(self, row: LedgerRow) -> Totals:
        return Totals(
            requests=max(self.requests, row.call),
            calls=self.calls + row.ok,
            usage=self.usage + row.usage,
            usage_unknown=self.usage_unknown + row.usage_unknown,
            usage_estimated=self.usage_estimated + row.usage_estimated,
            refused=self.refused + (row.error_type in REFUSALS),
            errors=self.errors + (not row.ok and row.error_type not in REFUSALS),
            first_ts=row.ts if self.first_ts is None else min(self.first_ts, row.ts),
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "calls": self.calls,
            **self.usage.as_dict(),
            "usage_unknown": self.usage_unknown,
            "usage_estimated": self.usage_estimated,
            "refused": self.refused,
            "errors": self.errors,
            "first_call_ts": self.first_ts,
        }


COLUMNS = tuple(f.name for f in fields(LedgerRow))
INSERT = f"INSERT INTO calls ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
TOTALS = """
    SELECT COUNT(*), COALESCE(MAX(call), 0), COALESCE(SUM(status BETWEEN 200 AND 299 AND error_type IS NULL), 0),
        COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0), COALESCE(SUM(cached_tokens), 0),
        COALESCE(SUM(reasoning_tokens), 0), COALESCE(SUM(dollars), 0.0), COALESCE(SUM(usage_unknown), 0),
        COALESCE(SUM(usage_estimated), 0),
        COALESCE(SUM(error_type IN ('budget_exceeded', 'max_turns_exceeded', 'timeout')), 0), MIN(ts),
        COALESCE(SUM(dollars IS NULL), 0)
    FROM calls WHERE run = ? AND instance = ?
"""


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply the migrations not yet recorded in `_migrations`, in order; returns the names applied."""
    conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    done = {name for (name,) in conn.execute("SELECT name FROM _migrations")}
    applied = []
    for name, sql in MIGRATIONS:
        if name in done:
            continue
        stamp = "(julianday('now') - 2440587.5) * 86400.0"
        try:
            conn.executescript(f"BEGIN; {sql}; INSERT INTO _migrations VALUES ('{name}', {stamp}); COMMIT;")
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        applied.append(name)
    return applied


class Ledger:
    """An append-only call ledger. Each `append` is one committed transaction (WAL, synchronous=NORMAL):
    it survives a crash of the process; checkpoints run on a side thread."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA wal_autocheckpoint=0")
            migrate(self._conn)
        except sqlite3.Error as exc:
            raise UserError(f"cannot open the ledger {self.path} ({exc}): pass a writable --db path") from exc
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._checkpointer: threading.Thread | None = None
        if self.path != ":memory:":
            self._checkpointer = threading.Thread(target=self._checkpoint_loop, name="ledger-checkpoint", daemon=True)
            self._checkpointer.start()

    def append(self, row: LedgerRow) -> None:
        """Append and commit one row."""
        with self._lock:
            self._conn.execute(INSERT, [getattr(row, name) for name in COLUMNS])  # not astuple: it deep-copies

    def totals(self, run: str, instance: str) -> Totals:
        """Cumulative usage of one instance, from the committed rows."""
        with self._lock:
            count, last, ok, p, c, ca, r, dollars, unknown, estimated, refused, first, unpriced = self._conn.execute(
                TOTALS, (run, instance)
            ).fetchone()
        usage = Usage(p, c, ca, r, dollars, unpriced)
        return Totals(last, ok, usage, unknown, estimated, refused, count - ok - refused, first)

    def run_dollars(self, run: str) -> float:
        with self._lock:
            (dollars,) = self._conn.execute(
                "SELECT COALESCE(SUM(dollars), 0.0) FROM calls WHERE run = ?", (run,)
            ).fetchone()
        return float(dollars)

    def rows(self, run: str | None = None, instance: str | None = None) -> list[LedgerRow]:
        """All rows, oldest first, optionally of one run or one instance."""
        query, args = f"SELECT {', '.join(COLUMNS)} FROM calls", []
        if run is not None:
            query, args = query + " WHERE run = ?", [run]
            if instance is not None:
                query, args = query + " AND instance = ?", [run, instance]
        with self._lock:
            raw = self._conn.execute(query + " ORDER BY id", args).fetchall()
        return [_row(values) for values in raw]

    def close(self) -> None:
        self._stop.set()
        if self._checkpointer is not None:
            self._checkpointer.join()
        with self._lock:
            if self.path != ":memory:":
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._conn.close()

    def _checkpoint_loop(self) -> None:
        with _connect(self.path) as conn:
            while not self._stop.wait(CHECKPOINT_EVERY_S):
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")


def _row(values: tuple[object, ...]) -> LedgerRow:
    row = LedgerRow(*values)  # type: ignore[arg-type]
    return replace(
        row, stream=bool(row.stream), usage_unknown=bool(row.usage_unknown), usage_estimated=bool(row.usage_estimated)
    )


@contextmanager
def _connect(path: str) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()
