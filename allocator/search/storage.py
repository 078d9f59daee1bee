"""Where Optuna studies live: in memory, in SQLite (resumable) or PostgreSQL (shared).

A storage URL is an SQLAlchemy URL (``sqlite:///study.db``,
``postgresql://user:password@host:5432/db``). Its password is never shown:
:func:`mask_url` is applied to everything that prints or records a URL and
:func:`mask_text` to every message that may quote it (driver errors do). What counts as
a password is what SQLAlchemy's own URL parser (``sqlalchemy.engine.make_url``, the one
that connects) finds: the user-info password and any ``password=`` query parameter. A
password holding an unencoded ``@`` makes that parser read its tail as part of the host;
such a URL is refused (:func:`check_url`), and the whole user-info part up to the last
``@`` is treated as the secret.
"""

from __future__ import annotations

import functools
import sqlite3
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, quote_plus

from .._lazy import lazy_module
from ..exceptions import ParameterError

if TYPE_CHECKING:
    import optuna
    import sqlalchemy
    from optuna.storages import RDBStorage
    from sqlalchemy.engine import URL
else:
    optuna = lazy_module("optuna")
    sqlalchemy = lazy_module("sqlalchemy")

#: Query parameters that carry a password (libpq and its drivers accept ``password=``).
SECRET_QUERY_KEYS = ("password", "passwd", "pwd")
#: How a secret is shown.
HIDDEN = "***"


def _parse(url: str) -> URL | None:
    """SQLAlchemy's reading of ``url``, or ``None`` when it cannot read it."""
    try:
        return sqlalchemy.engine.make_url(url)
    except Exception:  # sqlalchemy.exc.ArgumentError, or a malformed port
        return None


def _hidden_host(parsed: URL) -> tuple[str | None, str | None]:
    """``(password tail, real host)`` when an unencoded ``@`` split the password.

    ``user:p@ss@db`` parses as password ``p``, host ``ss@db``: the tail ``ss`` belongs
    to the password.
    """
    host = parsed.host
    if host is not None and "@" in host:
        tail, real = host.rsplit("@", 1)
        return tail, real
    return None, host


def url_secrets(url: str | None) -> list[str]:
    """Every secret in ``url``, longest first, as it may appear in text.

    Each password SQLAlchemy parses (user-info and ``password=`` query values), the
    whole password when an unencoded ``@`` split it, and their percent-encoded forms.
    An unparseable URL yields everything between ``://`` and its last ``@``.
    """
    if not url:
        return []
    parsed = _parse(url)
    found: list[str] = []
    if parsed is None:
        head, sep, rest = url.partition("://")
        userinfo = (rest if sep else head).rpartition("@")[0]
        if userinfo:
            found += [userinfo, userinfo.partition(":")[2]]
    else:
        tail, _ = _hidden_host(parsed)
        pw = parsed.password
        if pw is not None:
            found.append(str(pw))
            if tail is not None:
                found += [f"{pw}@{tail}", tail]
        for key in SECRET_QUERY_KEYS:
            values = parsed.query.get(key)
            if values is not None:
                found += [values] if isinstance(values, str) else list(values)
    out: set[str] = set()
    for s in found:
        if s:
            out.update((s, quote(s, safe=""), quote_plus(s, safe="")))
    return sorted(out, key=len, reverse=True)


def mask_url(url: str | None) -> str:
    """``url`` with every password replaced by ``***`` (``in-memory`` for ``None``).

    Built from SQLAlchemy's parse, so whatever it would send as a password is hidden;
    a URL it cannot parse is shown only from its last ``@`` on.
    """
    if url is None:
        return "in-memory"
    parsed = _parse(url)
    if parsed is None:
        head, sep, rest = url.partition("://")
        userinfo, at, hostpart = (rest if sep else head).rpartition("@")
        if not at:
            return url  # no user-info part: nothing in it is a password
        return f"{head}{sep}{HIDDEN}@{hostpart}" if sep else f"{HIDDEN}@{hostpart}"
    tail, host = _hidden_host(parsed)
    changes: dict[str, Any] = {}
    if parsed.password is not None or tail is not None:
        changes["password"] = HIDDEN
    if tail is not None:
        changes["host"] = host
    query = dict(parsed.query)
    for key in SECRET_QUERY_KEYS:
        if key in query:
            query[key] = HIDDEN
    if query != dict(parsed.query):
        changes["query"] = query
    if not changes:
        return url
    shown = parsed.set(**changes).render_as_string(hide_password=False)
    # the renderer percent-encodes the placeholder; show it plainly
    return shown.replace(quote(HIDDEN, safe=""), HIDDEN)


def mask_text(text: str, url: str | None) -> str:
    """``text`` with ``url`` and every secret in it (wherever it appears) replaced.

    Never calls itself (through :func:`mask_url`): an unparseable URL without ``@``
    (``--storage foo``) holds no secret and is shown as written."""
    if not url:
        return text
    shown = mask_url(url)
    if shown != url:
        text = text.replace(url, shown)
    for secret in url_secrets(url):
        text = text.replace(secret, HIDDEN)
    return text


def check_url(url: str) -> None:
    """Refuse a storage URL that cannot mean what it says, before connecting.

    Raises :class:`InputError` (field ``--storage``), the URL masked, when SQLAlchemy
    cannot parse it, when an unencoded ``@`` splits its password, or when an SQLite URL
    names no file (``sqlite:///`` would silently be an in-memory database).
    """
    parsed = _parse(url)
    if parsed is None:
        raise ParameterError(
            "storage",
            f"{mask_url(url)!r} is not a URL SQLAlchemy can read "
            "(sqlite:///file.db, postgresql://user:password@host:5432/db)",
        )
    if _hidden_host(parsed)[0] is not None:
        raise ParameterError(
            "storage",
            f"{mask_url(url)}: the password contains an unencoded '@'; write it as %40",
        )
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, ""):
        raise ParameterError(
            "storage",
            f"{mask_url(url)} names no database file: give a path (sqlite:///study.db), "
            "or leave --storage out for an in-memory study",
        )


def _sqlite_connect(path: str) -> sqlite3.Connection:
    """An SQLite connection in write-ahead-log mode.

    With WAL, ``synchronous=NORMAL`` commits without waiting for the disk yet a
    killed process still loses nothing it committed (only a power cut can); Optuna
    commits once per parameter, so this is what makes SQLite studies usable.
    """
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


def open_storage(url: str | None) -> RDBStorage | None:
    """An Optuna storage for ``url``: ``None`` (or ``memory``) is in-memory.

    Workers write only finished trials (see :class:`allocator.search.study.StudyMirror`),
    so a killed worker leaves nothing half-written.
    """
    if url is None or url in ("memory", "in-memory"):
        return None
    if not url.strip():
        raise ParameterError(
            "storage", "is empty: give a URL, or leave --storage out for an in-memory study"
        )
    if "://" not in url:
        raise ParameterError(
            "storage", f"{mask_url(url)!r} is not a URL (sqlite:///file.db, postgresql://...)"
        )
    check_url(url)

    url = with_driver(url)
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs = {"connect_args": {"timeout": 60}}
        if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
            kwargs = {"creator": functools.partial(_sqlite_connect, url[len("sqlite:///") :])}
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    except Exception as exc:  # SQLAlchemy / driver errors carry the URL: mask it
        raise ParameterError(
            "storage", f"cannot open {mask_url(url)}: {reason(exc, url)}"
        ) from None


def database_error(exc: BaseException) -> BaseException | None:
    """The database error behind ``exc``: SQLAlchemy's (the driver's, wrapped), else
    Optuna's ``StorageInternalError`` (which wraps one), else ``None``."""
    seen: BaseException | None = exc
    found: BaseException | None = None
    while seen is not None:
        if isinstance(seen, sqlalchemy.exc.SQLAlchemyError):
            return seen
        if isinstance(seen, optuna.exceptions.StorageInternalError) and found is None:
            found = seen
        seen = seen.__cause__ or seen.__context__
    return found


def reason(exc: BaseException, url: str | None) -> str:
    """The first line of the database error behind ``exc``, every secret of ``url`` masked."""
    cause = database_error(exc) or exc
    text = str(cause).strip()
    return mask_text(text.splitlines()[0] if text else type(cause).__name__, url)


__all__ = [
    "HIDDEN",
    "SECRET_QUERY_KEYS",
    "check_url",
    "database_error",
    "mask_text",
    "mask_url",
    "open_storage",
    "reason",
    "url_secrets",
    "with_driver",
]
