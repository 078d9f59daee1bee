"""Max or p-norm? The roofline fitted to the bundled measured tables, with held-out errors.

Run from the repository root::

    PYTHONPATH=. python tests/support/measured_fit.py

For each bundled table that gives a step time per row (``problems/measured/README.md``):
rows → step times (``step_ms = 1000 · b · E / tokens_per_s``, ``E`` the row's
``mean_accepted`` or, where the table has none, the problem's acceptance), then four
forms fitted by :func:`~allocator.calibration.roofline_fit.fit_roofline`:

- ``today``: calibrate's form, ``max(v0 + v1·b, c·b·t) + k·Σ(d0 + d1·b) + overhead``
  (the roofline without specs, :meth:`RooflinePredictor.from_linear`);
- ``max``: the roofline from the verifier's specs (hardware table and config fields),
  form "max", efficiencies and overheads fitted;
- ``pnorm``: the same with the smooth form, ``p`` fitted;
- ``max-dense``: ``max`` with the mixture-of-experts coverage switched off (the verifier
  read as a dense model of its active parameters), to show that term alone.

Errors are on tokens/s, ``100 · (step_meas / step_pred − 1)``, in-sample and held out by
batch size (leave-one-batch-out: every row at one batch size held out, the rest fitted)
and by ``k`` (leave-one-k-out). A held-out row is reported only when the fit without it
still determines every parameter it needs; otherwise it counts as "not predictable".

The SpecForge table is fitted twice: all rows, and the rows at batch <= 16 only (its runs
used 20 prompts, so at batch 32 and 64 no more than 20 sequences can have been in flight
and ``1000 · b · E / tokens_per_s`` is not a step time there).

Tables left out: ``leviathan2023-table2.csv`` (TPU-v4, not in the GPU table, and relative
units at batch 1) and ``sglang-pr22246-steps.csv`` (no baseline and no acceptance length:
its rows give no step time).
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import yaml

from allocator.calibration.roofline_fit import fit_roofline
from allocator.core.hardware import Hardware
from allocator.core.model_spec import ModelSpec
from allocator.model.steptime.base import StepInputs, step_inputs
from allocator.model.steptime.roofline import RooflinePredictor

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "problems" / "measured"

# Architecture fields of the verifiers, from their Hugging Face config.json files
# (meta-llama/Llama-3.1-8B-Instruct and Qwen/Qwen3-30B-A3B).
LLAMA_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
QWEN3_30B_A3B = {
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


@dataclass
class Case:
    """One table: its rows as step inputs, measured step times, drafter names, specs."""

    name: str
    rows: StepInputs
    step_ms: np.ndarray
    drafters: tuple[str, ...]
    hardware: Hardware
    model: ModelSpec
    note: str


def _read(path: Path) -> list[dict[str, str]]:
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return list(csv.DictReader(lines))


def _bonus_e(acceptance, k: int) -> float:
    a = np.asarray(acceptance, float).reshape(-1)
    a = np.resize(a, k) if a.size == 1 else a[:k]
    return float(1.0 + np.cumprod(a).sum()) if k else 1.0


def load_case(
    csv_name: str,
    problem: str,
    hardware: Hardware,
    model: ModelSpec,
    note: str,
    max_batch: float = np.inf,
) -> Case:
    rows = [r for r in _read(MEASURED / csv_name) if float(r["batch"]) <= max_batch]
    spec = yaml.safe_load((MEASURED / problem).read_text())
    drafters = tuple(d["name"] for d in spec["drafters"])
    acceptance = {d["name"]: d["acceptance"] for d in spec["drafters"]}
    members = np.zeros((len(rows), len(drafters)), bool)
    k = np.zeros(len(rows), int)
    b = np.zeros(len(rows))
    step = np.zeros(len(rows))
    for r, row in enumerate(rows):
        names = [n for n in row["drafters"].split("+") if n]
        for n in names:
            members[r, drafters.index(n)] = True
        k[r] = int(row["k"])
        b[r] = float(row["batch"])
        given = row.get("mean_accepted") or ""
        e = float(given) if given else (_bonus_e(acceptance[names[0]], k[r]) if names else 1.0)
        step[r] = 1000.0 * b[r] * e / float(row["tokens_per_s"])
    x = step_inputs(members, k, k * members.sum(1) + 1, b, 0.0, 0.0)
    label = csv_name if max_batch == np.inf else f"{csv_name} (batch <= {max_batch:g})"
    return Case(label, x, step, drafters, hardware, model, note)


def cases() -> list[Case]:
    llama = ModelSpec.from_hf_config(LLAMA_8B, name="Llama-3.1-8B")
    qwen = ModelSpec.from_hf_config(QWEN3_30B_A3B, name="Qwen3-30B-A3B")
    return [
        load_case(
            "sglang-specforge339-2xh100.csv",
            "qwen3-30b-a3b-eagle3.yaml",
            Hardware.from_fields("h100-sxm", 2),
            qwen,
            "2 x H100 (TP 2) as stated",
        ),
        load_case(
            "sglang-specforge339-2xh100.csv",
            "qwen3-30b-a3b-eagle3.yaml",
            Hardware.from_fields("h100-sxm", 2),
            qwen,
            "rows at batch <= 16 only: the runs used 20 prompts, so at batch 32 and 64 "
            "at most 20 sequences were in flight and 1000 * b * E / tokens_per_s is not a "
            "step time",
            max_batch=16,
        ),
        load_case(
            "vllm-issue20780-bs1.csv",
            "llama31-8b-eagle.yaml",
            Hardware.from_fields("h100-sxm"),
            llama,
            "hardware not stated by the source: 1 x H100 assumed (mem_eff absorbs it)",
        ),
        load_case(
            "vllm-pr16937-h100-bs1.csv",
            "llama31-8b-eagle.yaml",
            Hardware.from_fields("h100-sxm"),
            llama,
            "1 x H100 as stated; E from the problem's acceptance",
        ),
    ]


def _model(case: Case, form: str) -> RooflinePredictor:
    drafters = {n: None for n in case.drafters}
    if form == "today":
        return RooflinePredictor.from_linear(
            float(case.step_ms.min()), 0.0, 0.0, 0.0, [(n, 0.0, 0.0) for n in case.drafters]
        )
    model = case.model
    if form == "max-dense":
        model = replace(
            model,
            params=model.active_params,
            experts=0,
            experts_per_token=0,
            expert_params=0.0,
            active_params=0.0,
        )
    return RooflinePredictor.from_specs(
        case.hardware,
        model,
        drafters,
        form="pnorm" if form == "pnorm" else "max",
        mem_eff=0.5,
        compute_eff=0.5,
    )


def _starts(case: Case, form: str) -> list[dict[str, float]]:
    if form != "today":
        return [{"mem_eff": 0.2}, {"mem_eff": 0.9, "compute_eff": 0.05}]
    x = case.rows
    heavy = x.decode_seqs * x.verified
    return [{"token_ms": float(np.min(case.step_ms / heavy))}]


def fit(case: Case, form: str, keep: np.ndarray):
    model = _model(case, form)
    rows = case.rows.take(keep)
    return fit_roofline(model, rows, case.step_ms[keep], starts=_starts(case, form))


def errors_pct(case: Case, model: RooflinePredictor, rows: np.ndarray) -> np.ndarray:
    pred = model.step_ms_of(case.rows.take(rows))
    return 100.0 * (case.step_ms[rows] / pred - 1.0)


def _log_jacobian(model: RooflinePredictor, rows: StepInputs, names, scale) -> np.ndarray:
    """``∂ log step / ∂ (θ_j / scale_j)`` of ``rows`` ``(R, J)``, forward differences."""
    space = model.parameters()
    base = np.log(model.step_ms_of(rows))
    cols = []
    for n, s in zip(names, scale, strict=True):
        i = space.index(n)
        v, h = space.values[i], 1e-4 * s
        if v + h > space.upper[i]:
            h = -h
        bumped = model.with_parameters({n: v + h}).step_ms_of(rows)
        cols.append((np.log(bumped) - base) / (h / s))
    return np.column_stack(cols)


def predictable(model: RooflinePredictor, train: StepInputs, test: StepInputs, y) -> bool:
    """Whether ``test``'s predictions are fixed by ``train``: they do not move along any
    direction of the default-free parameters that ``train`` leaves flat."""
    space = model.parameters()
    names = [n for n, f in zip(space.names, space.fitted, strict=True) if f]
    typical = float(np.median(y))
    scale = []
    for n in names:
        v = abs(space.values[space.index(n)])
        scale.append(v if v > 0 else (typical if n.endswith("_ms") else 1.0))
    jt = _log_jacobian(model, train, names, scale)
    jx = _log_jacobian(model, test, names, scale)
    _, sv, vt = np.linalg.svd(jt, full_matrices=True)
    sv = np.concatenate([sv, np.zeros(vt.shape[0] - sv.size)])
    null = vt[sv < 1e-6 * max(sv[0], 1e-300)]
    return null.size == 0 or float(np.abs(jx @ null.T).max()) < 1e-3


def held_out(case: Case, form: str, axis: str) -> tuple[np.ndarray, int]:
    """Errors of the rows held out group by group along ``axis`` ("batch" or "k"), and
    the count of held-out rows not predictable (their step times move along a direction
    the remaining rows leave undetermined)."""
    key = case.rows.decode_seqs if axis == "batch" else case.rows.draft_steps.astype(float)
    out: list[float] = []
    lost = 0
    for v in np.unique(key):
        test = key == v
        train = ~test
        if train.sum() < 2:
            lost += int(test.sum())
            continue
        f = fit(case, form, train)
        tr, te = case.rows.take(train), case.rows.take(test)
        if not predictable(f.model, tr, te, case.step_ms[train]):
            lost += int(test.sum())
            continue
        out.extend(errors_pct(case, f.model, np.flatnonzero(test)))
    return np.asarray(out), lost


def _summary(e: np.ndarray) -> str:
    if e.size == 0:
        return "      -       -"
    a = np.abs(e)
    return f"{np.median(a):6.2f}% {a.max():6.2f}%"


def report(forms=("today", "max", "pnorm", "max-dense"), out=sys.stdout) -> dict:
    """Print the comparison; return ``{(case, form): {scheme: errors}}``."""
    results: dict = {}
    for case in cases():
        print(f"\n== {case.name}: {len(case.rows)} rows ({case.note})", file=out)
        print(
            f"{'form':10s} {'in-sample med/max':>18s} {'leave-1-batch-out':>18s} "
            f"{'leave-1-k-out':>18s}  fitted",
            file=out,
        )
        for form in forms:
            if form == "max-dense" and not case.model.experts:
                continue
            f = fit(case, form, np.ones(len(case.rows), bool))
            ins = errors_pct(case, f.model, np.arange(len(case.rows)))
            lob, lost_b = held_out(case, form, "batch")
            lok, lost_k = held_out(case, form, "k")
            results[(case.name, form)] = {"in": ins, "batch": lob, "k": lok}
            vals = ", ".join(f"{k}={v:.4g}" for k, v in f.determined().items())
            extra = f" [{lost_b}/{lost_k} not predictable]" if lost_b or lost_k else ""
            print(
                f"{form:10s} {_summary(ins):>18s} {_summary(lob):>18s} {_summary(lok):>18s}"
                f"  {vals}{extra}",
                file=out,
            )
            if form in ("max", "pnorm"):
                print(
                    f"{'':10s} per row (b, k: error %): "
                    + ", ".join(
                        f"({b:g},{k}: {e:+.1f})"
                        for b, k, e in zip(
                            case.rows.decode_seqs, case.rows.draft_steps, ins, strict=True
                        )
                    ),
                    file=out,
                )
                und = "; ".join(f"{k}: {v}" for k, v in f.undetermined.items())
                print(f"{'':10s} undetermined: {und or 'none'}", file=out)
    return results


if __name__ == "__main__":
    report()
