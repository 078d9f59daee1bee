"""Accelerators: a bundled table of vendor figures, and a replica of ``count`` of them.

Each GPU of :data:`GPUS` carries its dense peak tensor throughput per dtype (TFLOP/s, or
TOPS for int8), its memory bandwidth (TB/s, 10¹² bytes/s) and its memory capacity (GB as
the vendor prints it), each with the vendor document it is taken from. Datasheets often
print the **sparse** tensor figure (2:4 structured sparsity) with an asterisk or a
footnote; the table holds the **dense** figure, and where the document prints only the
sparse one it is halved, as that document's footnote says, and the source text says so.
A dtype a document gives no figure for is absent: asking for it is an error, never a
guess.

A replica of ``count`` GPUs under tensor parallelism has ``count`` times the bandwidth,
throughput and memory of one GPU: each GPU holds ``1/count`` of the weights and of the
KV heads (replicated KV heads, :meth:`~allocator.core.model_spec.ModelSpec.tp_kv_factor`,
count once per copy) and reads them at its own rate, which is the aggregate rate on the
aggregate bytes. What that leaves out is the all-reduce between the GPUs: it runs over
the replica's link (:attr:`Hardware.link`: each GPU's default intra-node link of
:mod:`allocator.core.interconnect`, or ``serving.hardware.interconnect``), and the
roofline adds it as its own term (docs/design.md §8.12). Any imbalance of the split is
ignored.

Expert parallelism (``ep``) is vLLM's ``--enable-expert-parallel`` with one
data-parallel rank: ``ep`` equals ``count``, the MoE layers' experts spread whole over the
tensor-parallel group's GPUs while attention stays tensor-parallel (the roofline's
"Expert parallelism", docs/design.md §8.12); any other ``ep`` above 1 is refused (more
data-parallel ranks are more replicas here). Pipeline parallelism (``pp``) is not
modelled: a value above 1 is refused (:class:`~allocator.exceptions.NotModelledError`
naming the field), never silently treated as tensor parallelism.

Left out for want of a vendor figure for every field: none of the six asked for. GPUs
not listed here are refused, naming the ones that are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..exceptions import InputError, NotModelledError
from ..validate import whole
from .interconnect import Link, fabric_links, known_links, link

__all__ = ["GPU", "GPUS", "Hardware", "gpu", "known_gpus"]


@dataclass(frozen=True)
class GPU:
    """One accelerator's vendor figures.

    name : the table key (``h100-sxm``).
    product : the vendor's product name and form factor.
    dense_tflops : dense peak tensor throughput by dtype (``bf16``, ``fp16``, ``fp8``,
        ``int8``), TFLOP/s (TOPS for ``int8``).
    bandwidth_tb_s : peak memory bandwidth, TB/s (10¹² bytes/s).
    memory_gb : memory capacity, GB as printed by the vendor.
    link : its default intra-node link (:data:`allocator.core.interconnect.LINKS`), the one
        its vendor's 8-GPU platform joins it with (the L40S, a PCIe card: PCIe Gen4 x16).
    sources : for each of ``dense_tflops.<dtype>``, ``bandwidth_tb_s``, ``memory_gb``:
        the document (title, URL, revision or date where printed) and the printed text.
    """

    name: str
    product: str
    dense_tflops: Mapping[str, float]
    bandwidth_tb_s: float
    memory_gb: float
    sources: Mapping[str, str] = field(default_factory=dict)
    link: str = ""

    def __reduce__(self):
        # the read-only mappings do not pickle: rebuild them, so that a problem on a GPU of
        # the table can be sent to worker processes and Ray
        return (
            _gpu,
            (self.name, self.product, dict(self.dense_tflops), self.bandwidth_tb_s,
             self.memory_gb, dict(self.sources), self.link),
        )  # fmt: skip


def _gpu(name, product, dense_tflops, bandwidth_tb_s, memory_gb, sources, link_name) -> GPU:
    return GPU(
        name,
        product,
        MappingProxyType(dict(dense_tflops)),
        float(bandwidth_tb_s),
        float(memory_gb),
        MappingProxyType(dict(sources)),
        link_name,
    )


_H100_DS = (
    "NVIDIA H100 Tensor Core GPU Datasheet, "
    "https://resources.nvidia.com/en-us-gpu-resources/h100-datasheet-24306 (no revision "
    "printed), and the H100 product page https://www.nvidia.com/en-us/data-center/h100/, "
    "H100 SXM column"
)
_H200_DS = (
    "NVIDIA H200 Tensor Core GPU Datasheet (SC23, document 3002446), "
    "https://nvdam.widen.net/s/nb5zzzsjdf/hpc-datasheet-sc23-h200-datasheet-3002446, and the "
    "H200 product page https://www.nvidia.com/en-us/data-center/h200/, H200 SXM column"
)
_A100_DS = (
    "NVIDIA A100 Tensor Core GPU datasheet (document 1521051, revision r2), "
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "a100-80gb-datasheet-update-nvidia-us-1521051-r2-web.pdf, A100 80GB SXM column"
)
_L40S_DS = (
    "NVIDIA L40S product page and datasheet, https://www.nvidia.com/en-us/data-center/l40s/ "
    "(no revision printed)"
)
_MI300X_DS = (
    "AMD Instinct MI300X Accelerator data sheet, https://www.amd.com/content/dam/amd/en/"
    "documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf (no revision "
    "printed), with its footnotes MI300-17 (peak throughput) and MI300-05A (memory)"
)
_B200_DS = (
    "NVIDIA HGX platform page, https://www.nvidia.com/en-us/data-center/hgx/, HGX B200 column "
    "of the per-GPU specifications (no revision printed)"
)

#: The bundled GPUs, by name.
GPUS: Mapping[str, GPU] = MappingProxyType(
    {
        g.name: g
        for g in (
            _gpu(
                "h100-sxm",
                "NVIDIA H100 SXM 80GB",
                {"bf16": 989.5, "fp16": 989.5, "fp8": 1979.0, "int8": 1979.0},
                3.35,
                80.0,
                {
                    "dense_tflops.bf16": f"{_H100_DS}: 'BFLOAT16 Tensor Core* 1,979 teraFLOPS', "
                    "footnote '* With sparsity'; dense = 1,979 / 2",
                    "dense_tflops.fp16": f"{_H100_DS}: 'FP16 Tensor Core* 1,979 teraFLOPS', "
                    "footnote '* With sparsity'; dense = 1,979 / 2",
                    "dense_tflops.fp8": f"{_H100_DS}: 'FP8 Tensor Core* 3,958 teraFLOPS', "
                    "footnote '* With sparsity'; dense = 3,958 / 2",
                    "dense_tflops.int8": f"{_H100_DS}: 'INT8 Tensor Core* 3,958 TOPS', "
                    "footnote '* With sparsity'; dense = 3,958 / 2",
                    "bandwidth_tb_s": f"{_H100_DS}: 'GPU Memory Bandwidth 3.35TB/s'",
                    "memory_gb": f"{_H100_DS}: 'GPU Memory 80GB'",
                },
                "nvlink4",
            ),
            _gpu(
                "h200",
                "NVIDIA H200 SXM 141GB",
                {"bf16": 989.5, "fp16": 989.5, "fp8": 1979.0, "int8": 1979.0},
                4.8,
                141.0,
                {
                    "dense_tflops.bf16": f"{_H200_DS}: 'BFLOAT16 Tensor Core 1,979 TFLOPS', "
                    "footnoted 'With sparsity'; dense = 1,979 / 2",
                    "dense_tflops.fp16": f"{_H200_DS}: 'FP16 Tensor Core 1,979 TFLOPS', "
                    "footnoted 'With sparsity'; dense = 1,979 / 2",
                    "dense_tflops.fp8": f"{_H200_DS}: 'FP8 Tensor Core 3,958 TFLOPS', "
                    "footnoted 'With sparsity'; dense = 3,958 / 2",
                    "dense_tflops.int8": f"{_H200_DS}: 'INT8 Tensor Core 3,958 TFLOPS', "
                    "footnoted 'With sparsity'; dense = 3,958 / 2",
                    "bandwidth_tb_s": f"{_H200_DS}: 'GPU Memory Bandwidth 4.8TB/s'",
                    "memory_gb": f"{_H200_DS}: 'GPU Memory 141GB'",
                },
                "nvlink4",
            ),
            _gpu(
                "a100-80g",
                "NVIDIA A100 80GB SXM",
                {"bf16": 312.0, "fp16": 312.0, "int8": 624.0},
                2.039,
                80.0,
                {
                    "dense_tflops.bf16": f"{_A100_DS}: 'BFLOAT16 Tensor Core 312 TFLOPS | "
                    "624 TFLOPS*', footnote '* With sparsity'; the dense figure is the first",
                    "dense_tflops.fp16": f"{_A100_DS}: 'FP16 Tensor Core 312 TFLOPS | "
                    "624 TFLOPS*'; the dense figure is the first",
                    "dense_tflops.int8": f"{_A100_DS}: 'INT8 Tensor Core 624 TOPS | "
                    "1248 TOPS*'; the dense figure is the first",
                    "bandwidth_tb_s": f"{_A100_DS}: 'GPU Memory Bandwidth 2,039GB/s'",
                    "memory_gb": f"{_A100_DS}: 'GPU Memory 80GB HBM2e'",
                },
                "nvlink3",
            ),
            _gpu(
                "l40s",
                "NVIDIA L40S",
                {"bf16": 362.05, "fp16": 362.05, "fp8": 733.0},
                0.864,
                48.0,
                {
                    "dense_tflops.bf16": f"{_L40S_DS}: 'BFLOAT16 Tensor Core TFLOPS 362.05 | "
                    "733*', footnote '* With Sparsity'; the dense figure is the first",
                    "dense_tflops.fp16": f"{_L40S_DS}: 'FP16 Tensor Core 362.05 | 733*'; the "
                    "dense figure is the first",
                    "dense_tflops.fp8": f"{_L40S_DS}: 'FP8 Tensor Core 733 | 1,466*'; the "
                    "dense figure is the first (the page gives no int8 figure for the L40S: "
                    "int8 left out)",
                    "bandwidth_tb_s": f"{_L40S_DS}: 'Memory Bandwidth 864GB/s'",
                    "memory_gb": f"{_L40S_DS}: 'GPU Memory 48GB GDDR6 with ECC'",
                },
                "pcie4-x16",
            ),
            _gpu(
                "mi300x",
                "AMD Instinct MI300X OAM",
                {"bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9, "int8": 2614.9},
                5.3,
                192.0,
                {
                    "dense_tflops.bf16": f"{_MI300X_DS}: '1307.4 TFLOPS peak theoretical "
                    "Bfloat16 format precision (BF16)' (dense; 2,614.9 'with sparsity')",
                    "dense_tflops.fp16": f"{_MI300X_DS}: '1307.4 TFLOPS peak theoretical half "
                    "precision (FP16)' (dense; 2,614.9 'with sparsity')",
                    "dense_tflops.fp8": f"{_MI300X_DS}: '2614.9 TFLOPS peak theoretical 8-bit "
                    "precision (FP8)' (dense; 5,229.8 'with sparsity')",
                    "dense_tflops.int8": f"{_MI300X_DS}: '2614.9 TOPs INT8' (dense; 5,229.8 "
                    "'with sparsity')",
                    "bandwidth_tb_s": f"{_MI300X_DS}: 5.3 TB/s peak memory bandwidth "
                    "(footnote MI300-05A: '5.325 TB/s peak theoretical memory bandwidth', "
                    "8,192-bit bus x 5.2 Gbps / 8; the table's 5.3 is used)",
                    "memory_gb": f"{_MI300X_DS}: footnote MI300-05A '192 GB HBM3 memory capacity'",
                },
                "infinity-fabric-mi300x",
            ),
            _gpu(
                "b200",
                "NVIDIA B200 (HGX B200)",
                {"bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0, "int8": 4500.0},
                7.7,
                180.0,
                {
                    "dense_tflops.bf16": f"{_B200_DS}: 'FP16/BF16 Tensor Core² 4.5 PFLOPS', "
                    "footnote 2 'Specification in sparse. Dense is one-half sparse spec "
                    "shown.'; dense = 4,500 / 2 TFLOPS",
                    "dense_tflops.fp16": f"{_B200_DS}: 'FP16/BF16 Tensor Core² 4.5 PFLOPS', "
                    "footnote 2; dense = 4,500 / 2 TFLOPS",
                    "dense_tflops.fp8": f"{_B200_DS}: 'FP8/FP6 Tensor Core² 9 PFLOPS', "
                    "footnote 2; dense = 9,000 / 2 TFLOPS",
                    "dense_tflops.int8": f"{_B200_DS}: 'INT8 Tensor Core² 9 POPS', footnote "
                    "2; dense = 9,000 / 2 TOPS",
                    "bandwidth_tb_s": f"{_B200_DS}: 'GPU Memory | Bandwidth 180 GB HBM3E | "
                    "7.7 TB/s'",
                    "memory_gb": f"{_B200_DS}: 'GPU Memory | Bandwidth 180 GB HBM3E | 7.7 TB/s'",
                },
                "nvlink5",
            ),
        )
    }
)


def known_gpus() -> tuple[str, ...]:
    """The names of :data:`GPUS`, sorted."""
    return tuple(sorted(GPUS))


def gpu(name: str, field_name: str = "serving.hardware.gpu") -> GPU:
    """The bundled GPU called ``name`` (case-insensitive); :class:`InputError` on
    ``field_name`` listing the known names otherwise."""
    key = str(name).strip().lower()
    if key not in GPUS:
        raise InputError(field_name, f"unknown GPU {name!r} (known: {', '.join(known_gpus())})")
    return GPUS[key]


@dataclass(frozen=True)
class Hardware:
    """A replica: ``count`` GPUs of one kind under tensor parallelism.

    Aggregate figures (:attr:`bandwidth_bytes_s`, :attr:`memory_bytes`,
    :meth:`flops`) are ``count`` times one GPU's (module docstring). interconnect : the
    link between its GPUs (:data:`allocator.core.interconnect.LINKS`), ``None`` for the
    GPU's default. pp : pipeline-parallel degree, 1 (anything else is refused as not
    modelled). ep : expert-parallel degree, 1 or ``count`` (module docstring).
    """

    gpu: GPU
    count: int = 1
    interconnect: str | None = None
    pp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        whole(self.count, "serving.hardware.count", lo=1, floats=True, error=InputError)
        if self.interconnect is not None:
            object.__setattr__(self, "interconnect", link(self.interconnect).name)
            own = self.gpu.link
            ok = fabric_links(own) if own else set(known_links())
            if self.interconnect not in ok:
                raise InputError(
                    "serving.hardware.interconnect",
                    f"{self.interconnect} does not join {self.gpu.name} GPUs (its links: "
                    f"{', '.join(sorted(ok))})",
                )
        for key, what in (("pp", "pipeline"), ("ep", "expert")):
            v = whole(
                getattr(self, key), f"serving.hardware.{key}", lo=1, floats=True, error=InputError
            )
            if key == "ep" and v == self.count:
                continue
            if key == "ep" and v > 1:
                raise NotModelledError(
                    "serving.hardware.ep",
                    f"{v} is not modelled: expert parallelism spans the replica's "
                    f"{self.count} GPUs (give ep: {self.count} or 1; more data-parallel "
                    "ranks are more replicas)",
                )
            if v > 1:
                raise NotModelledError(
                    f"serving.hardware.{key}",
                    f"{what} parallelism is not modelled (the {self.count} GPUs are one "
                    f"tensor-parallel group): give {key}: 1",
                )

    @classmethod
    def from_fields(
        cls,
        gpu_name: str,
        count: int = 1,
        interconnect: str | None = None,
        pp: int = 1,
        ep: int = 1,
    ) -> Hardware:
        """From the problem file's ``serving.hardware: {gpu, count, interconnect, pp,
        ep}``."""
        return cls(gpu(gpu_name), count, interconnect, pp, ep)

    @property
    def tp(self) -> int:
        """The tensor-parallel degree: every GPU of the replica."""
        return self.count

    @property
    def link(self) -> Link:
        """The link between the replica's GPUs: ``interconnect``, else the GPU's default;
        :class:`InputError` for a GPU without one (not one of the table's) and none given."""
        name = self.interconnect or self.gpu.link
        if not name:
            known = ", ".join(known_links())
            raise InputError(
                "serving.hardware.interconnect",
                f"{self.gpu.name} has no default link: give one (known: {known})",
            )
        return link(name)

    @property
    def name(self) -> str:
        return f"{self.count} x {self.gpu.name}"

    @property
    def bandwidth_bytes_s(self) -> float:
        """Aggregate peak memory bandwidth, bytes/s."""
        return self.gpu.bandwidth_tb_s * 1e12 * self.count

    @property
    def memory_bytes(self) -> float:
        """Aggregate memory capacity, bytes (the vendor's GB x 10⁹)."""
        return self.gpu.memory_gb * 1e9 * self.count

    def flops(self, dtype: str, field_name: str = "serving.model.dtype") -> float:
        """Aggregate dense peak tensor throughput for ``dtype``, FLOP/s (OP/s for int8);
        :class:`InputError` on ``field_name`` when the table has no figure for it."""
        table = self.gpu.dense_tflops
        if dtype not in table:
            raise InputError(
                field_name,
                f"{self.gpu.name} has no dense {dtype} figure in the bundled table "
                f"(it has {', '.join(sorted(table))})",
            )
        return table[dtype] * 1e12 * self.count
