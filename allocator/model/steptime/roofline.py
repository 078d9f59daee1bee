"""The roofline step-time predictor: memory traffic against arithmetic, with context,
prefill, mixture-of-experts coverage and drafting (docs/design.md §8.12).

**One pass** of a model over ``n`` tokens, for ``b`` decoding sequences of ``C`` cached
tokens each and ``P`` prefilled prompt tokens (``n = b·t + P`` for the verifier, ``t``
tokens verified per sequence), all times in ms::

    memory_ms  = [W + X·cov(n) + κ·(b·C + n)] / η_m + fixed_ms + seq_ms·b
    compute_ms = [φ·b·t + α·b·t·C] / η_c
    prefill_ms = [φ·P + α·P·(P + 1)/2] / η_p
    pass_ms    = max(memory_ms, compute_ms) + prefill_ms          (form "max")
               = (memory_ms^p + compute_ms^p)^(1/p) + prefill_ms  (form "pnorm")

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

and the fitted *efficiency factors*: ``η_m = mem_eff``, ``η_c = compute_eff`` and
``η_p = prefill_eff`` in ``(0, 1]`` (the share of peak bandwidth, of peak throughput
reached by decoding and verified tokens, and by prefill tokens), ``fixed_ms`` (time per
pass the bandwidth does not explain: launches, synchronisation, the all-reduces'
latency where the link has no latency figure) and ``seq_ms`` (per decoding sequence per
pass: scheduling, sampling, block tables). ``fixed_ms`` and ``seq_ms`` sit inside the
memory side, as today's ``v0`` and ``v1`` do, so a compute-bound pass hides them.

**Prefill** is added to the pass, not put inside the max. In vLLM 0.33.0 a step is one
forward pass over the scheduled tokens of every request, decoding and prefilling
(``GPUModelRunner.execute_model``, ``vllm/v1/worker/gpu_model_runner.py``: the chunks of
``scheduler_output.num_scheduled_tokens`` flattened into one batch); the decoding tokens'
matmuls are memory-bound (the weight read hides their arithmetic: the max), a prompt
chunk's are compute-bound and run on top of that read, so a mixed step costs the decode
step plus the chunk's arithmetic, and a step of ``P`` prompt tokens alone
``W/η_m + fixed_ms + prefill_ms`` (affine in ``P`` with the attention's quadratic term,
the shape measured prefill latencies have). Prefill has its share of peak ``η_p`` apart
from decode's ``η_c`` (its long GEMMs and flash attention reach a different share than
the skinny decode GEMMs), fitted from time to first token
(:mod:`allocator.calibration.rate_fit`). With no prefill in a step (``P = 0``,
``prefill_ms = 0``) the pass is exactly the decode pass. The memory side still counts the
prompt tokens' KV write and the experts they touch.

**Shapes** (:class:`~allocator.core.model_spec.ModelSpec`, set by the spec, never fitted).
On a layer with a sliding window ``w`` a decoding token reads and attends to
``min(C, w)`` cached tokens and a prompt token to at most ``w``: with ``s_w`` the share of
the layers of window ``w``, ``C`` above becomes ``C·(1 − Σ s_w) + Σ s_w·min(C, w)``
(:meth:`PeakTerms.attended`) and ``P(P + 1)/2`` the windowed count of
:meth:`PeakTerms.prefill_pairs`. Latent attention (DeepSeek-V2/V3) caches one latent per
token and layer (``κ``), decodes in vLLM's absorbed form (``α``) and prefills in the
per-head form, ``prefill_attn`` times ``α`` per pair. On ``count`` GPUs ``κ`` is the
replica's: times the copies tensor parallelism keeps
(:meth:`~allocator.core.model_spec.ModelSpec.tp_kv_factor`; "Tensor parallelism" below).

**Tensor parallelism.** On ``count = n > 1`` GPUs the replica's bandwidth and throughput
are ``n`` times one GPU's (:class:`~allocator.core.hardware.Hardware`): each GPU reads
``1/n`` of the weights and of the KV heads at its own rate, so ``W``, ``X``, ``φ`` and
``α`` above are one GPU's times already, and ``κ`` counts replicated KV heads once per
copy. What the GPUs add is communication: two all-reduces per layer, after attention's
output projection and after the MLP (or MoE block), each of the step's activations,
``hidden × n_tok × 2`` bytes (bf16/fp16 activations, also under fp8 or 4-bit weights;
:func:`activation_bytes`), summed by a ring over the replica's link
(:func:`~allocator.core.interconnect.ring_allreduce_ms`, ``B`` per direction, ``L``
per step)::

    comm_ms = [X_ar·n_tok + L_ar] / η_comm
    X_ar = allreduce_ms       = 10³ · 2·layers · 2(n − 1)/n · hidden·2 / B
    L_ar = allreduce_fixed_ms = 10³ · 2·layers · 2(n − 1) · L
    pass_ms = combine(memory_ms, compute_ms) + comm_ms

with ``η_comm = comm_eff`` in ``(0, 1]`` (default 1, fitted by ``calibrate`` where the
rows determine it). The term is **added**, not put inside the max: in vLLM 0.33.0
``RowParallelLinear.forward`` (``vllm/model_executor/layers/linear.py``) calls
``tensor_model_parallel_all_reduce`` on its partial output and returns the sum, which
the next layer's norm and projections read, so each all-reduce sits on the layer chain
between one layer's matmuls and the next; nothing of the forward pass runs beside it
(a fused all-reduce + RMSNorm saves a kernel, not the transfer). vLLM's custom
all-reduce (``vllm/distributed/device_communicators/custom_all_reduce.py``,
``should_custom_ar``: messages under ``max_size``, 8 MiB by default, on two GPUs or
fully connected ones) replaces NCCL's ring for decode-sized messages with its own
kernels; they are not modelled apart: the ring's time at the link's peak is the model,
``comm_eff`` takes the difference. Left out: the embedding's all-reduce and the logits'
gather, one each per pass. On one GPU ``comm_ms = 0`` exactly and every step time is
what it was. A drafter with a spec all-reduces over the same GPUs (vLLM runs the draft
model in the verifier's tensor-parallel group), with its own shape.

**Expert parallelism** (``serving.hardware.ep = count``, a mixture-of-experts model).
vLLM 0.33.0's ``--enable-expert-parallel`` with one data-parallel rank gives each MoE
layer ``ep_size = tp_size`` and ``tp_size = 1`` (``FusedMoEParallelConfig.make``,
``vllm/model_executor/layers/fused_moe/config.py``): each GPU holds ``E/n`` whole
experts; attention, dense layers and shared experts stay tensor-parallel. No all-to-all
runs: the default backend is ``allgather_reducescatter`` (``ParallelConfig.
all2all_backend``, ``vllm/config/parallel.py``), but the MoE layer uses it only with more
than one data-parallel (or context-parallel) rank or sequence-parallel MoE
(``use_all2all_kernels`` there; ``ParallelConfig.use_sequence_parallel_moe`` needs
``data_parallel_size > 1``). The tokens are already on every GPU after attention's
all-reduce; each GPU applies its experts to the tokens routed to them, and the layer's
partial outputs are all-reduced over the group as under tensor parallelism
(``_maybe_reduce_final_output``, ``fused_moe/runner/moe_runner.py``: ``tp_size > 1 or
ep_size > 1``). So the communication is the same two all-reduces per layer (a ring
all-reduce is a reduce-scatter plus an all-gather, ``2(n − 1)/n · M / B``, the cost the
all-gather + reduce-scatter backend would have), ``comm_ms`` and ``comm_eff`` unchanged.
What changes is the expert read: a GPU reads its touched experts whole at one GPU's
bandwidth, ``n·X`` each, and the pass waits for the busiest GPU, so ``cov(n_tok)``
becomes ``n · E[max_g D_g]`` (:meth:`PeakTerms.coverage`,
:mod:`.experts`: each GPU reads ``cov/n`` on average, tensor parallelism's
bytes; the imbalance is what expert parallelism costs at small batches). The experts'
arithmetic imbalance is not modelled. A dense model with ``ep > 1`` is refused.

**Not modelled:** pipeline parallelism (vLLM 0.33.0 keeps ``pp`` batches in flight,
``VllmConfig.max_concurrent_batches`` in ``vllm/config/vllm.py``, each a different set
of sequences through the stages, ``EngineCore.step_with_batch_queue`` in
``vllm/v1/engine/core.py``). A ``serving.hardware.pp`` above 1 is refused
(:class:`~allocator.exceptions.NotModelledError`), never taken as tensor parallelism.

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
values, bounds, which the specs determine, which are fitted by default) and
:meth:`RooflinePredictor.with_parameters` its inverse; the fit itself (which parameters a
set of rows determines, the least squares) is calibration's,
:mod:`allocator.calibration.roofline_fit`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from ...core.interconnect import ring_allreduce_ms
from ...exceptions import InputError, NotModelledError
from . import roofline_row
from .base import StepInputs, StepTimePredictor, step_inputs
from .experts import busiest_gpu_experts, expected_experts

if TYPE_CHECKING:
    from ...core.hardware import Hardware
    from ...core.model_spec import ModelSpec

__all__ = [
    "LinearForm",
    "ParameterSpace",
    "PeakTerms",
    "DrafterCost",
    "RooflinePredictor",
    "combine",
    "expected_experts",
]

#: Peak-term names, in vector order.
PEAK_NAMES: tuple[str, ...] = (
    "weights_ms",
    "expert_ms",
    "kv_ms",
    "token_ms",
    "attn_ms",
    "allreduce_ms",
    "allreduce_fixed_ms",
)
#: Efficiency-factor names of the verifier, in vector order (``p`` only for "pnorm").
FACTOR_NAMES: tuple[str, ...] = (
    "mem_eff",
    "compute_eff",
    "fixed_ms",
    "seq_ms",
    "overhead_ms",
    "comm_eff",
    "prefill_eff",
)
#: Lower bound of an efficiency factor.
MIN_EFF = 1e-4
#: Bounds of the p-norm exponent.
P_BOUNDS = (1.0, 64.0)


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


#: All-reduces per layer under tensor parallelism: after attention's output projection and
#: after the MLP's down projection (or the MoE block), each a row-parallel layer whose
#: partial sums vLLM 0.33.0 all-reduces (``RowParallelLinear.forward``,
#: ``vllm/model_executor/layers/linear.py``).
ALLREDUCES_PER_LAYER = 2


def activation_bytes(model: ModelSpec) -> float:
    """Bytes of one activation value between layers: the model's 16-bit dtype, also for
    weights quantised to 8 or 4 bits (their layers take and return bf16; vLLM all-reduces
    the row-parallel layer's output in that dtype); 4 for fp32."""
    return 4.0 if model.dtype == "fp32" else 2.0


def tp_allreduce(hardware: Hardware, model: ModelSpec) -> tuple[float, float]:
    """``(per token, per pass)`` ms of the tensor-parallel all-reduces of ``model`` on
    ``hardware`` at the link's peak: ``2·layers`` ring all-reduces
    (:func:`~allocator.core.interconnect.ring_allreduce_ms`) of ``hidden × activation
    bytes`` per processed token over ``hardware.tp`` GPUs. Per token the bandwidth term
    ``2·layers · 2(n − 1)/n · hidden·bytes / B``, per pass the latency term ``2·layers ·
    2(n − 1) · L`` (0 where the link has no latency figure); ``(0, 0)`` on one GPU."""
    tp = hardware.tp
    if tp <= 1:
        return 0.0, 0.0
    ln = hardware.link
    calls = ALLREDUCES_PER_LAYER * model.layers
    message = model.hidden * activation_bytes(model)
    per_token = calls * float(ring_allreduce_ms(message, tp, ln.bandwidth_bytes_s))
    per_pass = calls * 1e3 * 2.0 * (tp - 1) * ln.latency_s
    return per_token, per_pass


@dataclass(frozen=True)
class PeakTerms:
    """A model's pass costs at the replica's peak rates, ms (module docstring).

    weights_ms : its non-expert weights read once. expert_ms : one routed expert (all its
    layers) read once. kv_ms : one token of KV cache read or written. token_ms : linear
    layers' arithmetic per token. attn_ms : attention arithmetic per (query token × cached
    token). allreduce_ms : the tensor-parallel all-reduces of one processed token over the
    replica's link, allreduce_fixed_ms : their latency per pass (both 0 on one GPU;
    module docstring, "Tensor parallelism"). experts, experts_per_token : ``E`` and
    ``k_e`` (0 for a dense model).
    windows : ``(window, share of the layers)`` of the model's sliding windows (``()``:
    full attention everywhere; :meth:`attended`). prefill_attn : prefill's attention
    arithmetic per pair over ``attn_ms``'s (1 but for latent attention). expert_gpus :
    the GPUs the routed experts are spread over whole (expert parallelism; 1: each
    expert split by tensor parallelism). The last five are the model's shape and
    placement, set by the specs, never fitted.
    """

    weights_ms: float = 0.0
    expert_ms: float = 0.0
    kv_ms: float = 0.0
    token_ms: float = 0.0
    attn_ms: float = 0.0
    allreduce_ms: float = 0.0
    allreduce_fixed_ms: float = 0.0
    experts: int = 0
    experts_per_token: int = 0
    windows: tuple[tuple[int, float], ...] = ()
    prefill_attn: float = 1.0
    expert_gpus: int = 1

    @classmethod
    def from_specs(cls, hardware: Hardware, model: ModelSpec) -> PeakTerms:
        """The peak terms of ``model`` on ``hardware``: bytes over the replica's bandwidth
        and FLOPs over its dense throughput in the model's compute dtype, in ms. The KV
        bytes are the replica's: times :meth:`ModelSpec.tp_kv_factor` of its GPUs. The
        all-reduces: two per layer of ``hidden × activation bytes`` per token, ring over
        ``hardware.link`` (:func:`tp_allreduce`)."""
        bw = hardware.bandwidth_bytes_s
        flops = hardware.flops(model.compute_dtype, f"{model.field}.dtype")
        kv = model.kv_bytes_per_token * model.tp_kv_factor(hardware.count)
        per_token, per_pass = tp_allreduce(hardware, model)
        ep = hardware.ep if model.experts else 1
        if model.experts % ep:
            raise NotModelledError(
                "serving.hardware.ep",
                f"{model.experts} experts do not split evenly over {ep} GPUs",
            )
        return cls(
            weights_ms=1e3 * model.dense_read_bytes / bw,
            expert_ms=1e3 * model.expert_bytes / bw,
            kv_ms=1e3 * kv / bw,
            token_ms=1e3 * model.flops_per_token / flops,
            attn_ms=1e3 * model.attention_flops_per_context / flops,
            allreduce_ms=per_token,
            allreduce_fixed_ms=per_pass,
            experts=model.experts,
            experts_per_token=model.experts_per_token,
            windows=model.window_shares,
            prefill_attn=model.prefill_attention_ratio,
            expert_gpus=ep,
        )

    def attended(self, context: np.ndarray) -> np.ndarray:
        """Cached tokens a decoding token reads and attends to, per layer on average:
        ``C·(1 − Σ s_w) + Σ s_w·min(C, w)`` over the windows ``w`` of layer share ``s_w``
        (``C`` itself without windows)."""
        if not self.windows:
            return context
        full = 1.0 - sum(s for _, s in self.windows)
        return context * full + sum(s * np.minimum(context, w) for w, s in self.windows)

    def prefill_pairs(self, prompt: np.ndarray) -> np.ndarray:
        """(query, key) pairs of a prompt chunk of ``P`` tokens without a cached prefix,
        per layer on average, times :attr:`prefill_attn`: ``P(P + 1)/2`` on full layers,
        ``Σ_{i≤P} min(i, w)`` on a window ``w`` (``P(P + 1)/2`` up to ``P = w``, then
        ``w(w + 1)/2 + (P − w)·w``)."""
        pairs = prompt * (prompt + 1.0) / 2.0
        if self.windows:
            full = 1.0 - sum(s for _, s in self.windows)
            pairs = pairs * full
            for w, s in self.windows:
                inside = prompt * (prompt + 1.0) / 2.0
                past = w * (w + 1.0) / 2.0 + (prompt - w) * w
                pairs = pairs + s * np.where(prompt <= w, inside, past)
        return pairs if self.prefill_attn == 1.0 else pairs * self.prefill_attn

    def coverage(self, n: np.ndarray) -> np.ndarray:
        """Routed experts read by ``n`` tokens, in units of ``expert_ms``: ``cov(n)``
        (:func:`expected_experts`), or under expert parallelism ``n_ep`` times the busiest
        GPU's whole experts (:func:`.experts.busiest_gpu_experts`; module
        docstring, "Expert parallelism")."""
        e, k = self.experts, self.experts_per_token
        if self.expert_gpus <= 1:
            return expected_experts(n, e, k)
        return self.expert_gpus * busiest_gpu_experts(n, e, k, self.expert_gpus)

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
    bool: fitted by default (:func:`allocator.calibration.roofline_fit.fit_roofline`'s ``free``
    when none is given, before :func:`~allocator.calibration.roofline_fit.undetermined`
    removes what the rows cannot determine).
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
    compute_eff, fixed_ms, seq_ms, overhead_ms : the verifier's fitted factors. comm_eff :
    the share of the link's peak its all-reduces reach (verifier and drafters). form :
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
    comm_eff: float = 1.0
    prefill_eff: float = 1.0
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
        for key in ("mem_eff", "compute_eff", "comm_eff", "prefill_eff"):
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
        if hardware.ep > 1 and not model.experts:
            raise InputError(
                "serving.hardware.ep",
                f"{hardware.ep} needs a mixture-of-experts verifier; {model.field} is dense",
            )
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
            + peak.expert_ms * peak.coverage(n)
            + peak.kv_ms * (b * peak.attended(ctx) + written)
        )
        memory = traffic / self.mem_eff + fixed_ms + seq_ms * b
        compute = (peak.token_ms * n + peak.attn_ms * attn_pairs) / self.compute_eff
        return memory, compute

    def verifier_parts(self, x: StepInputs) -> tuple[np.ndarray, np.ndarray]:
        """The verifier pass's memory time and its decoding tokens' compute time ``(B,)`` ms
        (before combining); the prefill tokens' arithmetic is :meth:`prefill_compute_ms`.

        The memory side counts every processed token (``n = b·t + P``: its KV write and
        the experts it touches); the compute side only the ``b·t`` decoding tokens. The
        linear layers' arithmetic is evaluated as ``(φ·b)·t``, the order in which
        calibrate's fitted form ``c·b·t`` has always been computed, so that
        :meth:`from_linear` gives today's step times to the last bit."""
        b, t, c, pre = x.decode_seqs, x.verified.astype(float), x.context, x.prefill
        n = b * t + pre
        pairs = b * t * self.peak.attended(c)
        memory, _ = self._memory_compute(self.peak, n, b, c, pairs, self.fixed_ms, self.seq_ms)
        pk = self.peak
        compute = (pk.token_ms * b * t + pk.attn_ms * pairs) / self.compute_eff
        return memory, compute

    def prefill_compute_ms(self, x: StepInputs) -> np.ndarray:
        """The step's prefill tokens' arithmetic ``(B,)`` ms, at their own share of peak
        ``prefill_eff``: ``[φ·P + α·pairs(P)] / η_p`` (0 where the step prefills nothing);
        added to the step, not put inside the max (module docstring, "Prefill")."""
        pre = x.prefill
        pk = self.peak
        return (pk.token_ms * pre + pk.attn_ms * pk.prefill_pairs(pre)) / self.prefill_eff

    def _comm(self, peak: PeakTerms, n: np.ndarray) -> np.ndarray:
        if not (peak.allreduce_ms or peak.allreduce_fixed_ms):
            return np.zeros_like(n, dtype=float)
        ar = peak.allreduce_ms * n + peak.allreduce_fixed_ms
        return np.where(n > 0, ar / self.comm_eff, 0.0)

    def comm_ms(self, x: StepInputs) -> np.ndarray:
        """The verifier pass's tensor-parallel all-reduces ``(B,)`` ms, added to
        ``combine(memory, compute)`` (module docstring, "Tensor parallelism"): ``(X_ar·n +
        L_ar) / comm_eff`` over its ``n = b·t + P`` tokens; 0 on one GPU."""
        return self._comm(self.peak, x.decode_seqs * x.verified + x.prefill)

    @cached_property
    def by_floats(self) -> bool:
        """One row is computed on floats (:func:`.roofline_row.by_floats`), asked once."""
        return roofline_row.by_floats(self)

    def verify_ms(self, x: StepInputs) -> np.ndarray:
        """The verifier's pass ``(B,)`` ms; NaN for an empty step."""
        if len(x) == 1 and self.by_floats:  # one step: on floats, same bits
            return np.array([roofline_row.verify_ms(self, x)])
        memory, compute = self.verifier_parts(x)
        out = combine(memory, compute, self.form, self.p) + self.comm_ms(x)
        if np.any(x.prefill > 0):
            out = out + self.prefill_compute_ms(x)
        return np.where((x.decode_seqs > 0) | (x.prefill > 0), out, np.nan)

    def drafter_pass_ms(self, x: StepInputs) -> np.ndarray:
        """Each drafter's pass ``(B, N)`` ms for the rows' tokens per pass (0 where a row
        drafts nothing)."""
        if len(x) == 1 and self.by_floats:  # one step: on floats, same bits
            return np.array(roofline_row.drafter_passes(self, x), float).reshape(1, -1)
        s = x.draft_steps.astype(float)
        m = x.members.sum(axis=1).astype(float)
        b, c = x.decode_seqs, x.context
        with np.errstate(invalid="ignore", divide="ignore"):
            q = np.where((s > 0) & (m > 0), (x.verified - 1.0) / (s * m), 0.0)
        nd = b * q
        out = np.zeros(x.members.shape)
        for i, d in enumerate(self.drafters):
            pairs = nd * d.peak.attended(c)
            memory, compute = self._memory_compute(d.peak, nd, b, c, pairs, d.fixed_ms, d.seq_ms)
            out[:, i] = combine(memory, compute, self.form, self.p) + self._comm(d.peak, nd)
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
        if self.has_comm:
            raise InputError(
                "serving.hardware.count",
                "a tensor-parallel replica has no linear form: its all-reduces add to the "
                "max of memory and compute",
            )
        pk, em, ec = self.peak, self.mem_eff, self.compute_eff
        w = pk.kv_ms / em if self.kv_write else 0.0

        def seen(p: PeakTerms) -> float:
            return float(p.attended(np.asarray(float(context)))) if p.windows else context

        def d1(d: DrafterCost) -> float:
            written = 1.0 if self.kv_write else 0.0
            return d.seq_ms + d.peak.kv_ms * (seen(d.peak) + written) / em

        return LinearForm(
            v0=pk.weights_ms / em + self.fixed_ms,
            v1=self.seq_ms + pk.kv_ms * seen(pk) / em,
            w=w,
            c=(pk.token_ms + pk.attn_ms * seen(pk)) / ec,
            d0=np.array([d.peak.weights_ms / em + d.fixed_ms for d in self.drafters]),
            d1=np.array([d1(d) for d in self.drafters]),
            c_d=np.array(
                [(d.peak.token_ms + d.peak.attn_ms * seen(d.peak)) / ec for d in self.drafters]
            ),
            overhead=self.overhead_ms,
        )

    @property
    def has_comm(self) -> bool:
        """The verifier or a drafter all-reduces (tensor parallelism on several GPUs)."""
        peaks = (self.peak, *(d.peak for d in self.drafters))
        return any(p.allreduce_ms or p.allreduce_fixed_ms for p in peaks)

    # ------------------------------------------------------------ parameter vector
    def parameters(self) -> ParameterSpace:
        """The parameter-vector view (:class:`ParameterSpace`).

        Order: ``mem_eff, compute_eff, fixed_ms, seq_ms, overhead_ms``, ``p`` (form
        "pnorm" only), ``comm_eff``, ``prefill_eff``, the verifier's peak terms, then per drafter
        ``draft.<name>.`` ``fixed_ms, seq_ms`` and its peak terms. Peak terms from specs
        are ``spec_determined``. Fitted by default: with a verifier spec its factors (and
        ``p``; ``comm_eff`` only where a model all-reduces, on more than one GPU); without
        one ``weights_ms`` (today's ``v0``), ``seq_ms``, ``token_ms``, ``overhead_ms``
        (and ``p``; ``expert_ms``, ``kv_ms``, ``attn_ms`` where nonzero), the efficiencies
        then staying at their values (without specs only their ratio to
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
        add("comm_eff", self.comm_eff, MIN_EFF, 1.0, False, vs and self.has_comm)
        add("prefill_eff", self.prefill_eff, MIN_EFF, 1.0, False, vs)
        for key, v in zip(PEAK_NAMES, self.peak.values(), strict=True):
            default = key in ("weights_ms", "token_ms") or v > 0
            if key == "expert_ms" and not self.peak.experts:
                default = False
            if key.startswith("allreduce"):
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
