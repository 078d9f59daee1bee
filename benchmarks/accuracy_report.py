"""The report of ``benchmarks/accuracy.py``: the per-run markdown tables and the summary of
|error| % per metric (mean, median, runs)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence


def summary(rows: Sequence[dict], keys: Sequence[str]) -> dict:
    out = {}
    for k in keys:
        errs = [abs(r["errors"][k][2]) for r in rows if k in r["errors"] and r["errors"][k][2]]
        if errs:
            out[k] = {
                "mean_abs": statistics.fmean(errs),
                "median_abs": statistics.median(errs),
                "runs": len(errs),
            }
    return out


def _fmt(e: tuple | None) -> str:
    return "" if e is None or e[2] is None else f"{e[2]:+.1f}"


def markdown(rows: Sequence[dict], keys: Sequence[str], title: str) -> str:
    head = "| family | run | load | " + " | ".join(keys) + " |"
    lines = [f"### {title}", "", head, "|" + "---|" * (len(keys) + 3)]
    for r in rows:
        cells = [_fmt(r["errors"].get(k)) for k in keys]
        lines.append(f"| {r['family']} | {r['run']} | {r['load']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_md(s: Mapping[str, Mapping[str, dict]], keys: Sequence[str]) -> str:
    lines = ["| mode | subset | " + " | ".join(keys) + " |", "|" + "---|" * (len(keys) + 2)]
    for name, sub in s.items():
        cells = [
            f"{sub[k]['mean_abs']:.1f} / {sub[k]['median_abs']:.1f} ({sub[k]['runs']})"
            if k in sub else ""
            for k in keys
        ]  # fmt: skip
        mode, _, subset = name.partition(":")
        lines.append(f"| {mode} | {subset} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = ["markdown", "summary", "summary_md"]
