"""The roofline step-time predictor: memory traffic against arithmetic, with context,
prefill, mixture-of-experts coverage and drafting (docs/design.md §8.12).

**One pass** of a model over ``n`` tokens, for ``b`` decoding sequences of ``C`` cached
tokens each and ``P`` prefilled prompt tokens (``n = b·t + P`` for the verifier, ``t``
tokens verified per sequence), all times in ms::

    memory_ms  = [W + X·cov(n) + κ·(b·C + n)] / η_m + fixed_ms + seq_ms·b
    compute_ms = [φ·n + α·(b·t·C + P·(P + 1)/2)] / η_c
    pass_ms    = max(memory_ms, compute_ms)                      (form "max")
               = (memory_ms^p + compute_ms^p)^(1/p)               (form "pnorm")

with the *peak terms*, each the time of its traffic or arithmetic at the hardware's peak
rate (:class:`PeakTerms`, from the specs: ``B`` bytes/s and ``F`` FLOP/s of the replica):

- ``W = weights_ms`` = 10³ · (bytes of non-expert weights a step reads) / B;
- ``X = expert_ms`` = 10³ · (bytes of one routed expert over all its layers) / B, and
  ``cov(n) = E·(1 − (1 − k_e/E)^n)`` the expected number of distinct experts ``n``
  tokens touch when each picks ``k_e`` of the ``E`` experts uniformly and independently
  (:func:`expected_experts`; 0 for a dense model): a mixture of experts reads more
  expert weights the more tokens it processes, up to all ``E`` of them;
- ``κ = kv_ms`` = 10³ · (KV-cache bytes per token) / B: every decoding sequence's cache is
  read (``b·C`` tokens) and every processed token's KV written (``n``; drop it with
  ``kv_write=False``);
- ``φ = token_ms`` = 10³ · 2·(active parameters) / F: the linear layers per token;
- ``α = attn_ms`` = 10³ · 4·layers·heads·head_dim / F per (query token × cached token):
  decoding tokens attend to their ``C`` cached tokens, the ``P`` prefill tokens to the
  prompt before them (one prompt chunk without a cached prefix: ``P(P + 1)/2`` pairs, an
  upper bound when the chunk mixes several prompts).

and the fitted *efficiency factors*: ``η_m = mem_eff`` and ``η_c = compute_eff`` in
``(0, 1]`` (the share of peak bandwidth and throughput reached), ``fixed_ms`` (time per
pass the bandwidth does not explain: launches, synchronisation, tensor-parallel
all-reduce latency) and ``seq_ms`` (per decoding sequence per pass: scheduling, sampling,
block tables). ``fixed_ms`` and ``seq_ms`` sit inside the memory side, as today's ``v0``
and ``v1`` do, so a compute-bound pass hides them.

**A step** (:meth:`RooflinePredictor.step_ms`)::

    step_ms = verifier pass + draft_steps · D + overhead_ms · [speculative]

``D`` is one drafting pass of the configuration's members: ``Σ_i`` of each member's pass
(``drafting: sequential``) or their ``max`` (``parallel``). A member's pass is the same
roofline with its own peak terms (a draft model or head is itself a small model reading
its weights and KV cache) and its own ``fixed_ms``/``seq_ms``, over ``n_d = b·q`` tokens,
``q = (verified − 1) / (draft_steps · m)`` drafted per sequence per pass by each of the
``m`` members (1 for a chain; a tree's mean width); a drafter without a spec has zero peak
terms, so its pass is ``fixed_ms + seq_ms·b``, today's ``d0 + d1·b``. A draft model that
is a mixture of experts saturates with the batch through ``cov``. ``overhead_ms`` is
speculation's own cost per step (a step is speculative when it drafts or verifies more
than one token). An empty step (no decoding sequence, no prefill) has no step time (NaN).

**Today's form.** At context 0 with no prefill, a dense verifier and drafters below
their compute kink, the step is calibrate's model (docs/design.md §8.7)::

    verify(b, t) = max(v0 + v1·b + w·b·t, c·b·t),   draft_i(b) = d0_i + d1_i·b
    v0 = W/η_m + fixed_ms,   v1 = seq_ms,   c = φ/η_c,   w = κ/η_m (0 with kv_write=False)
    d0_i = W_i/η_m + fixed_ms_i,   d1_i = seq_ms_i + κ_i·q/η_m

so with ``kv_write=False`` it is exactly ``max(v0 + v1·b, c·b·t) + k·Σ d_i(b) +
overhead``; the KV write adds ``w·b·t``, 0.2% of ``c·b·t`` for Llama-3.1-8B in bf16 on
an H100. At a fixed context ``C`` the same holds with ``v1 = seq_ms + κ·C/η_m`` and
``c = (φ + α·C)/η_c`` (:meth:`RooflinePredictor.linear_form`): today's fitted ``v1`` and
``c`` are the roofline's at the context the rows were measured at, and both grow with it.

**Fitting.** :meth:`RooflinePredictor.parameters` is the parameter-vector view (names,
values, bounds, which the specs determine, which are fitted by default);
:func:`undetermined` says which of them a set of rows cannot determine and why;
:func:`fit_roofline` fits the others by least squares on relative residuals.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from ...exceptions import InputError
from .base import StepInputs, StepTimePredictor, step_inputs

if TYPE_CHECKING:
    from ...core.hardware import Hardware
    from ...core.model_spec import ModelSpec

__all__ = [
    "LinearForm",
    "ParameterSpace",
    "PeakTerms",
    "DrafterCost",
    "RooflineFit",
    "RooflinePredictor",
    "combine",
    "expected_experts",
    "fit_roofline",
    "identify",
    "log_jacobian",
    "undetermined",
]

#: Peak-term names, in vector order.
PEAK_NAMES: tuple[str, ...] = ("weights_ms", "expert_ms", "kv_ms", "token_ms", "attn_ms")
#: Efficiency-factor names of the verifier, in vector order (``p`` only for "pnorm").
FACTOR_NAMES: tuple[str, ...] = ("mem_eff", "compute_eff", "fixed_ms", "seq_ms", "overhead_ms")
#: Lower bound of an efficiency factor.
MIN_EFF = 1e-4
#: Bounds of the p-norm exponent.
P_BOUNDS = (1.0, 64.0)


def expected_experts(n, experts: int, per_token: int) -> np.ndarray:
    """Expected distinct experts touched by ``n`` tokens, each routed to ``per_token`` of
    ``experts`` experts, uniformly and independently: ``E·(1 − (1 − k_e/E)^n)``.

    Derivation: a token's ``k_e`` experts are a uniform ``k_e``-subset, so it misses a
    given expert with probability ``C(E−1, k_e)/C(E, k_e) = 1 − k_e/E``; ``n`` independent
    tokens all miss it with probability ``(1 − k_e/E)^n``; summing the indicator "expert
    touched" over the ``E`` experts gives the expectation. ``n`` any shape, ``>= 0``
    (fractional ``n`` interpolates); 0 for a dense model (``experts = 0``).
    """
    n = np.asarray(n, dtype=float)
    if experts <= 0:
        return np.zeros_like(n)
    if per_token >= experts:
        return np.where(n > 0, float(experts), 0.0)
    return experts * -np.expm1(n * math.log1p(-per_token / experts))


def combine(memory_ms: np.ndarray, compute_ms: np.ndarray, form: str, p: float) -> np.ndarray:
    """The pass time from its memory and compute times: their max (``form = "max"``) or
    their ``p``-norm ``(m^p + c^p)^(1/p)`` (``"pnorm"``, ``p >= 1``; the max as ``p → ∞``)."""
    m = np.asarray(memory_ms, dtype=float)
    c = np.asarray(compute_ms, dtype=float)
    hi = np.maximum(m, c)
    if form == "max":
        return hi
    lo = np.minimum(m, c)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(hi > 0, lo / np.where(hi > 0, hi, 1.0), 0.0)
    return hi * (1.0 + r**p) ** (1.0 / p)


@dataclass(frozen=True)
class PeakTerms:
    """A model's pass costs at the replica's peak rates, ms (module docstring).

    weights_ms : its non-expert weights read once. expert_ms : one routed expert (all its
    layers) read once. kv_ms : one token of KV cache read or written. token_ms : linear
    layers' arithmetic per token. attn_ms : attention arithmetic per (query token × cached
    token). experts, experts_per_token : ``E`` and ``k_e`` (0 for a dense model).
    """

    weights_ms: float = 0.0
    expert_ms: float = 0.0
    kv_ms: float = 0.0
    token_ms: float = 0.0
    attn_ms: float = 0.0
    experts: int = 0
    experts_per_token: int = 0

    @classmethod
    def from_specs(cls, hardware: Hardware, model: ModelSpec) -> PeakTerms:
        """The peak terms of ``model`` on ``hardware``: bytes over the replica's bandwidth
        and FLOPs over its dense throughput in the model's compute dtype, in ms."""
        bw = hardware.bandwidth_bytes_s
        flops = hardware.flops(model.compute_dtype, f"{model.field}.dtype")
        return cls(
            weights_ms=1e3 * model.dense_read_bytes / bw,
            expert_ms=1e3 * model.expert_bytes / bw,
            kv_ms=1e3 * model.kv_bytes_per_token / bw,
            token_ms=1e3 * model.flops_per_token / flops,
            attn_ms=1e3 * model.attention_flops_per_context / flops,
            experts=model.experts,
            experts_per_token=model.experts_per_token,
        )

    def values(self) -> tuple[float, ...]:
        return tuple(float(getattr(self, k)) for k in PEAK_NAMES)


@dataclass(frozen=True)
class DrafterCost:
    """One drafter's pass: its peak terms (zero without a spec), its fitted ``fixed_ms``
    (per pass) and ``seq_ms`` (per decoding sequence per pass); ``from_spec``: the peak
    terms come from a model spec."""

    name: str
    peak: PeakTerms = field(default_factory=PeakTerms)
    fixed_ms: float = 0.0
    seq_ms: float = 0.0
    from_spec: bool = False


@dataclass(frozen=True)
class LinearForm:
    """The roofline at one context, no prefill (module docstring, "Today's form"), ms.

    ``verify(b, t) = max(v0 + v1·b + w·b·t, c·b·t)`` (p-norm instead of max under "pnorm");
    ``pass_i(b, q) = max(d0_i + d1_i·b, c_d_i·b·q)`` per drafter (``(N,)`` arrays; ``d1``
    at ``q = 1``), ``overhead`` per speculative step. Exact for a dense verifier and
    dense drafters.
    """

    v0: float
    v1: float
    w: float
    c: float
    d0: np.ndarray
    d1: np.ndarray
    c_d: np.ndarray
    overhead: float


@dataclass(frozen=True, eq=False)
class ParameterSpace:
    """A predictor's parameters as a vector.

    names ``(K,)``; values, lower, upper ``(K,)`` float; spec_determined ``(K,)`` bool:
    set by hardware and model specs (peak terms of a model with a spec); fitted ``(K,)``
    bool: fitted by default (:func:`fit_roofline`'s ``free`` when none is given, before
    :func:`undetermined` removes what the rows cannot determine).
    """

    names: tuple[str, ...]
    values: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    spec_determined: np.ndarray
    fitted: np.ndarray

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"no parameter {name!r} (have {', '.join(self.names)})") from None

    def as_dict(self) -> dict[str, float]:
        return {n: float(v) for n, v in zip(self.names, self.values, strict=True)}


@dataclass(frozen=True, eq=False)
class RooflinePredictor(StepTimePredictor):
    """The roofline of the module docstring; every time in ms.

    peak : the verifier's :class:`PeakTerms`. drafters : one :class:`DrafterCost` per
    drafter of the problem, in its order (the columns of ``members``). mem_eff,
    compute_eff, fixed_ms, seq_ms, overhead_ms : the verifier's fitted factors. form :
    ``"max"`` or ``"pnorm"`` with exponent ``p``. drafting : ``"sequential"`` (members'
    passes add) or ``"parallel"`` (max). kv_write : count the KV write of processed tokens.
    verifier_from_spec : the peak terms come from specs. measured : the calibrated domain
    (:meth:`domain`), ``{}`` for none.
    """

    name: ClassVar[str] = "roofline"

    peak: PeakTerms
    drafters: tuple[DrafterCost, ...] = ()
    mem_eff: float = 1.0
    compute_eff: float = 1.0
    fixed_ms: float = 0.0
    seq_ms: float = 0.0
    overhead_ms: float = 0.0
    form: Literal["max", "pnorm"] = "max"
    p: float = 8.0
    drafting: Literal["sequential", "parallel"] = "sequential"
    kv_write: bool = True
    verifier_from_spec: bool = False
    measured: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.form not in ("max", "pnorm"):
            raise InputError("serving.roofline.form", f"{self.form!r} is not max or pnorm")
        if self.drafting not in ("sequential", "parallel"):
            raise InputError("drafting", f"{self.drafting!r} is not sequential or parallel")
        if not P_BOUNDS[0] <= self.p <= P_BOUNDS[1]:
            raise InputError("serving.roofline.p", f"{self.p} is outside {P_BOUNDS}")
        for key in ("mem_eff", "compute_eff"):
            v = getattr(self, key)
            if not MIN_EFF <= v <= 1.0:
                raise InputError(f"serving.roofline.{key}", f"{v} is outside [{MIN_EFF}, 1]")
        for key in ("fixed_ms", "seq_ms", "overhead_ms"):
            if not getattr(self, key) >= 0:
                raise InputError(f"serving.roofline.{key}", "must be >= 0")
        names = [d.name for d in self.drafters]
        if len(set(names)) != len(names):
            raise InputError("drafters", "drafter names must be unique")

    # ------------------------------------------------------------ constructors
    @classmethod
    def from_specs(
        cls,
        hardware: Hardware,
        model: ModelSpec,
        drafters: Mapping[str, ModelSpec | None] | Sequence[tuple[str, ModelSpec | None]] = (),
        **factors,
    ) -> RooflinePredictor:
        """The roofline of ``model`` on ``hardware``; ``drafters``: name → the draft
        model's spec, or ``None`` for a drafter without one (an n-gram drafter, or a head
        whose cost is left to calibration). ``factors``: the other fields (efficiencies,
        ``form``, ``drafting``, ...)."""
        items = list(drafters.items()) if isinstance(drafters, Mapping) else list(drafters)
        costs = tuple(
            DrafterCost(
                name=n,
                peak=PeakTerms() if spec is None else PeakTerms.from_specs(hardware, spec),
                from_spec=spec is not None,
            )
            for n, spec in items
        )
        return cls(
            peak=PeakTerms.from_specs(hardware, model),
            drafters=costs,
            verifier_from_spec=True,
            **factors,
        )

    @classmethod
    def from_linear(
        cls,
        v0: float,
        v1: float,
        c: float,
        overhead: float = 0.0,
        draft_fixed: Sequence[tuple[str, float, float]] = (),
        drafting: Literal["sequential", "parallel"] = "sequential",
    ) -> RooflinePredictor:
        """Today's fitted model as a roofline without specs: ``weights_ms = v0``,
        ``seq_ms = v1``, ``token_ms = c``, ``η = 1``, no KV write, and each drafter
        ``(name, d0, d1)`` as ``fixed_ms = d0``, ``seq_ms = d1``. Its step equals
        ``max(v0 + v1·b, c·b·t) + k·Σ draft_i(b) + overhead`` at every context 0."""
        return cls(
            peak=PeakTerms(weights_ms=v0, token_ms=c),
            drafters=tuple(DrafterCost(n, fixed_ms=d0, seq_ms=d1) for n, d0, d1 in draft_fixed),
            seq_ms=v1,
            overhead_ms=overhead,
            drafting=drafting,
            kv_write=False,
        )

    @classmethod
    def example(cls) -> RooflinePredictor:
        """A small worked predictor (dense 8B-class verifier in ms-terms, one drafter),
        for the contract suite."""
        return cls(
            peak=PeakTerms(weights_ms=4.8, kv_ms=4e-5, token_ms=0.0162, attn_ms=1.3e-7),
            drafters=(DrafterCost("d", PeakTerms(weights_ms=0.3, kv_ms=4e-6, token_ms=1e-3)),),
            mem_eff=0.8,
            compute_eff=0.6,
            fixed_ms=1.0,
            seq_ms=0.01,
            overhead_ms=0.5,
        )

    # ------------------------------------------------------------ the model
    def _memory_compute(
        self,
        peak: PeakTerms,
        n: np.ndarray,
        b: np.ndarray,
        ctx: np.ndarray,
        attn_pairs: np.ndarray,
        fixed_ms: float,
        seq_ms: float,
    ) -> tuple[np.ndarray, np.ndarray]:
        written = n if self.kv_write else 0.0
        traffic = (
            peak.weights_ms
            + peak.expert_ms * expected_experts(n, peak.experts, peak.experts_per_token)
            + peak.kv_ms * (b * ctx + written)
        )
        memory = traffic / self.mem_eff + fixed_ms + seq_ms * b
        compute = (peak.token_ms * n + peak.attn_ms * attn_pairs) / self.compute_eff
        return memory, compute

    def verifier_parts(self, x: StepInputs) -> tuple[np.ndarray, np.ndarray]:
        """The verifier pass's memory and compute times ``(B,)`` ms (before combining).

        The linear layers' arithmetic is evaluated as ``(φ·b)·t + φ·P``, the order in which
        calibrate's fitted form ``c·b·t`` has always been computed, so that
        :meth:`from_linear` gives today's step times to the last bit."""
        b, t, c, pre = x.decode_seqs, x.verified.astype(float), x.context, x.prefill
        n = b * t + pre
        pairs = b * t * c + pre * (pre + 1.0) / 2.0
        memory, _ = self._memory_compute(self.peak, n, b, c, pairs, self.fixed_ms, self.seq_ms)
        pk = self.peak
        compute = (pk.token_ms * b * t + pk.token_ms * pre + pk.attn_ms * pairs) / self.compute_eff
        return memory, compute

    def verify_ms(self, x: StepInputs) -> np.ndarray:
        """The verifier's pass ``(B,)`` ms; NaN for an empty step."""
        memory, compute = self.verifier_parts(x)
        out = combine(memory, compute, self.form, self.p)
        return np.where((x.decode_seqs > 0) | (x.prefill > 0), out, np.nan)

    def drafter_pass_ms(self, x: StepInputs) -> np.ndarray:
        """Each drafter's pass ``(B, N)`` ms for the rows' tokens per pass (0 where a row
        drafts nothing)."""
        s = x.draft_steps.astype(float)
        m = x.members.sum(axis=1).astype(float)
        b, c = x.decode_seqs, x.context
        with np.errstate(invalid="ignore", divide="ignore"):
            q = np.where((s > 0) & (m > 0), (x.verified - 1.0) / (s * m), 0.0)
        nd = b * q
        out = np.zeros(x.members.shape)
        for i, d in enumerate(self.drafters):
            memory, compute = self._memory_compute(d.peak, nd, b, c, nd * c, d.fixed_ms, d.seq_ms)
            out[:, i] = combine(memory, compute, self.form, self.p)
        return np.where((s > 0)[:, None] & (b > 0)[:, None], out, 0.0)

    def drafting_ms(self, x: StepInputs) -> np.ndarray:
        """``draft_steps · D`` per row ``(B,)`` ms (module docstring); NaN where a row
        drafts with no member."""
        passes = np.where(x.members, self.drafter_pass_ms(x), 0.0)
        one = passes.max(axis=1, initial=0.0) if self.drafting == "parallel" else passes.sum(1)
        out = x.draft_steps * one
        return np.where((x.draft_steps > 0) & ~x.members.any(axis=1), np.nan, out)

    def step_ms(self, members, draft_steps, verified, decode_seqs, context, prefill) -> np.ndarray:
        """The contract's step time ``(B,)`` ms (module docstring for the formula)."""
        x = step_inputs(
            members, draft_steps, verified, decode_seqs, context, prefill, len(self.drafters)
        )
        return self.step_ms_of(x)

    def step_ms_of(self, x: StepInputs) -> np.ndarray:
        """:meth:`step_ms` of already checked inputs."""
        return self.verify_ms(x) + self.drafting_ms(x) + self.overhead_ms * x.speculative

    def domain(self) -> dict[str, tuple[float, float]]:
        return dict(self.measured)

    def linear_form(self, context: float = 0.0) -> LinearForm:
        """``v0, v1, w, c`` and the drafters' ``d0, d1, c_d`` at ``context`` (module
        docstring, "Today's form"); no prefill. The verifier's MoE coverage is not part of
        the form: :class:`InputError` for a mixture-of-experts verifier."""
        if self.peak.experts:
            raise InputError(
                "serving.model.experts",
                "a mixture-of-experts verifier has no linear form: its weight traffic grows "
                "with the tokens (expert coverage)",
            )
        pk, em, ec = self.peak, self.mem_eff, self.compute_eff
        w = pk.kv_ms / em if self.kv_write else 0.0

        def d1(d: DrafterCost) -> float:
            return d.seq_ms + d.peak.kv_ms * (context + (1.0 if self.kv_write else 0.0)) / em

        return LinearForm(
            v0=pk.weights_ms / em + self.fixed_ms,
            v1=self.seq_ms + pk.kv_ms * context / em,
            w=w,
            c=(pk.token_ms + pk.attn_ms * context) / ec,
            d0=np.array([d.peak.weights_ms / em + d.fixed_ms for d in self.drafters]),
            d1=np.array([d1(d) for d in self.drafters]),
            c_d=np.array(
                [(d.peak.token_ms + d.peak.attn_ms * context) / ec for d in self.drafters]
            ),
            overhead=self.overhead_ms,
        )

    # ------------------------------------------------------------ parameter vector
    def parameters(self) -> ParameterSpace:
        """The parameter-vector view (:class:`ParameterSpace`).

        Order: ``mem_eff, compute_eff, fixed_ms, seq_ms, overhead_ms``, ``p`` (form
        "pnorm" only), the verifier's peak terms, then per drafter ``draft.<name>.``
        ``fixed_ms, seq_ms`` and its peak terms. Peak terms from specs are
        ``spec_determined``. Fitted by default: with a verifier spec its factors (and
        ``p``); without one ``weights_ms`` (today's ``v0``), ``seq_ms``, ``token_ms``,
        ``overhead_ms`` (and ``p``; ``expert_ms``, ``kv_ms``, ``attn_ms`` where nonzero),
        the efficiencies then staying at their values (without specs only their ratio to
        the peak terms shows); each drafter's ``fixed_ms`` and ``seq_ms``.
        """
        names: list[str] = []
        vals: list[float] = []
        lo: list[float] = []
        hi: list[float] = []
        spec: list[bool] = []
        fit: list[bool] = []

        def add(name: str, v: float, low: float, high: float, s: bool, f: bool) -> None:
            names.append(name)
            vals.append(float(v))
            lo.append(low)
            hi.append(high)
            spec.append(s)
            fit.append(f)

        vs = self.verifier_from_spec
        add("mem_eff", self.mem_eff, MIN_EFF, 1.0, False, vs)
        add("compute_eff", self.compute_eff, MIN_EFF, 1.0, False, vs)
        add("fixed_ms", self.fixed_ms, 0.0, np.inf, False, vs)
        add("seq_ms", self.seq_ms, 0.0, np.inf, False, True)
        add("overhead_ms", self.overhead_ms, 0.0, np.inf, False, True)
        if self.form == "pnorm":
            add("p", self.p, *P_BOUNDS, False, True)
        for key, v in zip(PEAK_NAMES, self.peak.values(), strict=True):
            default = key in ("weights_ms", "token_ms") or v > 0
            if key == "expert_ms" and not self.peak.experts:
                default = False
            add(key, v, 0.0, np.inf, vs, not vs and default)
        for d in self.drafters:
            add(f"draft.{d.name}.fixed_ms", d.fixed_ms, 0.0, np.inf, False, True)
            add(f"draft.{d.name}.seq_ms", d.seq_ms, 0.0, np.inf, False, True)
            for key, v in zip(PEAK_NAMES, d.peak.values(), strict=True):
                add(f"draft.{d.name}.{key}", v, 0.0, np.inf, d.from_spec, False)
        return ParameterSpace(
            tuple(names),
            np.array(vals),
            np.array(lo),
            np.array(hi),
            np.array(spec, bool),
            np.array(fit, bool),
        )

    def with_parameters(self, values: Mapping[str, float]) -> RooflinePredictor:
        """A copy with the named parameters (:meth:`parameters` names) set."""
        known = set(self.parameters().names)
        bad = sorted(set(values) - known)
        if bad:
            raise KeyError(f"unknown parameters {bad}")
        top: dict[str, Any] = {
            k: float(v) for k, v in values.items() if k in FACTOR_NAMES or k == "p"
        }
        peak_values: dict[str, Any] = {k: float(v) for k, v in values.items() if k in PEAK_NAMES}
        peak = replace(self.peak, **peak_values)
        drafters = []
        for d in self.drafters:
            pre = f"draft.{d.name}."
            mine = {k[len(pre) :]: float(v) for k, v in values.items() if k.startswith(pre)}
            dvalues: dict[str, Any] = {k: v for k, v in mine.items() if k in PEAK_NAMES}
            dpeak = replace(d.peak, **dvalues)
            drafters.append(
                replace(
                    d,
                    peak=dpeak,
                    fixed_ms=mine.get("fixed_ms", d.fixed_ms),
                    seq_ms=mine.get("seq_ms", d.seq_ms),
                )
            )
        return replace(self, peak=peak, drafters=tuple(drafters), **top)


# ---------------------------------------------------------------- identifiability
def _rows(rows) -> StepInputs:
    return rows if isinstance(rows, StepInputs) else step_inputs(*rows)


def undetermined(
    model: RooflinePredictor, rows, free: Sequence[str] | None = None
) -> dict[str, str]:
    """Which of the ``free`` parameters (default: those :meth:`~RooflinePredictor.parameters`
    fits by default) the measurement axes of ``rows`` cannot determine: name → reason.

    ``rows``: :class:`~allocator.model.steptime.base.StepInputs` (or the tuple of
    :meth:`~RooflinePredictor.step_ms` arguments). The rules, by axis:

    - no speculative row: ``overhead_ms`` and every drafter's parameters;
    - no plain-decoding row (``k = 0``) while speculative rows exist, or no drafter
      measured at two ``k`` or more: ``overhead_ms`` is not separable from the base pass
      and the draft cost (it is held, not fitted);
    - one batch size: the per-sequence slopes ``seq_ms`` and every ``draft.*.seq_ms``;
      a drafter whose speculative rows are at one batch size: its ``seq_ms``;
    - a drafter in no speculative row: its parameters;
    - with a verifier spec, a dense verifier, one context length and one prefill size:
      ``fixed_ms`` is not separable from ``mem_eff`` (the weights' read time and the
      fixed time are one constant; ``mem_eff`` takes it);
    - without specs, ``mem_eff`` and ``compute_eff`` (only their ratio to the peak terms
      shows); ``kv_ms`` and ``attn_ms`` need more than one context length.

    :func:`fit_roofline` adds what the fitted rows still leave flat (its ``undetermined``).
    """
    x = _rows(rows)
    space = model.parameters()
    names = list(space.names if free is None else free)
    if free is None:
        names = [n for n, f in zip(space.names, space.fitted, strict=True) if f]
    for n in names:
        space.index(n)
    out: dict[str, str] = {}
    spec = x.speculative
    plain = ~spec
    batches = np.unique(x.decode_seqs)
    contexts = np.unique(x.context)
    prefills = np.unique(x.prefill)

    def mark(name: str, why: str) -> None:
        if name in names and name not in out:
            out[name] = why

    if not spec.any():
        mark("overhead_ms", "no speculative row")
        for n in names:
            if n.startswith("draft."):
                mark(n, "no speculative row")
    for i, d in enumerate(model.drafters):
        rows_i = spec & x.members[:, i]
        pre = f"draft.{d.name}."
        if not rows_i.any():
            for n in names:
                if n.startswith(pre):
                    mark(n, f"drafter {d.name} is in no speculative row")
        elif np.unique(x.decode_seqs[rows_i]).size < 2:
            mark(
                pre + "seq_ms",
                f"{d.name}'s speculative rows are at one batch size "
                f"({x.decode_seqs[rows_i][0]:g}): its per-sequence slope is not determined",
            )
    if spec.any() and not plain.any():
        mark(
            "overhead_ms",
            "no plain-decoding (k = 0) row: the base pass and the per-step overhead are not "
            "separable",
        )
    if spec.any():
        ks_varied = [
            np.unique(x.draft_steps[spec & x.members[:, i]]).size > 1
            for i in range(len(model.drafters))
        ]
        if not any(ks_varied):
            mark(
                "overhead_ms",
                "no drafter is measured at two k or more: the draft cost per pass and the "
                "per-step overhead are not separable",
            )
    if batches.size < 2:
        why = f"one batch size measured ({batches[0]:g}): per-sequence slopes are not determined"
        for n in names:
            if n == "seq_ms" or n.endswith(".seq_ms"):
                mark(n, why)
    if model.verifier_from_spec:
        if not model.peak.experts and contexts.size < 2 and prefills.size < 2:
            mark(
                "fixed_ms",
                "one context length and one prefill size with a dense verifier: the "
                "weights' read time (mem_eff) and the fixed time per pass are one constant",
            )
    else:
        for n in ("mem_eff", "compute_eff"):
            mark(n, "without hardware and model specs only its ratio to the peak terms shows")
        if contexts.size < 2:
            mark("kv_ms", "one context length: the KV read is not separable from seq_ms")
            mark("attn_ms", "one context length: attention is not separable from token_ms")
    if model.form == "pnorm" and batches.size < 3:
        mark("p", "fewer than three batch sizes: the bend of the p-norm is not determined")
    return out


def log_jacobian(
    model: RooflinePredictor, rows: StepInputs, names: Sequence[str], scale: Sequence[float]
) -> np.ndarray:
    """``∂ log step / ∂ (θ_j / scale_j)`` of ``rows`` ``(R, J)`` for the parameters
    ``names`` (:meth:`RooflinePredictor.parameters`), by forward differences of
    ``10⁻⁴ · scale_j`` (backward at an upper bound): how much each row's step time moves
    with each parameter, on a common scale."""
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
    return np.column_stack(cols) if cols else np.zeros((len(rows), 0))


# ---------------------------------------------------------------- the fit
def identify(
    names: Sequence[str],
    theta: np.ndarray,
    jac: np.ndarray,
    residuals: np.ndarray,
    rank_tol: float = 1e-7,
) -> tuple[dict[str, float], dict[str, str]]:
    """Standard errors of fitted parameters and those the fit leaves undetermined.

    ``names (P,)`` and ``theta (P,)`` the fitted parameters, ``jac (R, P)`` the residuals'
    Jacobian at ``theta``, ``residuals (R,)``. A parameter is undetermined when no row's
    residual depends on it (its column of the Jacobian scaled by ``max(|θ|, 10⁻⁶)`` is
    below ``rank_tol`` of the largest), when it carries a direction of the scaled
    Jacobian whose singular value is below ``rank_tol`` of the largest (only a
    combination with others is determined: the parameter weighing most in that
    direction is dropped, and again until the rest have full rank), or when its standard
    error exceeds its value. Standard errors: ``s²·(JᵀJ)⁺`` over the determined ones, ``s²``
    the residual variance on ``R − P'`` degrees of freedom (NaN without any). Returns
    ``(stderr by name, reason by name of the undetermined)``.
    """
    names = list(names)
    theta = np.asarray(theta, dtype=float)
    r = np.asarray(residuals, dtype=float)
    scale = np.maximum(np.abs(theta), 1e-6)
    js = jac * scale[None, :]
    why: dict[str, str] = {}
    norms = np.linalg.norm(js, axis=0)
    top = float(norms.max()) if norms.size else 0.0
    for j, n in enumerate(names):
        if norms[j] <= rank_tol * max(top, 1e-300):
            why[n] = "the fitted step times do not depend on it (no fitted row shows it)"
    keep = [j for j, n in enumerate(names) if n not in why]
    while keep:
        _, sv, vt = np.linalg.svd(js[:, keep], full_matrices=True)
        # fewer rows than parameters: the missing singular values are zero
        sv = np.concatenate([sv, np.zeros(vt.shape[0] - sv.size)])
        if sv[-1] >= rank_tol * max(sv[0], 1e-300):
            break
        comp = np.abs(vt[-1])
        j = keep[int(np.argmax(comp))]
        others = [names[keep[i]] for i in np.flatnonzero(comp > 0.1) if keep[i] != j]
        why[names[j]] = (
            "only its combination with "
            + (", ".join(others) or "the other parameters")
            + " is determined by these rows"
        )
        keep.remove(j)
    dof = r.size - len(keep)
    stderr = {n: float("nan") for n in names}
    if keep and dof > 0:
        s2 = float(r @ r) / dof
        cov = s2 * np.linalg.pinv(jac[:, keep].T @ jac[:, keep])
        for i, j in enumerate(keep):
            stderr[names[j]] = float(math.sqrt(max(cov[i, i], 0.0)))
            if stderr[names[j]] > max(abs(theta[j]), 1e-12) and names[j] not in why:
                why[names[j]] = (
                    f"its standard error ({stderr[names[j]]:.3g}) exceeds its value "
                    f"({theta[j]:.3g}): not determined by these rows"
                )
    return stderr, why


@dataclass(frozen=True, eq=False)
class RooflineFit:
    """Result of :func:`fit_roofline`.

    model : the fitted predictor (undetermined parameters kept at their input values).
    free : the names fitted. values : name → fitted value of every free parameter.
    stderr : name → standard error from the Jacobian (``s²·(JᵀJ)⁺``, ``s²`` the residual
    variance), NaN without residual degrees of freedom. undetermined : name → reason, for
    parameters the rows cannot determine (never to be written as values). residuals ``(R,)``:
    ``predicted / measured − 1``. cost : half the sum of squared residuals.
    """

    model: RooflinePredictor
    free: tuple[str, ...]
    values: dict[str, float]
    stderr: dict[str, float]
    undetermined: dict[str, str]
    residuals: np.ndarray
    cost: float

    def determined(self) -> dict[str, float]:
        """The fitted values the rows determine (``values`` less ``undetermined``)."""
        return {k: v for k, v in self.values.items() if k not in self.undetermined}


def _starts(space: ParameterSpace, free: list[str], x0: np.ndarray) -> list[np.ndarray]:
    grid: list[tuple[str, tuple[float, ...]]] = []
    if "compute_eff" in free:
        grid.append(("compute_eff", (1.0, 0.1, 0.01, 0.001)))
    if "p" in free:
        grid.append(("p", (2.0, 8.0)))
    starts = [x0.copy()]
    combos: list[dict[str, float]] = [{}]
    for key, vals in grid:
        combos = [dict(c, **{key: v}) for c in combos for v in vals]
    for c in combos:
        if not c:
            continue
        s = x0.copy()
        for key, v in c.items():
            s[free.index(key)] = v
        starts.append(s)
    return starts


def fit_roofline(
    model: RooflinePredictor,
    rows,
    measured_ms,
    *,
    free: Sequence[str] | None = None,
    starts: Sequence[Mapping[str, float]] = (),
    max_nfev: int = 800,
    rank_tol: float = 1e-7,
) -> RooflineFit:
    """Fit ``model``'s parameters to measured step times by least squares.

    rows : :class:`~allocator.model.steptime.base.StepInputs` ``(R,)`` (or the tuple of
    :meth:`~RooflinePredictor.step_ms` arguments). measured_ms ``(R,)`` > 0. free : names
    to fit (default: those fitted by default less :func:`undetermined`'s); the others stay
    at ``model``'s values. Minimises ``Σ_r (pred_r / measured_r − 1)²`` with
    :func:`scipy.optimize.least_squares` (trust region, within the bounds of
    :meth:`~RooflinePredictor.parameters`), from ``model``'s values, from each of
    ``starts`` (name → value overrides of those) and from a grid over ``compute_eff``
    (1, 0.1, 0.01, 0.001) and ``p`` (2, 8) when they are free; the lowest cost wins
    (``max_nfev`` evaluations per start). A free
    parameter the fitted rows still leave flat (a direction of the scaled Jacobian with a
    singular value below ``rank_tol`` of the largest, or whose standard error exceeds its
    value) is added to ``undetermined``.
    """
    from scipy.optimize import least_squares

    x = _rows(rows)
    y = np.asarray(measured_ms, dtype=float)
    if y.shape != (len(x),):
        raise ValueError(f"measured_ms must be ({len(x)},), got {y.shape}")
    if not np.all(np.isfinite(y) & (y > 0)):
        raise ValueError("measured_ms must be finite and > 0")
    space = model.parameters()
    why = undetermined(model, x, free)
    if free is None:
        names = [n for n, f in zip(space.names, space.fitted, strict=True) if f and n not in why]
    else:
        names = [n for n in free if n not in why]
    idx = np.array([space.index(n) for n in names], dtype=np.int64)
    lo, hi = space.lower[idx], space.upper[idx]
    x0 = np.clip(space.values[idx], lo, hi)

    def predict(theta: np.ndarray) -> np.ndarray:
        m = model.with_parameters(dict(zip(names, theta, strict=True)))
        return m.step_ms_of(x)

    def residuals(theta: np.ndarray) -> np.ndarray:
        r = predict(theta) / y - 1.0
        return np.where(np.isfinite(r), r, 1e6)

    if not names:
        r = residuals(x0)
        return RooflineFit(model, (), {}, {}, why, r, 0.5 * float(r @ r))
    candidates = _starts(space, names, x0)
    for extra in starts:
        s0 = x0.copy()
        for key, v in extra.items():
            if key in names:
                s0[names.index(key)] = v
        candidates.append(s0)
    best = None
    for s in candidates:
        s = np.clip(s, lo, hi)
        res = least_squares(
            residuals, s, bounds=(lo, hi), method="trf", x_scale="jac", max_nfev=max_nfev
        )
        # a later start must be clearly better: ties go to the earlier (the model's values)
        if best is None or res.cost < best.cost * (1 - 1e-9) - 1e-15:
            best = res
    assert best is not None
    theta = best.x
    fitted = model.with_parameters(dict(zip(names, theta, strict=True)))
    r = residuals(theta)
    stderr, flat = identify(names, theta, np.asarray(best.jac, dtype=float), r, rank_tol)
    why = {**why, **flat}
    return RooflineFit(
        model=fitted,
        free=tuple(names),
        values={n: float(v) for n, v in zip(names, theta, strict=True)},
        stderr=stderr,
        undetermined=why,
        residuals=r,
        cost=float(best.cost),
    )
