"""The contract every estimate reader keeps (docs/design.md §8.9), run on each one the
registry (:data:`allocator.estimate.READERS`) holds.

To add a reader: register it (``allocator.estimate.register``) and give it an example
here (:data:`EXAMPLES`: name → a function writing a small input of known counts into a
folder and returning what a read of it must give); a registered reader without one fails
:func:`test_every_reader_has_an_example`. Every reader then

- reads its example into the counts it holds (:func:`check_counts`: whole, non-negative,
  ``successes <= trials_low <= trials``, acceptance and interval in [0, 1], named as the
  reader says, the same on a second read), printing nothing (:func:`read_quietly`);
- refuses an empty file, garbage and near misses of its own format with an
  :class:`~allocator.exceptions.InputError` naming the file, quoting no more of it than
  :data:`~allocator.estimate.base.EXCERPT_CHARS` characters (:func:`check_refuses`).

The checks are functions so that a reader breaking them can be shown to fail them
(``tests/unit/estimate/test_registry.py``).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from allocator.estimate import (
    FORMAT_OPTIONS,
    FORMATS,
    NAMED_FORMATS,
    READERS,
    Estimate,
    Reader,
    ReadOptions,
    check_options,
    format_options,
    get_reader,
)
from allocator.estimate.base import EXCERPT_CHARS, FORMAT_SPECIFIC
from allocator.exceptions import InputError, ParameterError
from tests.support.synthetic_logs import (
    sglang_decode_line,
    sglang_response,
    simulate_chain,
    simulate_outcomes,
    vllm_exposition,
    vllm_log_line,
    write_outcomes_csv,
)


@dataclass
class Example:
    """An input of known counts: ``counts`` maps each drafter the read must name to
    ``(successes, trials)`` at its first positions (``None``: the format gives no counts,
    one acceptance only)."""

    path: Path
    options: ReadOptions
    counts: dict[str, tuple[list[int], list[int]] | None] = field(default_factory=dict)


def outcomes_example(folder: Path) -> Example:
    """Two correlated drafters, 300 rounds of up to 4 positions, as a CSV outcome log."""
    rng = np.random.default_rng(7)
    acc = [[0.8, 0.7, 0.65, 0.6], [0.5, 0.45, 0.45, 0.4]]
    corr = np.array([[1.0, 0.4], [0.4, 1.0]])
    rounds, positions, outcomes = simulate_outcomes(rng, acc, corr, 300, 4)
    path = folder / "outcomes.csv"
    write_outcomes_csv(path, ["eagle", "ngram"], rounds, positions, outcomes)
    counts = {}
    for i, name in enumerate(["eagle", "ngram"]):
        at = [positions == j for j in range(1, 5)]
        counts[name] = (
            [int(outcomes[m, i].sum()) for m in at],
            [int(m.sum()) for m in at],
        )
    return Example(path, ReadOptions(out=folder / "p.yaml", errors="independent"), counts)


def vllm_metrics_example(folder: Path) -> Example:
    """One drafter served by two engines: their counters are summed."""
    rng = np.random.default_rng(3)
    a = simulate_chain(rng, [0.8, 0.7, 0.6], 400, 3)
    b = simulate_chain(rng, [0.8, 0.7, 0.6], 250, 3)
    path = folder / "metrics.prom"
    path.write_text(vllm_exposition({"llama-eagle": [(400, a), (250, b)]}))
    per_pos = [int(x) for x in a + b]
    return Example(
        path, ReadOptions(out=folder / "p.yaml"), {"llama-eagle": (per_pos, [650, *per_pos[:-1]])}
    )


def vllm_log_example(folder: Path) -> Example:
    """Two logging intervals whose rates print exactly (3 decimals), every draft full."""
    lines = [vllm_log_line(1000, np.array([800, 560, 392])), vllm_log_line(500, [400, 300, 200])]
    path = folder / "vllm.log"
    path.write_text("INFO starting\n" + "\n".join(lines) + "\n")
    counts = {"ngram": ([1200, 860, 592], [1500, 1200, 860])}
    return Example(path, ReadOptions(out=folder / "p.yaml", drafter="ngram"), counts)


def _vllm_response(accepted: list[int], k: int) -> dict:
    """A chat response with ``metrics.speculative_decoding`` (vLLM 0.33.0's per-request
    metrics, ``detailed``) of steps accepting ``accepted`` drafts of ``k`` each."""
    hist = np.bincount(np.asarray(accepted), minlength=k + 1).tolist()
    m = {
        "mean_acceptance_length": 1.0 + sum(accepted) / len(accepted),
        "draft_acceptance_rate": sum(accepted) / (k * len(accepted)),
        "acceptance_histogram": hist,
        "num_spec_steps": len(accepted),
        "num_accepted_draft_tokens": sum(accepted),
        "num_draft_tokens": k * len(accepted),
        "num_spec_tokens": k,
        "per_step_accepted": accepted,
        "per_step_drafted": [k] * len(accepted),
    }
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "..."}}],
        "metrics": {"speculative_decoding": m},
    }


def vllm_requests_example(folder: Path) -> Example:
    """Twenty requests of 6 full steps (k = 3) each."""
    rng = np.random.default_rng(5)
    steps = [[int(a) for a in rng.integers(0, 4, 6)] for _ in range(20)]
    path = folder / "requests.jsonl"
    path.write_text("".join(json.dumps(_vllm_response(s, 3)) + "\n" for s in steps))
    flat = np.concatenate(steps)
    counts = {
        "draft": (
            [int((flat >= j).sum()) for j in (1, 2, 3)],
            [int((flat >= j - 1).sum()) for j in (1, 2, 3)],
        )
    }
    return Example(path, ReadOptions(out=folder / "p.yaml"), counts)


def sglang_requests_example(folder: Path) -> Example:
    """Three responses of a chain of k = 3 (their histograms summed)."""
    hists = [[10, 20, 30, 40], [5, 15, 25, 15], [1, 2, 3, 4]]
    path = folder / "sglang.jsonl"
    path.write_text("".join(json.dumps(sglang_response(h, k=3)) + "\n" for h in hists))
    total = np.sum(hists, axis=0)
    tail = np.cumsum(total[::-1])[::-1]
    counts = {"eagle3": ([int(x) for x in tail[1:]], [int(x) for x in tail[:-1]])}
    return Example(path, ReadOptions(out=folder / "p.yaml", drafter="eagle3"), counts)


def sglang_log_example(folder: Path) -> Example:
    """Eight ``accept len`` lines of a chain of k = 3: one acceptance, no counts."""
    lengths = [3.1, 2.9, 3.3, 3.0, 2.8, 3.2, 3.05, 2.95]
    path = folder / "decode.log"
    path.write_text(
        "".join(sglang_decode_line(x, 8, 40 * (i + 1)) + "\n" for i, x in enumerate(lengths))
    )
    return Example(path, ReadOptions(out=folder / "p.yaml", k=3), {"draft": None})


#: reader name → writer of its example
EXAMPLES: dict[str, Callable[[Path], Example]] = {
    "outcomes": outcomes_example,
    "vllm-metrics": vllm_metrics_example,
    "vllm-log": vllm_log_example,
    "vllm-requests": vllm_requests_example,
    "sglang-requests": sglang_requests_example,
    "sglang-log": sglang_log_example,
}

#: A stretch of text no message may quote in full.
MARK = "ZQ" * 3000
#: The longest run of :data:`MARK` a message may hold (a short prefix).
ALLOWED = "ZQ" * (EXCERPT_CHARS // 2 + 1)


def garbage() -> dict[str, str]:
    """Inputs no reader may take: empty, and text of no format holding :data:`MARK`."""
    return {
        "empty": "",
        "blank": "\n\n   \n",
        "text": MARK + "\nhello world\n" * 3,
        "control": "\x01\x02garbage\x7f" * 200 + MARK,
        "json": json.dumps({"a": MARK}) + "\n",
    }


def near_misses(example: str) -> dict[str, str]:
    """The example's own text with :data:`MARK` in its first line, in place of its numbers
    (bare and quoted), and in place of its quoted names: a reader may read some of them
    (a comment line, a long model name), but what it refuses, it refuses as garbage."""
    first, _, rest = example.partition("\n")
    return {
        "first line": first + MARK + "\n" + rest,
        "numbers": re.sub(r"\d+(\.\d+)?", MARK, example),
        "quoted numbers": re.sub(r"\d+(\.\d+)?", f'"{MARK}"', example),
        "names": re.sub(r'"[A-Za-z_.:/-]+"', f'"{MARK}"', example),
    }


def canonical(est: Estimate) -> str:
    """Everything a read returns, as one string (for comparing two reads)."""

    def counts(d) -> dict:
        return {
            "name": d.name,
            "successes": d.successes.tolist(),
            "trials": d.trials.tolist(),
            "trials_low": None if d.trials_low is None else d.trials_low.tolist(),
            "acceptance": np.asarray(d.acceptance).tolist(),
            "interval": [np.asarray(x).tolist() for x in d.interval],
        }

    return json.dumps(
        {
            "source": est.source,
            "drafters": [counts(d) for d in est.drafters],
            "workloads": [
                (w.name, w.weight, [counts(d) for d in w.drafters]) for w in est.workloads
            ],
            "k_max": est.k_max,
            "convention": est.convention,
            "errors": est.errors,
            "notes": est.notes,
            "report": est.report,
        },
        sort_keys=True,
        default=str,
    )


def read_quietly(reader: Reader, path: Path, options: ReadOptions) -> Estimate:
    """``reader.read(path, options)``, checking that it prints nothing."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            return reader.read(path, options)
    finally:
        printed = out.getvalue() + err.getvalue()
        assert not printed, f"{reader.name} printed {len(printed):,} characters"


def check_declaration(name: str, reader: Reader) -> None:
    """The reader says who it is: its registry key, what it reads, the options it takes."""
    assert isinstance(reader, Reader), reader
    assert reader.name == name and reader.reads.strip()
    assert set(reader.options) <= set(FORMAT_SPECIFIC), reader.options
    assert get_reader(name) is reader


def check_counts(reader: Reader, example: Example) -> Estimate:
    """Read ``example`` and check what comes back against it and the contract."""
    est = read_quietly(reader, example.path, example.options)
    assert isinstance(est, Estimate)
    assert est.source == reader.name
    names = [d.name for d in est.drafters]
    assert names == list(example.counts), names
    if not reader.names_drafters:
        assert names == [example.options.drafter]
    every = list(est.drafters) + [d for w in est.workloads for d in w.drafters]
    for d in every:
        assert d.positions >= 1, d.name
        s, n = np.asarray(d.successes), np.asarray(d.trials)
        assert s.shape == n.shape and s.dtype.kind in "iu" and n.dtype.kind in "iu"
        low = n if d.trials_low is None else np.asarray(d.trials_low)
        assert low.shape == n.shape and low.dtype.kind in "iu"
        assert (s >= 0).all() and (s <= low).all() and (low <= n).all(), d.name
        acc = np.asarray(d.acceptance, float)
        lo, hi = (np.asarray(x, float) for x in d.interval)
        assert acc.shape == lo.shape == hi.shape == (d.positions,)
        assert np.isfinite(acc).all() and ((acc > 0) & (acc <= 1)).all(), acc
        assert ((lo >= 0) & (lo <= acc + 1e-12) & (acc <= hi + 1e-12) & (hi <= 1)).all()
    for d in est.drafters:
        expected = example.counts[d.name]
        if expected is None:
            assert d.summary is not None and d.trials.size == 0
            continue
        j = d.positions
        assert d.successes.tolist() == expected[0][:j] and d.trials.tolist() == expected[1][:j]
    if est.workloads:
        assert abs(sum(w.weight for w in est.workloads) - 1.0) < 1e-9
    assert est.k_max is None or est.k_max >= 1
    assert all(isinstance(n, str) for n in est.notes)
    json.dumps(est.report, default=str)
    assert canonical(read_quietly(reader, example.path, example.options)) == canonical(est)
    return est


def _refused(reader: Reader, example: Example, path: Path, label: str) -> None:
    """What a refusal must be: an InputError (not a ParameterError: the options are
    fine) naming the file, a short message quoting no long stretch of it."""
    try:
        read_quietly(reader, path, example.options)
    except InputError as exc:
        where = f"{reader.name}, {label} input"
        assert not isinstance(exc, ParameterError), f"{where}: {exc}"
        assert exc.field and (path.name in str(exc) or exc.field == "INPUT"), f"{where}: {exc}"
        assert ALLOWED not in str(exc), f"{where}: quotes {len(str(exc)):,} characters"
        assert len(str(exc)) < 600, f"{where}: a message of {len(str(exc)):,} characters"
    else:
        raise AssertionError(f"{reader.name} read the {label} input")


def check_refuses(reader: Reader, example: Example, folder: Path) -> None:
    """Every :func:`garbage` input is refused (:func:`_refused`); every near miss
    (:func:`near_misses`) is read or refused so."""
    for label, bad in garbage().items():
        path = folder / f"bad-{label.replace(' ', '-')}{example.path.suffix}"
        path.write_text(bad)
        _refused(reader, example, path, label)
    for label, bad in near_misses(example.path.read_text()).items():
        path = folder / f"near-{label.replace(' ', '-')}{example.path.suffix}"
        path.write_text(bad)
        try:
            read_quietly(reader, path, example.options)
        except InputError:
            _refused(reader, example, path, label)


@pytest.fixture(params=list(READERS))
def name(request) -> str:
    return request.param


def _example(name: str, folder: Path) -> Example:
    if name not in EXAMPLES:
        pytest.fail(f"no example for the registered reader {name!r}")
    return EXAMPLES[name](folder)


def test_every_reader_has_an_example():
    missing = set(READERS) - set(EXAMPLES)
    assert not missing, f"registered readers without an example: {sorted(missing)}"


def test_the_registry_is_the_formats():
    assert FORMATS == tuple(READERS)
    assert NAMED_FORMATS == tuple(n for n, r in READERS.items() if r.names_drafters)
    assert FORMAT_OPTIONS == format_options()
    with pytest.raises(ParameterError) as exc:
        get_reader("no-such-format")
    assert exc.value.field == "format" and all(n in exc.value.message for n in READERS)


def test_a_reader_declares_itself(name):
    check_declaration(name, READERS[name])


def test_a_reader_reads_its_example(name, tmp_path):
    check_counts(READERS[name], _example(name, tmp_path))


def test_a_reader_refuses_garbage_naming_the_file(name, tmp_path):
    check_refuses(READERS[name], _example(name, tmp_path), tmp_path)


def test_options_are_taken_by_the_readers_that_list_them(name, tmp_path):
    """``check_options`` takes the format-specific options a reader lists and refuses,
    naming the option and the formats that take it, every other one."""
    values = {
        "errors": "independent",
        "convention": "paper",
        "k": 3,
        "topk": 2,
        "adaptive": True,
        "adaptive_steps": [1, 3],
    }
    assert set(values) == set(FORMAT_SPECIFIC)
    reader = READERS[name]
    taken = {o: values[o] for o in reader.options}
    assert check_options(name, tmp_path / "p.yaml", **taken).fmt == name
    for option in FORMAT_SPECIFIC:
        if option in reader.options:
            continue
        with pytest.raises(ParameterError) as exc:
            check_options(name, tmp_path / "p.yaml", **{option: values[option]})
        formats = format_options()[option]
        assert exc.value.field == option and name not in formats
        assert exc.value.message == f"applies to --format {' or '.join(formats)} only"
