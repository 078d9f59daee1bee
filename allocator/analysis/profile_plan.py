"""``profile-plan``: the fewest benchmark runs that determine every roofline parameter.

A *run* is one closed-loop benchmark at a fixed concurrency ``c`` (the client keeps ``c``
requests in flight), random prompts of fixed input and output lengths (so that each
run is one steady-state step, docs/design.md §8.12: batch ``≈ c``, context ``input +
output/2``, the prompts prefilled in the decoding steps), one drafter at one draft length
``k``, or speculation off. ``calibrate`` then fits the roofline's factors to the runs'
result files (:mod:`allocator.calibration`).

**Which runs.** The candidates are every concurrency of :data:`CONCURRENCIES` that fits
in memory at the context (the specs' cap, :func:`allocator.model.memory_fit.spec_max_batch`),
at every context asked for, at ``k`` in ``{0, 1, 2, 4, k_max}`` (``k_max`` the largest of
the search space, at most :data:`MAX_K`), for each drafter the engine serves. A set of
runs *determines* the parameters the roofline fits (:meth:`RooflinePredictor.parameters`,
``fitted``) when :func:`~allocator.calibration.roofline_fit.undetermined` finds nothing
its axes cannot separate and the runs' step times, at the file's factors
(``serving.roofline``, else the defaults: every peak reached), move along every
parameter independently: the Jacobian of their logarithms with respect to the
parameters (each on its own scale) has full column rank
(:func:`~allocator.calibration.roofline_fit.identify`). So a compute-bound run is needed
for ``compute_eff``, two batch sizes for ``seq_ms``, two contexts (or prefill sizes) for
``fixed_ms`` against ``mem_eff``, speculation off and a drafter at two ``k`` for
``overhead_ms``. The set is built greedily (each step the run that leaves the fewest
parameters undetermined, then the smallest largest standard error of a parameter were
each run's step time measured to :data:`NOISE`, ties to the cheapest: fewest prompt and
output tokens, then smaller ``k``) until every parameter is determined to within
:data:`PRECISION` of its scale at that noise (or :data:`MAX_RUNS` runs), then pruned (a
run is dropped when the others still do as well, the costliest first): no run of the
plan can be left out, though a different, smaller set is not ruled out. An exactly
determined plan (as many runs as parameters) would leave the fit at the mercy of each
run's noise; the precision asks for some redundancy.

**Fixed acceptance.** Each speculative run fixes the acceptance so that the step time is
measured apart from it, at the problem's own acceptance (``E`` of §8.3 at ``k``):

- vLLM 0.33.0 (vllm/config/speculative.py): ``"rejection_sample_method": "synthetic"``
  with ``"synthetic_acceptance_rates"``, the unconditional rate at each position (the
  probability that the first ``i`` drafts are all accepted: ``Π_{j≤i} a(j)``), in the
  ``--speculative-config``; accepted positions emit the draft token (benchmark use only);
- SGLang 0.5.23 (sglang/srt/environ.py, sglang/srt/speculative/spec_utils.py): the
  environment variable ``SGLANG_SIMULATE_ACC_LEN`` (the acceptance length, the bonus
  token included; one draw per verify batch) with ``SGLANG_SIMULATE_ACC_METHOD=
  match-expected`` (a fractional length becomes floor or floor + 1 with that mean).

**Commands.** vLLM: ``vllm serve`` with ``--tensor-parallel-size`` and the
``--speculative-config``, then ``vllm bench serve --dataset-name random
--random-input-len I --random-output-len O --max-concurrency c --num-prompts N
--percentile-metrics ttft,tpot,itl,e2el --save-result`` (vllm/benchmarks/serve.py; the
random dataset ignores EOS, so every output has ``O`` tokens). SGLang: ``python -m
sglang.launch_server`` with ``--tp-size``, ``--max-running-requests`` and
``--cuda-graph-max-bs-decode`` at the largest concurrency (speculation otherwise resets
the first to 48: sglang/srt/arg_groups/speculative_hook.py) and the chain's flags, then
``python -m sglang.benchmark.serving --backend sglang --dataset-name random
--random-range-ratio 1`` (fixed lengths) ``--flush-cache`` (the accept length counted
from the run only) ``--output-file``. ``N`` is :data:`PROMPTS_PER_SLOT` times the
concurrency, so that the loop is full for most of the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..calibration.roofline_fit import identify, log_jacobian, undetermined
from ..core.methods import resolve_method
from ..engines import ENGINES, settings
from ..exceptions import InputError, ParameterError
from ..io.quoting import escape_text, file_slug, plain_text, shell_join, shell_word
from ..model.memory_fit import spec_max_batch
from ..model.steptime import StepInputs, roofline_of
from ..model.under_load import bonus_expected

if TYPE_CHECKING:
    from ..core.problem import Problem
    from ..model.steptime import RooflinePredictor, StepInputs

__all__ = [
    "CONCURRENCIES",
    "DEFAULT_CONTEXTS",
    "MAX_K",
    "PROMPTS_PER_SLOT",
    "ProfilePlan",
    "Run",
    "profile_plan",
]

#: Concurrencies a run may take (clients' ``--max-concurrency``).
CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: Contexts (tokens per sequence) planned when none are given: a short and a long one.
DEFAULT_CONTEXTS = (1024.0, 8192.0)
#: Largest ``k`` a run drafts.
MAX_K = 8
#: Prompts per concurrency slot in each run (``num_prompts = PROMPTS_PER_SLOT · c``).
PROMPTS_PER_SLOT = 8
#: Output tokens per request in every run.
OUTPUT_LEN = 256
#: Relative singular value below which a direction counts as undetermined.
RANK_TOL = 1e-6
#: The relative error of a run's measured step time the plan is sized for.
NOISE = 0.02
#: The largest standard error of a parameter (relative to its scale: its value, or a
#: typical step for a time at 0) the plan accepts at :data:`NOISE`.
PRECISION = 0.25
#: Most runs a plan takes.
MAX_RUNS = 24
#: Relative tolerance of the plan's criterion (the largest standard error): two run sets
#: whose criteria differ by less than this share are tied, and a tie goes to the cheaper
#: run (the candidates' cost order). The criterion comes from a finite-difference
#: Jacobian through ``(JᵀJ)⁺``; its last digits move with the BLAS kernels (another CPU
#: picks others), and a plan must not.
TIE_RTOL = 1e-6


def _at_most(a: float, b: float) -> bool:
    """``a ≤ b`` up to :data:`TIE_RTOL` (relative; ``inf`` only matches ``inf``)."""
    return a <= b or (np.isfinite(b) and a <= b + TIE_RTOL * abs(b))


@dataclass(frozen=True)
class Run:
    """One benchmark run of the plan: ``drafter`` (``None``: speculation off) at ``k``,
    ``concurrency`` requests in flight, prompts of ``input_len`` and outputs of
    ``output_len`` tokens (``context = input_len + output_len / 2``), ``num_prompts``
    requests; ``tokens_per_step`` the ``E`` the acceptance is fixed at. ``server``,
    ``env``, ``client``: the engine's command (argv words) and environment."""

    name: str
    drafter: str | None
    k: int
    concurrency: int
    context: float
    input_len: int
    output_len: int
    num_prompts: int
    tokens_per_step: float
    server: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    client: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        c = self.context
        return {
            "name": self.name,
            "drafter": self.drafter,
            "k": self.k,
            "concurrency": self.concurrency,
            "context": int(c) if float(c).is_integer() else c,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "num_prompts": self.num_prompts,
            "tokens_per_step": self.tokens_per_step,
            "server": list(self.server),
            "env": dict(self.env),
            "client": list(self.client),
        }


@dataclass
class ProfilePlan:
    """``allocator profile-plan``: the runs, what they determine, and notes.

    problem, engine, model : as asked; parameters : the roofline parameters the runs are
    to determine; undetermined : those no candidate set determines (name → reason);
    runs : the plan; candidates : runs considered.
    """

    problem: str
    engine: str
    model: str
    parameters: list[str]
    undetermined: dict[str, str]
    runs: list[Run]
    candidates: int
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "problem": self.problem,
            "engine": self.engine,
            "model": self.model,
            "parameters": list(self.parameters),
            "undetermined": dict(self.undetermined),
            "candidates": self.candidates,
            "runs": [r.to_dict() for r in self.runs],
            "notes": list(self.notes),
        }

    def commands(self) -> str:
        """The plan as a shell script: each server once, then its client runs. Names in
        comments are escaped and every word is quoted (:mod:`allocator.io.quoting`): no
        control character or line break of a name or model reaches the script."""

        head = escape_text(f"{self.problem}: {len(self.runs)} benchmark run(s) on {self.engine}")
        lines = [f"# {head}"]
        last: tuple | None = None
        for r in self.runs:
            key = (tuple(r.server), tuple(sorted(r.env.items())))
            if key != last:
                env = " ".join(f"{k}={shell_word(v)}" for k, v in sorted(r.env.items()))
                lines.append("")
                lines.append(f"# server: {escape_text(r.drafter or 'speculation off')}, k = {r.k}")
                lines.append((env + " " if env else "") + shell_join(r.server))
                last = key
            lines.append(shell_join(r.client))
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- determination
def _model(problem: Problem) -> RooflinePredictor:
    serving = problem.serving
    if serving is None or not serving.has_roofline:
        raise InputError(
            "serving.model",
            "profile-plan sizes runs by the roofline: give serving.hardware and serving.model",
        )
    r = roofline_of(serving, problem.names)
    assert r is not None
    return r


def _free(model: RooflinePredictor, drafters: list[int]) -> list[str]:
    """The parameters the runs must determine: the fitted ones of the verifier and of
    the drafters planned (the others are in no run)."""
    space = model.parameters()
    keep = {model.drafters[i].name for i in drafters}
    out = []
    for n, f in zip(space.names, space.fitted, strict=True):
        if not f:
            continue
        if n.startswith("draft.") and n.split(".")[1] not in keep:
            continue
        out.append(n)
    return out


def _flat(
    model: RooflinePredictor, rows: StepInputs, names: list[str]
) -> tuple[dict[str, str], float]:
    """The parameters ``rows`` leave undetermined (by their axes, and by the rank of the
    log-Jacobian at ``model``'s values), and the largest standard error the others would
    have, relative to their scale, were each run's step time measured to within
    :data:`NOISE` (``NOISE · sqrt((JᵀJ)⁻¹_jj)``; ``inf`` while any is undetermined)."""
    why = undetermined(model, rows, names)
    rest = [n for n in names if n not in why]
    if not rest:
        return why, np.inf
    space = model.parameters()
    typical = float(np.median(model.step_ms_of(rows)))
    scale = []
    for n in rest:
        v = abs(space.values[space.index(n)])
        scale.append(v if v > 0 else (typical if n.endswith("_ms") else 1.0))
    jac = log_jacobian(model, rows, rest, scale)
    if not np.all(np.isfinite(jac)):
        return {**why, **{n: "a run has no step time" for n in rest}}, np.inf
    _, flat = identify(rest, np.ones(len(rest)), jac, np.zeros(len(rows)), RANK_TOL)
    why = {**why, **flat}
    if why:
        return why, np.inf
    # diag (JᵀJ)⁻¹ from J's own SVD, Σ_k V_jk² / s_k²: forming JᵀJ would square J's
    # condition number, and with it the rounding that differs between BLAS kernels
    _, sv, vt = np.linalg.svd(jac, full_matrices=False)
    var = (vt**2 / sv[:, None] ** 2).sum(axis=0)
    return why, float(NOISE * np.sqrt(np.max(var)))


# ---------------------------------------------------------------- the plan
def _rows(problem: Problem, cands: list[dict], pick: list[int]) -> StepInputs:
    sel = [cands[i] for i in pick]
    n = problem.n
    members = np.zeros((len(sel), n), bool)
    for r, c in enumerate(sel):
        if c["drafter"] is not None:
            members[r, c["drafter"]] = True
    k = np.array([c["k"] for c in sel], np.int64)
    return StepInputs(
        members,
        k,
        k + 1,
        np.array([c["batch"] for c in sel], float),
        np.array([c["context"] for c in sel], float),
        np.array([c["prefill"] for c in sel], float),
    )


def _left(n: int, picked: int, rest: int) -> int:
    """Run sets still to weigh at most: ``rest`` in this round, then every run not picked
    in each round left up to :data:`MAX_RUNS`."""
    rounds = max(0, MAX_RUNS - picked - 1)
    return rest + rounds * max(0, n - picked - 1)


def profile_plan(
    problem: Problem,
    engine: str = "vllm",
    contexts: list[float] | None = None,
    *,
    model: str | None = None,
    output_len: int = OUTPUT_LEN,
    progress: Callable[[int, int], None] | None = None,
) -> ProfilePlan:
    """The runs of the module docstring for ``problem`` (it needs ``serving.hardware`` and
    ``serving.model``) on ``engine`` (``vllm`` or ``sglang``), at ``contexts`` (tokens per
    sequence; default :data:`DEFAULT_CONTEXTS`); ``model``: the verifier's name for the
    commands (default: its architecture's, else ``MODEL``). ``progress(done, total)`` is
    called with the number of candidate run sets weighed so far and the most there can be
    (each round weighs every run not picked, for at most :data:`MAX_RUNS` rounds: the
    total falls to the exact count when the search stops)."""

    if engine not in ENGINES:
        raise ParameterError("engine", f"{engine!r} is not one of {', '.join(ENGINES)}")
    if model is not None:
        try:
            plain_text(model)
        except ValueError as exc:
            raise ParameterError("model", str(exc)) from None
    roof = _model(problem)
    serving = problem.serving
    assert serving is not None and serving.hardware is not None and serving.model is not None
    if not 1 <= output_len <= 1_000_000:
        raise ParameterError("output_len", f"{output_len} is not in 1..1,000,000 tokens")
    ctxs = list(DEFAULT_CONTEXTS if contexts is None else contexts)
    for c in ctxs:
        if c <= output_len / 2 + 1:
            raise ParameterError(
                "contexts",
                f"{c:g} tokens: a context must exceed half the output ({output_len / 2:g}) "
                "so that the prompt has tokens",
            )
    eng = ENGINES[engine]
    served = [
        i
        for i in range(problem.n)
        if eng.serves(resolve_method(problem.names[i], problem.drafter(i).method)[0])
        and not problem.excluded[i]
    ]
    notes: list[str] = []
    left = [problem.names[i] for i in range(problem.n) if i not in served]
    if left:
        notes.append(f"left out: {', '.join(left)} ({eng.label} does not serve them)")
    k_hi = int(min(problem.k_max, MAX_K))
    ks = sorted({1, 2, 4, k_hi} & set(range(1, k_hi + 1)))
    cands: list[dict] = []
    for ctx in ctxs:
        input_len = int(round(ctx - output_len / 2))
        for i in [None, *served]:
            members = np.zeros((1, problem.n), bool)
            if i is not None:
                members[0, i] = True
            room = int(spec_max_batch(serving, members, float(input_len + output_len))[0])
            for c in CONCURRENCIES:
                if c > room:
                    break
                for k in [0] if i is None else ks:
                    e = 1.0
                    if i is not None:
                        e = float(bonus_expected(problem, members, np.array([k]))[0])
                    # a prompt of input_len tokens is prefilled once per output_len / E steps
                    prefill = c * input_len * e / output_len
                    cost = PROMPTS_PER_SLOT * c * (input_len + output_len)
                    cands.append(
                        {
                            "drafter": i,
                            "k": k,
                            "batch": float(c),
                            "context": float(input_len + output_len / 2),
                            "prefill": prefill,
                            "input_len": input_len,
                            "e": e,
                            "cost": (cost, k, c),
                        }
                    )
    if not cands:
        raise InputError(
            "serving.hardware",
            "no run fits in memory: the weights leave no room for one sequence at the contexts "
            "asked for",
        )
    free = _free(roof, served)
    order = sorted(range(len(cands)), key=lambda j: cands[j]["cost"])
    pick: list[int] = []
    why: dict[str, str] = {n: "no run" for n in free}
    err = np.inf
    weighed = 0

    def good(w: dict[str, str], e: float) -> bool:
        return not w and e <= PRECISION

    while len(pick) < MAX_RUNS and not good(why, err):
        scored: list[tuple[int, float, int, dict[str, str]]] = []
        for pos, j in enumerate(order):  # cheapest first
            if j in pick:
                continue
            got, e = _flat(roof, _rows(problem, cands, [*pick, j]), free)
            weighed += 1
            if progress is not None:
                progress(weighed, weighed + _left(len(cands), len(pick), len(order) - pos - 1))
            scored.append((len(got), e, j, got))
        if not scored:
            break
        # the fewest undetermined, then the smallest criterion up to TIE_RTOL of the
        # smallest, then the cheapest (the first in cost order): no near-tie of the
        # criterion's last digits decides
        fewest = min(s[0] for s in scored)
        low = min(s[1] for s in scored if s[0] == fewest)
        n_got, e_best, j_best, got_best = next(
            s for s in scored if s[0] == fewest and _at_most(s[1], low)
        )
        no_gain = n_got > len(why) or (n_got == len(why) and _at_most(err, e_best))
        if no_gain and len(pick) >= len(free):
            break
        best = ((n_got, e_best), j_best, got_best, e_best)
        pick.append(best[1])
        why, err = best[2], best[3]
    # prune: drop the costliest runs the others do without
    for j in sorted(pick, key=lambda j: cands[j]["cost"], reverse=True):
        rest = [x for x in pick if x != j]
        if not rest:
            continue
        w, e = _flat(roof, _rows(problem, cands, rest), free)
        if len(w) <= len(why) and (good(w, e) or _at_most(e, err)):
            pick, why, err = rest, w, e
    pick.sort(
        key=lambda j: (
            cands[j]["drafter"] is not None,
            cands[j]["drafter"] or 0,
            cands[j]["k"],
            cands[j]["context"],
            cands[j]["batch"],
        )
    )
    model_name = model or serving.model.name or "MODEL"
    if model is None and not serving.model.name:
        notes.append("MODEL stands for the verifier's name or path: pass --model")
    runs = [
        _run(
            problem,
            engine,
            cands[j],
            n,
            model_name,
            max(int(cands[x]["batch"]) for x in pick),
            output_len,
        )
        for n, j in enumerate(pick, 1)
    ]
    if why:
        notes.append(
            "no set of the candidate runs determines "
            + ", ".join(why)
            + ": calibrate will report them as undetermined"
        )
    elif err > PRECISION:
        notes.append(
            f"at {NOISE:.0%} noise per run the least determined parameter keeps a standard "
            f"error of {err:.0%} of its scale (the plan aims at {PRECISION:.0%})"
        )
    notes.append(
        "the acceptance is fixed in every speculative run (the problem's E at that k), so "
        "the runs measure step times apart from acceptance; their accepted tokens are not "
        "the model's output, so use them for timing only"
    )
    return ProfilePlan(problem.name, engine, model_name, free, why, runs, len(cands), notes)


def _run(
    problem: Problem, engine: str, c: dict, n: int, model: str, c_max: int, output_len: int
) -> Run:
    """The commands of one candidate run (module docstring)."""
    serving = problem.serving
    assert serving is not None and serving.hardware is not None
    tp = serving.hardware.count
    gpu = serving.hardware.gpu.name
    conc = int(c["batch"])
    k = int(c["k"])
    i = c["drafter"]

    who = "off" if i is None else file_slug(problem.names[i])
    name = f"run{n:02d}-{who}-k{k}-c{conc}-ctx{int(c['context'])}"
    prompts = PROMPTS_PER_SLOT * conc
    server: list[str]
    env: dict[str, str] = {}
    if engine == "vllm":
        server = ["vllm", "serve", model, "--tensor-parallel-size", str(tp)]
        if i is not None:
            config, _ = settings("vllm", problem.drafter(i), k)
            assert isinstance(config, dict)
            config["rejection_sample_method"] = "synthetic"
            config["synthetic_acceptance_rates"] = _rates(problem, i, k)
            server += ["--speculative-config", json.dumps(config)]
        client = [
            "vllm",
            "bench",
            "serve",
            "--model",
            model,
            "--dataset-name",
            "random",
            "--random-input-len",
            str(c["input_len"]),
            "--random-output-len",
            str(output_len),
            "--max-concurrency",
            str(conc),
            "--num-prompts",
            str(prompts),
            "--percentile-metrics",
            "ttft,tpot,itl,e2el",
            "--save-result",
            "--result-filename",
            f"{name}.json",
            "--metadata",
            f"hardware={gpu}",
            f"tensor_parallel_size={tp}",
        ]
    else:
        server = [
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            model,
            "--tp-size",
            str(tp),
            "--max-running-requests",
            str(c_max),
            "--cuda-graph-max-bs-decode",
            str(c_max),
        ]
        if i is not None:
            flags, _ = settings("sglang", problem.drafter(i), k)
            assert isinstance(flags, list)
            server += flags
            env = {
                "SGLANG_SIMULATE_ACC_LEN": f"{c['e']:.6g}",
                "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
            }
        client = [
            "python",
            "-m",
            "sglang.benchmark.serving",
            "--backend",
            "sglang",
            "--dataset-name",
            "random",
            "--random-input-len",
            str(c["input_len"]),
            "--random-output-len",
            str(output_len),
            "--random-range-ratio",
            "1",
            "--max-concurrency",
            str(conc),
            "--num-prompts",
            str(prompts),
            "--flush-cache",
            "--output-file",
            f"{name}.jsonl",
        ]
    return Run(
        name,
        None if i is None else problem.names[i],
        k,
        conc,
        float(c["context"]),
        int(c["input_len"]),
        output_len,
        prompts,
        float(c["e"]),
        server,
        env,
        client,
    )


def _rates(problem: Problem, i: int, k: int) -> list[float]:
    """vLLM's unconditional synthetic rates: position ``j``'s probability that the first
    ``j`` drafts are all accepted, ``Π_{l≤j} a(l)`` of drafter ``i``'s acceptance (the
    problem's own, as the serving model reads it), non-increasing and in [0, 1]."""
    members = np.zeros((1, problem.n), bool)
    members[0, i] = True
    e = [float(bonus_expected(problem, members, np.array([j]))[0]) for j in range(k + 1)]
    # E(j) - E(j - 1) = Π_{l≤j} a(l): the probability that position j is accepted
    rates = [max(0.0, min(1.0, e[j] - e[j - 1])) for j in range(1, k + 1)]
    for j in range(1, len(rates)):
        rates[j] = min(rates[j], rates[j - 1])
    return [round(r, 6) for r in rates]
