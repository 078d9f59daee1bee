"""Where Optuna studies live: in memory, in SQLite (resumable) or PostgreSQL (shared).

A storage URL is an SQLAlchemy URL (``sqlite:///study.db``,
``postgresql://user:password@host:5432/db``). Its password is never shown:
:func:`mask_url` is applied to everything that prints or records a URL.
"""

from __future__ import annotations

import functools
import re

from .exceptions import InputError

_PASSWORD = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@]*:)(?P<pw>.*)(?P<tail>@[^@]*)$")


def mask_url(url: str | None) -> str:
    """``url`` with its password replaced by ``***`` (``in-memory`` for ``None``)."""
    if url is None:
        return "in-memory"
    return _PASSWORD.sub(lambda m: m["head"] + "***" + m["tail"], url, count=1)


def mask_text(text: str, url: str | None) -> str:
    """``text`` with the password of ``url`` (wherever it appears) replaced by ``***``."""
    if not url:
        return text
    m = _PASSWORD.match(url)
    if m and m["pw"]:
        text = text.replace(url, mask_url(url)).replace(m["pw"], "***")
    return text


def _sqlite_connect(path: str):
    """An SQLite connection in write-ahead-log mode.

    With WAL, ``synchronous=NORMAL`` commits without waiting for the disk yet a
    killed process still loses nothing it committed (only a power cut can); Optuna
    commits once per parameter, so this is what makes SQLite studies usable.
    """
    import sqlite3

    conn = sqlite3.connect(path, timeout=60)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def with_driver(url: str) -> str:
    """``postgresql://`` with the driver that is installed.

    SQLAlchemy 2.1 maps a bare ``postgresql://`` to psycopg 3; this project installs
    psycopg2 (``pip install -e '.[postgres]'``), so the bare scheme is sent to it when
    psycopg 3 is absent.
    """
    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare):
            try:
                import psycopg  # noqa: F401
            except ImportError:
                return "postgresql+psycopg2://" + url[len(bare) :]
    return url


def open_storage(url: str | None):
    """An Optuna storage for ``url``: ``None`` (or ``memory``) is in-memory.

    Workers write only finished trials (see :class:`allocator.search.study.StudyMirror`),
    so a killed worker leaves nothing half-written.
    """
    if url is None or url in ("", "memory", "in-memory"):
        return None
    if "://" not in url:
        raise InputError(
            "--storage", f"{mask_url(url)!r} is not a URL (sqlite:///file.db, postgresql://...)"
        )
    import optuna

    url = with_driver(url)
    kwargs = {}
    if url.startswith("sqlite"):
        kwargs = {"connect_args": {"timeout": 60}}
        if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
            kwargs = {"creator": functools.partial(_sqlite_connect, url[len("sqlite:///") :])}
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    except Exception as exc:  # SQLAlchemy / driver errors carry the URL: mask it
        reason = mask_text(
            str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, url
        )
        raise InputError("--storage", f"cannot open {mask_url(url)}: {reason}") from None
