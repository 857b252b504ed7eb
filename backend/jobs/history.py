"""The run history: one SQLite file per workspace (``{workspace}/zerolora.sqlite``).

Tables: ``runs`` (one row per run: status, GPU set, folder, the resolved config as YAML,
supervisor identity, stop request, failure reason, attempt; ``slurm_job_id``: the SLURM job
of a run sent there, its current attempt's, else NULL), ``stages`` (argv, environment,
status, process identity, log path of each stage; ``adopted_at``: when the server took over
watching a stage whose supervisor had died), ``attempts`` (earlier attempts of a
resumed run) and ``settings`` (what the last ``Runner`` set: queue limit, free-disk floor).

The schema only grows: a column added later is listed in ``ADDED_COLUMNS`` and added to an
older file when it is opened, so a history written by an earlier version still loads.
Connections are in autocommit mode; every write is a ``transaction(conn)``.

Notes are messages (``backend.core.messages``): a text column (``note``, ``failure_reason``,
``stop_reason``) holds the English the CLI and the API read, and its ``<column>_msg`` twin
the message's JSON (code and parameters), read back as the message (``read_msg``) so the
page says it in its own language. A note written before the twin existed reads as its text.
"""
from __future__ import annotations

import json
import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from backend.core.messages import Msg

DB_NAME = "zerolora.sqlite"
SCHEMA_VERSION = 1
TERMINAL = ("succeeded", "failed", "stopped", "skipped")

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    name TEXT,
    owner TEXT,
    status TEXT NOT NULL,
    gpu_ids TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    run_dir TEXT NOT NULL,
    config_yaml TEXT,
    supervisor_pid INTEGER,
    supervisor_start REAL,
    launch_requested_at REAL,
    secret_keys TEXT,
    waiter_pid INTEGER,
    waiter_start REAL,
    stop_grace_s REAL NOT NULL,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    stop_requested_at REAL,
    stop_reason TEXT,
    failure_reason TEXT,
    note TEXT,
    attempt INTEGER NOT NULL DEFAULT 1,
    stop_reason_msg TEXT,
    failure_reason_msg TEXT,
    note_msg TEXT,
    slurm_job_id TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status, seq);
CREATE TABLE IF NOT EXISTS stages (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    name TEXT NOT NULL,
    argv TEXT NOT NULL,
    env TEXT NOT NULL,
    status TEXT NOT NULL,
    exit_code INTEGER,
    pid INTEGER,
    pgid INTEGER,
    proc_start REAL,
    started_at REAL,
    ended_at REAL,
    log_path TEXT NOT NULL,
    note TEXT,
    adopted_at REAL,
    note_msg TEXT,
    PRIMARY KEY (run_id, idx)
);
CREATE TABLE IF NOT EXISTS attempts (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    status TEXT NOT NULL,
    started_at REAL,
    ended_at REAL,
    failure_reason TEXT,
    note TEXT,
    failure_reason_msg TEXT,
    note_msg TEXT,
    PRIMARY KEY (run_id, attempt)
);
CREATE TABLE IF NOT EXISTS settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


def db_path(workspace: str | os.PathLike) -> Path:
    return Path(workspace) / DB_NAME


def connect(workspace: str | os.PathLike) -> sqlite3.Connection:
    """A connection in autocommit mode; write with ``transaction(conn)``."""
    conn = sqlite3.connect(str(db_path(workspace)), timeout=60.0, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout = 60000")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


# Columns added after a table was first created: (table, column, declaration).
ADDED_COLUMNS = [("runs", "secret_keys", "TEXT"), ("runs", "waiter_pid", "INTEGER"),
                 ("runs", "waiter_start", "REAL"), ("stages", "adopted_at", "REAL"),
                 ("runs", "stop_reason_msg", "TEXT"), ("runs", "failure_reason_msg", "TEXT"),
                 ("runs", "note_msg", "TEXT"), ("stages", "note_msg", "TEXT"),
                 ("attempts", "failure_reason_msg", "TEXT"), ("attempts", "note_msg", "TEXT"),
                 ("runs", "slurm_job_id", "TEXT")]
# The text columns whose message a ``<column>_msg`` column holds (see the module docstring).
MSG_COLUMNS = ("stop_reason", "failure_reason", "note")


def init_db(workspace: str | os.PathLike) -> None:
    Path(workspace).mkdir(parents=True, exist_ok=True)
    conn = connect(workspace)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        with transaction(conn):
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            for table, column, decl in ADDED_COLUMNS:
                have = {r["name"] for r in conn.execute(f"PRAGMA table_info({table})")}
                if column not in have:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    finally:
        conn.close()


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT: read-modify-write without another writer in between."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def get_setting(conn: sqlite3.Connection, key: str, default: Any) -> Any:
    row = conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
    return json.loads(row["value"]) if row else default


def set_setting(conn: sqlite3.Connection, key: str, value: Any) -> None:
    conn.execute("INSERT INTO settings(key, value) VALUES(?, ?) "
                 "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, json.dumps(value)))


def msg_json(value: Any) -> str | None:
    """What a ``<column>_msg`` column holds for ``value``: a message's JSON, else None."""
    return json.dumps(value.to_json(), ensure_ascii=False) if isinstance(value, Msg) else None


def read_msg(data: str | None, text: Any) -> Any:
    """A note as it was written: the message its ``_msg`` column holds, else its text."""
    if data:
        try:
            found = Msg.from_json(json.loads(data))
        except ValueError:
            found = None
        if isinstance(found, Msg):
            return found
    return text


def with_msgs(row: Any) -> dict[str, Any]:
    """A history row as a dict whose notes are read back as messages (``read_msg``); the
    ``_msg`` columns themselves left out."""
    d = {k: row[k] for k in row.keys()}
    for col in MSG_COLUMNS:
        if col + "_msg" in d:
            d[col] = read_msg(d.pop(col + "_msg"), d.get(col))
    return d
