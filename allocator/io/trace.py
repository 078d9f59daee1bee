"""The Azure LLM inference trace 2023 as the simulator's :class:`~allocator.sim.Requests`.

The reader takes the Azure LLM inference trace 2023 format as published
(``TIMESTAMP,ContextTokens,GeneratedTokens``, timestamps such as
``2023-11-16 18:15:46.6805900``): arrival = timestamp minus the first row's, divided by
``speedup``; prompt tokens = ``ContextTokens``; output tokens = ``GeneratedTokens``. This
is what vLLM's ``timed_trace`` dataset does with per-request timestamps
(``vllm/benchmarks/datasets/datasets.py``, ``TimedTrace``, line 1417: timestamps times
``--timed-trace-sec-multiplier``, sent at that offset from the start by ``get_request``
with ``self_timed``), here from the CSV directly and relative to the first row. A
``TIMESTAMP`` that is a plain number is seconds since the epoch. An error quotes at most a
short, escaped prefix of what it could not read, anything shaped like ``KEY=VALUE`` masked
(a file such as ``/proc/self/environ`` is not echoed).

**What rows share** (optional columns, for prefix caching and the affinity routers):

* ``prefix_id`` with ``prefix_tokens``: the row's prompt starts with ``prefix_tokens``
  tokens (``0 .. ContextTokens``) of the prefix ``prefix_id`` names (any non-empty text);
  rows naming one prefix share its first ``min`` of their ``prefix_tokens`` tokens, the rest
  of each row (prompt and output) its own. This is the shape of the shared-prefix
  benchmarks, a prefix per group (inference-perf's ``shared_prefix`` data, SGLang's
  ``generated-shared-prefix`` dataset), as a trace's columns.
* ``session_id``: rows naming one session (any non-empty text) are its turns, in file
  order. A turn's prompt starts with the previous turn's whole sequence (its prompt and
  answer), as a chat client resends the conversation, as far as the prompt reaches
  (``min(ContextTokens, previous ContextTokens + GeneratedTokens)`` tokens shared), then
  its own tokens. AIPerf's Mooncake-style traces name multi-turn sessions the same way
  (``session_id``), where Mooncake's own trace (kvcache-ai/Mooncake
  ``mooncake_trace.jsonl``) gives each request's ``hash_ids``, one id per 512-token
  block; a trace in that form can be converted to these columns when its shared blocks are
  prefixes. The rows are replayed at their own times (open loop: a turn is not held back
  until the previous one finishes, so a turn sent early finds less cached). The file is
  in time order (a ``TIMESTAMP`` going back is refused), so a session's turns are too.

They set :class:`~allocator.sim.requests.Requests`' ``content`` (the segments that
prefix caching hashes) and keys: ``prefix_group`` (the prefix, or the session: a session's
first turn is its own content, which every later turn starts with) and ``session``; both
numbered ``0, 1, ...`` in order of first appearance. A key column with an empty value, a
``prefix_id`` without ``prefix_tokens`` (or the reverse), ``prefix_tokens`` that is not an
integer in ``0 .. ContextTokens``, and ``prefix_id`` beside ``session_id`` are refused.
"""

from __future__ import annotations

import csv
import itertools
import math
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..exceptions import ParameterError
from ..sim.requests import MAX_TOKENS, Requests, TokenContent
from ..validate import rate as positive
from ..validate import whole
from .inputs import MAX_LOG_BYTES, check_regular_file
from .quoting import excerpt, mask_secrets

#: Column names of the Azure LLM inference trace 2023.
TRACE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
#: Optional columns naming what rows share (module docstring).
SHARE_COLUMNS = ("prefix_id", "prefix_tokens", "session_id")
#: Rows parsed at a time when reading a trace (memory stays bounded by this and the output).
TRACE_CHUNK_ROWS = 65_536
#: Most segments the rows' shared content may hold (a session's turn ``t`` holds up to
#: ``t + 1``, so sessions of very many turns grow it quadratically): 16 bytes each.
MAX_SEGMENTS = 20_000_000


def read_trace(
    path: str | Path,
    num_prompts: int | None = None,
    speedup: float = 1.0,
    *,
    field: str = "trace",
    shared: bool = True,
) -> Requests:
    """Requests from a CSV in the Azure LLM inference trace format.

    Columns ``TIMESTAMP`` (``YYYY-MM-DD HH:MM:SS[.fraction]``, any order of columns, other
    columns ignored), ``ContextTokens`` (prompt tokens) and ``GeneratedTokens`` (output
    tokens), both positive integers. Arrival ``i`` is ``(timestamp_i - timestamp_0) /
    speedup`` seconds. ``num_prompts``: the first ``N`` rows (all when ``None``). Read in
    chunks of :data:`TRACE_CHUNK_ROWS` rows, stopping after ``num_prompts`` rows. With
    ``shared`` (default), the optional columns ``prefix_id``/``prefix_tokens`` or
    ``session_id`` set what the rows share and their keys (module docstring); without it
    they are ignored (lengths alone are read).

    Bad input raises :class:`~allocator.exceptions.ParameterError` on ``field`` (the
    parameter that named the file: ``trace``, ``lengths_from``) naming the row
    (1-based data row, the header is row 0) and column: a missing column, an unparsable or
    decreasing timestamp, a token count that is not a positive integer, no data rows, an
    empty or blank ``path``.
    """
    if num_prompts is not None:
        num_prompts = whole(num_prompts, "num_prompts", lo=1)
    factor = positive(speedup, "speedup")
    if not str(path).strip():  # Path("") is ".", which would be refused as a directory
        raise ParameterError(field, "is empty: give a file name")
    p = check_regular_file(path, field, MAX_LOG_BYTES)
    try:
        handle = p.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise ParameterError(field, f"cannot read {p}: {exc.strerror or exc}") from None
    stamps: list[np.ndarray] = []
    prompts: list[np.ndarray] = []
    outputs: list[np.ndarray] = []
    limit = num_prompts if num_prompts is not None else math.inf
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise ParameterError(field, f"{p} is empty (no header)") from None
        except (csv.Error, UnicodeDecodeError) as exc:
            raise ParameterError(
                field, f"{p}: unreadable header: {mask_secrets(str(exc))}"
            ) from None
        names = [h.strip() for h in header]
        missing = [c for c in TRACE_COLUMNS if c not in names]
        if missing:
            raise ParameterError(
                field,
                f"{p}: missing column {', '.join(missing)} (header: {excerpt(','.join(names))})",
            )
        cols = [names.index(c) for c in TRACE_COLUMNS]
        extra = {c: names.index(c) for c in SHARE_COLUMNS if shared and c in names}
        _check_share_columns(extra, p, field)
        width = max(cols + list(extra.values())) + 1
        raw: dict[str, list[str]] = {c: [] for c in extra}
        done = 0
        previous: np.datetime64 | None = None
        while done < limit:
            want = int(min(TRACE_CHUNK_ROWS, limit - done))
            rows: list[list[str]] = []
            try:
                for row in reader:
                    if not row or all(not x.strip() for x in row):
                        continue
                    rows.append(row)
                    if len(rows) == want:
                        break
            except (csv.Error, UnicodeDecodeError) as exc:
                raise ParameterError(
                    field, f"{p}: row {done + len(rows) + 1}: {mask_secrets(str(exc))}"
                ) from None
            if not rows:
                break
            ts, pr, out = _parse_chunk(rows, cols, width, done, p, field)
            if previous is not None and ts[0] < previous:
                raise ParameterError(
                    field, f"{p}: row {done + 1}: TIMESTAMP goes back in time (not monotone)"
                )
            back = np.flatnonzero(ts[1:] < ts[:-1])
            if back.size:
                raise ParameterError(
                    field,
                    f"{p}: row {done + int(back[0]) + 2}: TIMESTAMP goes back in time "
                    "(not monotone)",
                )
            previous = ts[-1]
            for c, j in extra.items():
                values = [row[j].strip() for row in rows]
                empty = [i for i, v in enumerate(values) if not v]
                if empty:
                    raise ParameterError(
                        field,
                        f"{p}: row {done + empty[0] + 1}: {c} is empty (with the column, "
                        "every row names one)",
                    )
                raw[c] += values
            stamps.append(ts)
            prompts.append(pr)
            outputs.append(out)
            done += len(rows)
    if not stamps:
        raise ParameterError(field, f"{p}: no data rows")
    ts_all = np.concatenate(stamps)
    seconds = (ts_all - ts_all[0]).astype(np.int64) / 1e9 / factor
    prompt, output = np.concatenate(prompts), np.concatenate(outputs)
    if "session_id" in raw:
        content, session = _sessions(raw["session_id"], prompt, output, p, field)
        return Requests(seconds, prompt, output, content, prefix_group=session, session=session)
    if "prefix_id" in raw:
        content, group = _prefixes(raw["prefix_id"], raw["prefix_tokens"], prompt, output, p,
                                   field)  # fmt: skip
        return Requests(seconds, prompt, output, content, prefix_group=group)
    return Requests(seconds, prompt, output)


def _check_share_columns(extra: dict[str, int], path: Path, field: str) -> None:
    """Refuse a ``prefix_id`` without ``prefix_tokens`` (or the reverse) and a prefix beside
    a session."""
    if ("prefix_id" in extra) != ("prefix_tokens" in extra):
        have, lack = (
            ("prefix_id", "prefix_tokens")
            if "prefix_id" in extra
            else ("prefix_tokens", "prefix_id")
        )
        raise ParameterError(field, f"{path}: column {have} needs column {lack} beside it")
    if "prefix_id" in extra and "session_id" in extra:
        raise ParameterError(
            field,
            f"{path}: columns prefix_id and session_id both name what rows share: give one",
        )


def _ids(values: list[str]) -> np.ndarray:
    """Names as ``(N,)`` int64 ids ``0, 1, ...`` in order of first appearance."""
    seen: dict[str, int] = {}
    return np.array([seen.setdefault(v, len(seen)) for v in values], dtype=np.int64)


def _prefixes(
    names: list[str],
    tokens: list[str],
    prompt: np.ndarray,
    output: np.ndarray,
    path: Path,
    field: str,
) -> tuple[TokenContent, np.ndarray]:
    """Rows sharing named prefixes (module docstring): ``(content, group)``."""
    group = _ids(names)
    n = prompt.size
    shared = np.empty(n, dtype=np.int64)
    for i, s in enumerate(tokens):
        try:
            v = int(s)
        except ValueError:
            v = -1
        if not 0 <= v <= int(prompt[i]):
            raise ParameterError(
                field,
                f"{path}: row {i + 1}: prefix_tokens must be an integer from 0 to the row's "
                f"ContextTokens {int(prompt[i]):,}, got {excerpt(s)}",
            )
        shared[i] = v
    g = int(group.max()) + 1
    ids = np.empty(2 * n, dtype=np.int64)
    lengths = np.empty(2 * n, dtype=np.int64)
    ids[0::2], lengths[0::2] = group, shared
    ids[1::2], lengths[1::2] = g + np.arange(n), prompt + output - shared
    keep = lengths > 0  # (a row with no prefix tokens has its own segment alone)
    counts = keep.reshape(n, 2).sum(axis=1)
    starts = np.concatenate(([0], np.cumsum(counts)))
    return TokenContent(ids[keep], lengths[keep], starts), group


def _sessions(
    names: list[str], prompt: np.ndarray, output: np.ndarray, path: Path, field: str
) -> tuple[TokenContent, np.ndarray]:
    """Rows as sessions' turns (module docstring): ``(content, session)``. Row ``i``'s own
    tokens are segment ``i``."""
    session = _ids(names)
    last: dict[int, tuple[list[int], list[int]]] = {}  # a session's latest whole sequence
    ids: list[int] = []
    lengths: list[int] = []
    starts = [0]
    for i, (s, p, o) in enumerate(zip(session.tolist(), prompt.tolist(), output.tolist(),
                                      strict=True)):  # fmt: skip
        seg_ids: list[int] = []
        seg_len: list[int] = []
        shared = 0
        before = last.get(s)
        if before is not None:
            for sid, n in zip(*before, strict=True):  # the previous sequence, cut at p
                if shared >= p:
                    break
                take = min(n, p - shared)
                seg_ids.append(sid)
                seg_len.append(take)
                shared += take
        seg_ids.append(i)
        seg_len.append(p + o - shared)
        last[s] = (seg_ids, seg_len)
        ids += seg_ids
        lengths += seg_len
        starts.append(len(ids))
        if len(ids) > MAX_SEGMENTS:
            raise ParameterError(
                field,
                f"{path}: row {i + 1}: the sessions' turns hold more than {MAX_SEGMENTS:,} "
                "shared segments (each turn repeats its session's earlier ones): take fewer "
                "rows or shorter sessions",
            )
    return TokenContent(np.array(ids), np.array(lengths), np.array(starts)), session


#: A number-only TIMESTAMP is read as seconds since the epoch (Unix time, a fraction
#: allowed), as traces exported by other tools write it; numpy alone would read
#: ``1700000000`` as the year 1700000000.
_EPOCH = re.compile(r"^[+]?\d+(\.\d*)?$")


def _epoch_seconds(raw: list[str]) -> np.ndarray | None:
    """``raw`` as ``datetime64[ns]`` when every entry is a plain non-negative number of
    seconds since the epoch (at most year 2262, numpy's nanosecond range); else ``None``."""
    if not raw or not all(_EPOCH.match(s) for s in raw):
        return None
    secs = np.array([float(s) for s in raw])
    if not np.all(secs < 9.2e9):  # datetime64[ns] holds up to 2262-04-11
        return None
    return (np.round(secs * 1e9).astype(np.int64)).astype("datetime64[ns]")


def _parse_chunk(
    rows: list[list[str]], cols: list[int], width: int, offset: int, path: Path, field: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One chunk of trace rows as (timestamps ``datetime64[ns]``, prompt, output) arrays."""
    for i, row in enumerate(rows):
        if len(row) < width:
            raise ParameterError(
                field, f"{path}: row {offset + i + 1}: {len(row)} fields, expected {width}"
            )
    raw_ts = [row[cols[0]].strip() for row in rows]
    ts = _epoch_seconds(raw_ts)
    if ts is None:
        try:
            ts = np.array(raw_ts, dtype="datetime64[ns]")
        except ValueError:
            ts = None
    if ts is None or np.isnat(ts).any():
        for i, s in enumerate(raw_ts):
            try:
                if not s or np.isnat(np.datetime64(s, "ns")):
                    raise ValueError
            except ValueError:
                raise ParameterError(
                    field,
                    f"{path}: row {offset + i + 1}: TIMESTAMP {excerpt(s)} is not a timestamp",
                ) from None
        raise AssertionError("unreachable")  # pragma: no cover
    counts = []
    for j, name in ((1, TRACE_COLUMNS[1]), (2, TRACE_COLUMNS[2])):
        raw = [row[cols[j]].strip() for row in rows]
        try:
            arr = np.array([int(x) for x in raw], dtype=np.int64)
        except (ValueError, OverflowError):
            arr = None
        if arr is None or arr.min() < 1 or arr.max() > MAX_TOKENS:
            for i, s in enumerate(raw):
                try:
                    ok = 1 <= int(s) <= MAX_TOKENS
                except ValueError:
                    ok = False
                if not ok:
                    raise ParameterError(
                        field,
                        f"{path}: row {offset + i + 1}: {name} must be a positive integer of "
                        f"at most {MAX_TOKENS:,} tokens, got {excerpt(s)}",
                    )
        assert arr is not None
        counts.append(arr)
    return ts, counts[0], counts[1]


def read_length_chunks(
    path: str | Path, *, field: str = "lengths_from"
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The prompt and output lengths of every row of a CSV, in file order: ``(prompt,
    output)``, two ``(m,)`` int64 arrays of tokens per chunk of at most
    :data:`TRACE_CHUNK_ROWS` rows (memory stays bounded by one chunk, whatever the file).

    Only ``ContextTokens`` and ``GeneratedTokens`` are read: a ``TIMESTAMP`` column is
    neither needed (a file of lengths alone is taken) nor read when present. Bad input
    raises :class:`~allocator.exceptions.ParameterError` on ``field`` as
    :func:`read_trace` does (a missing column, a token count that is not a positive
    integer of at most :data:`~allocator.sim.requests.MAX_TOKENS`, no data rows)."""
    if not str(path).strip():  # Path("") is ".", which would be refused as a directory
        raise ParameterError(field, "is empty: give a file name")
    p = check_regular_file(path, field, MAX_LOG_BYTES)
    try:
        handle = p.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise ParameterError(field, f"cannot read {p}: {exc.strerror or exc}") from None
    with handle:
        reader = csv.reader(handle)
        done = 0
        rows: list[list[str]] = []
        try:
            names = [h.strip() for h in next(reader)]
            wanted = TRACE_COLUMNS[1:]
            missing = [c for c in wanted if c not in names]
            if missing:
                raise ParameterError(
                    field,
                    f"{p}: missing column {', '.join(missing)} "
                    f"(header: {excerpt(','.join(names))})",
                )
            cols = [names.index(c) for c in wanted]
            for row in itertools.chain(reader, [None]):
                if row is not None and (
                    not row or (not row[0].strip() and all(not x.strip() for x in row))
                ):  # a blank row
                    continue
                if row is not None:
                    rows.append(row)
                if rows and (row is None or len(rows) == TRACE_CHUNK_ROWS):
                    yield _chunk_lengths(rows, cols, done, p, field)
                    done += len(rows)
                    rows = []
        except StopIteration:
            raise ParameterError(field, f"{p} is empty (no header)") from None
        except (csv.Error, UnicodeDecodeError) as exc:
            raise ParameterError(
                field, f"{p}: row {done + len(rows) + 1}: {mask_secrets(str(exc))}"
            ) from None
    if done == 0:
        raise ParameterError(field, f"{p}: no data rows")


def _chunk_lengths(
    rows: list[list[str]], cols: list[int], offset: int, path: Path, field: str
) -> tuple[np.ndarray, np.ndarray]:
    """One chunk's ``ContextTokens`` and ``GeneratedTokens`` columns as int64 arrays."""
    width = max(cols) + 1
    out = []
    for i, row in enumerate(rows):
        if len(row) < width:
            raise ParameterError(
                field, f"{path}: row {offset + i + 1}: {len(row)} fields, expected {width}"
            )
    for col, name in zip(cols, TRACE_COLUMNS[1:], strict=True):
        raw = [row[col].strip() for row in rows]
        try:
            arr = np.array([int(x) for x in raw], dtype=np.int64)
            ok = 1 <= arr.min() and arr.max() <= MAX_TOKENS
        except (ValueError, OverflowError):
            ok = False
        if not ok:
            i, s = next((i, s) for i, s in enumerate(raw) if not _whole_tokens(s))
            raise ParameterError(
                field,
                f"{path}: row {offset + i + 1}: {name} must be a positive integer of at most "
                f"{MAX_TOKENS:,} tokens, got {excerpt(s)}",
            )
        out.append(arr)
    return out[0], out[1]


def _whole_tokens(text: str) -> bool:
    try:
        return 1 <= int(text) <= MAX_TOKENS
    except ValueError:
        return False


__all__ = [
    "MAX_SEGMENTS",
    "SHARE_COLUMNS",
    "TRACE_CHUNK_ROWS",
    "TRACE_COLUMNS",
    "read_length_chunks",
    "read_trace",
]
