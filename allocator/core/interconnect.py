"""Links between GPUs: a bundled table of vendor figures, and the ring all-reduce over one.

Each link of :data:`LINKS` carries its bandwidth **per direction** per GPU (GB/s, 10⁹
bytes/s) and, where a vendor document prints one, its latency (µs), each with the
document it is taken from, the figure as printed and every conversion. Vendors print
NVLink, Infinity Fabric and PCIe as *bidirectional* totals (both directions added): the
table halves them. Network links are printed as line rates in Gb/s per direction (a
port is full duplex): the table divides by 8 bits per byte and subtracts no protocol
overhead (that is left to the fitted efficiency ``comm_eff``, as ``mem_eff`` takes what
a GPU's memory does not reach of its peak).

**Latency.** No vendor document found prints a GPU-to-GPU latency for NVLink, NVSwitch,
Infinity Fabric or PCIe, nor one for a 400 Gb/s adapter: those links have
``latency_us = None`` and a collective over them costs its bandwidth term alone, its
per-hop latency staying in the roofline's fitted ``fixed_ms`` (as all of it did before
the table). The 200 Gb/s adapter's document prints "sub-600ns latency", an upper
bound, used as 0.6 µs.

**Scope.** ``intra-node`` links join the GPUs of one replica (tensor parallelism);
``inter-node`` links join machines (the KV transfer of disaggregated serving, issue 26).
Each GPU of :data:`allocator.core.hardware.GPUS` names its default intra-node link;
``serving.hardware.interconnect`` overrides it. A name the table does not know is
refused, listing the known ones.

**Ring all-reduce** (:func:`ring_allreduce_ms`). ``n`` GPUs each holding a message of
``M`` bytes sum it in a reduce-scatter and an all-gather around a ring, each ``n − 1``
steps moving ``M/n`` bytes per GPU per direction::

    T = 2(n − 1)/n · M / B + 2(n − 1) · L

``B`` the per-direction bandwidth, ``L`` the per-step latency (R. Thakur, R.
Rabenseifner, W. Gropp, "Optimization of Collective Communication Operations in MPICH",
Int. J. High Performance Computing Applications 19(1), 2005, pp. 49–66, the ring
all-reduce's cost ``2(p − 1)α + 2(p − 1)/p · nβ`` with the reduction arithmetic
dropped; P. Patarasuk, X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", J. Parallel Distrib. Comput. 69(2), 2009, pp. 117–124, which proves the
bandwidth term optimal). One GPU sends nothing: ``T = 0``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

import numpy as np

from ..exceptions import InputError

__all__ = ["LINKS", "Link", "fabric_links", "known_links", "link", "ring_allreduce_ms"]


@dataclass(frozen=True)
class Link:
    """One link's vendor figures.

    name : the table key (``nvlink4``). product : what it is, as the vendor names it.
    scope : ``"intra-node"`` (between the GPUs of a replica) or ``"inter-node"``.
    bandwidth_gb_s : per direction per GPU, GB/s (10⁹ bytes/s). latency_us : per
    transfer, µs, ``None`` where no vendor figure was found (module docstring).
    sources : for ``bandwidth_gb_s`` and ``latency_us``: the document, the printed text
    and the conversion.
    """

    name: str
    product: str
    scope: Literal["intra-node", "inter-node"]
    bandwidth_gb_s: float
    latency_us: float | None
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def bandwidth_bytes_s(self) -> float:
        """Per-direction bandwidth, bytes/s."""
        return self.bandwidth_gb_s * 1e9

    @property
    def latency_s(self) -> float:
        """Latency in seconds, 0 where the table has no figure (module docstring)."""
        return 0.0 if self.latency_us is None else self.latency_us * 1e-6


_NO_LATENCY = (
    "no vendor document found prints a latency for this link: none in the table, the "
    "per-hop latency stays in the roofline's fitted fixed_ms"
)
_NVLINK_PAGE = (
    "NVIDIA NVLink and NVLink Switch page, https://www.nvidia.com/en-us/data-center/nvlink/"
)
_NVLINK_PAGE_DE = (
    "NVIDIA NVLink page, German edition, https://www.nvidia.com/de-de/data-center/nvlink/ "
    "(the A100 paragraph of the page's earlier revision)"
)
_HOPPER_PAGE = (
    "NVIDIA Hopper architecture page, "
    "https://www.nvidia.com/en-us/data-center/technologies/hopper-architecture/ "
    "(German edition https://www.nvidia.com/de-de/technologies/hopper-architecture/ "
    "prints the same sentence)"
)
_HGX_H100_BLOG = (
    "NVIDIA Technical Blog, 'Introducing NVIDIA HGX H100: An Accelerated Server Platform "
    "for AI and High-Performance Computing' (2022), https://developer.nvidia.com/blog/"
    "introducing-nvidia-hgx-h100-an-accelerated-server-platform-for-ai-and-high-"
    "performance-computing/"
)
_H100_DS = (
    "NVIDIA H100 Tensor Core GPU Datasheet, "
    "https://resources.nvidia.com/en-us-gpu-resources/h100-datasheet-24306, H100 SXM "
    "column, row 'Interconnect'"
)
_L40S_DS = (
    "NVIDIA L40S product page and datasheet, https://www.nvidia.com/en-us/data-center/l40s/, "
    "row 'Interconnect Interface'"
)
_CDNA3_WP = (
    "AMD, 'Introducing AMD CDNA 3 Architecture' white paper, https://www.amd.com/content/dam/"
    "amd/en/documents/instinct-tech-docs/white-papers/amd-cdna-3-white-paper.pdf, Table 2 "
    "(MI300 Series specifications), MI300X column"
)
_CX7_MANUAL = (
    "NVIDIA ConnectX-7 Adapter Cards User Manual, Introduction, "
    "https://docs.nvidia.com/networking/display/ConnectX7VPI/Introduction, table "
    "'Supported Protocols', single-port OSFP InfiniBand and Ethernet cards"
)
_CX6_MANUAL = (
    "NVIDIA ConnectX-6 adapter cards user manual, Introduction, "
    "https://docs.nvidia.com/networking/display/ConnectX6EN/Introduction"
)


def _link(name, product, scope, bandwidth_gb_s, latency_us, sources) -> Link:
    return Link(
        name,
        product,
        scope,
        float(bandwidth_gb_s),
        None if latency_us is None else float(latency_us),
        MappingProxyType(dict(sources)),
    )


#: The bundled links, by name.
LINKS: Mapping[str, Link] = MappingProxyType(
    {
        k.name: k
        for k in (
            _link(
                "nvlink3",
                "NVIDIA NVLink, third generation (A100 SXM)",
                "intra-node",
                300.0,
                None,
                {
                    "bandwidth_gb_s": f"{_NVLINK_PAGE_DE}: 'Ein einzelner NVIDIA A100 Tensor "
                    "Core-Grafikprozessor unterstützt bis zu zwölf NVLink-Verbindungen der "
                    "dritten Generation für eine Bandbreite von insgesamt 600 GB/s' (a single "
                    "A100 supports up to twelve third-generation NVLink connections for a "
                    "total bandwidth of 600 GB/s); 600 GB/s both directions / 2 = 300 GB/s "
                    "per direction",
                    "latency_us": _NO_LATENCY,
                },
            ),
            _link(
                "nvlink4",
                "NVIDIA NVLink, fourth generation (H100 SXM, H200 SXM)",
                "intra-node",
                450.0,
                None,
                {
                    "bandwidth_gb_s": f"{_HOPPER_PAGE}: 'Fourth-generation NVLink can scale "
                    "multi-GPU input and output (IO) with NVIDIA DGX and HGX servers at 900 "
                    "gigabytes per second (GB/s) bidirectional per GPU, over 7X the bandwidth "
                    "of PCIe Gen5'; 900 GB/s bidirectional / 2 = 450 GB/s per direction",
                    "latency_us": _NO_LATENCY,
                },
            ),
            _link(
                "nvlink5",
                "NVIDIA NVLink, fifth generation (Blackwell: B200)",
                "intra-node",
                900.0,
                None,
                {
                    "bandwidth_gb_s": f"{_NVLINK_PAGE}: 'A single NVIDIA Blackwell Tensor Core "
                    "GPU supports up to 18 NVLink 100 gigabyte-per-second (GB/s) connections "
                    "for a total bandwidth of 1.8 terabytes per second (TB/s)' and 'NVLink is a "
                    "1.8TB/s bidirectional, direct GPU-to-GPU interconnect'; 1,800 GB/s "
                    "bidirectional / 2 = 900 GB/s per direction",
                    "latency_us": _NO_LATENCY,
                },
            ),
            _link(
                "nvswitch3",
                "NVLink 4 through third-generation NVSwitch (HGX H100 8-GPU baseboard)",
                "intra-node",
                450.0,
                None,
                {
                    "bandwidth_gb_s": f"{_HGX_H100_BLOG}: 'Each NVSwitch is a fully "
                    "non-blocking switch that fully connects all eight H100 Tensor Core GPU. "
                    "[...] this communication runs at the NVLink bidirectional speed of 900 "
                    "gigabytes per second (GB/s)'; 900 GB/s bidirectional / 2 = 450 GB/s per "
                    "direction, between any pair of the eight GPUs at once",
                    "latency_us": _NO_LATENCY,
                },
            ),
            _link(
                "pcie4-x16",
                "PCI Express Gen4 x16",
                "intra-node",
                32.0,
                None,
                {
                    "bandwidth_gb_s": f"{_L40S_DS}: 'PCIe Gen4 x16: 64GB/s bidirectional'; "
                    "64 GB/s bidirectional / 2 = 32 GB/s per direction",
                    "latency_us": _NO_LATENCY,
                },
            ),
            _link(
                "pcie5-x16",
                "PCI Express Gen5 x16",
                "intra-node",
                64.0,
                None,
                {
                    "bandwidth_gb_s": f"{_H100_DS}: 'NVIDIA NVLink: 900GB/s PCIe Gen5: "
                    "128GB/s' (the 900 GB/s NVLink figure is bidirectional, as the Hopper "
                    "page says, and so is this one); 128 GB/s / 2 = 64 GB/s per direction",
                    "latency_us": _NO_LATENCY,
                },
            ),
            _link(
                "infinity-fabric-mi300x",
                "AMD Infinity Fabric, 7 x16 links per MI300X (8-GPU platform, fully connected)",
                "intra-node",
                448.0,
                None,
                {
                    "bandwidth_gb_s": f"{_CDNA3_WP}: 'DEVICE I/O CONNECTIONS 7 x16 AMD "
                    "Infinity Fabric links 1x16 PCIe Gen 5 to host CPU' and 'P2P RING PEAK "
                    "AGGREGATE I/O BANDWIDTH 896 GB/s (8 GPUs)'; the white paper's 'bi-"
                    "directional links' (its Figure 9) make 896 GB/s both directions: / 2 = "
                    "448 GB/s per direction. A ring over the 8 GPUs reaches it only with "
                    "its traffic spread over all seven links (RCCL's several rings); one "
                    "ring on one link reaches 1/7 of it",
                    "latency_us": _NO_LATENCY,
                },
            ),
            _link(
                "ib-ndr",
                "InfiniBand NDR, 400 Gb/s port (ConnectX-7)",
                "inter-node",
                50.0,
                None,
                {
                    "bandwidth_gb_s": f"{_CX7_MANUAL}: 'NDR 400Gb/s and 400GbE'; 400 Gb/s "
                    "per direction / 8 = 50 GB/s per direction",
                    "latency_us": _NO_LATENCY,
                },
            ),
            _link(
                "ib-hdr",
                "InfiniBand HDR, 200 Gb/s port (ConnectX-6)",
                "inter-node",
                25.0,
                0.6,
                {
                    "bandwidth_gb_s": f"{_CX6_MANUAL}: 'ConnectX-6 Virtual Protocol "
                    "Interconnect adapter cards provide up to two ports of 200Gb/s for "
                    "InfiniBand and Ethernet connectivity, sub-600ns latency'; 200 Gb/s per "
                    "direction / 8 = 25 GB/s per direction",
                    "latency_us": f"{_CX6_MANUAL}: 'sub-600ns latency' (an upper bound, the "
                    "adapter's): 600 ns = 0.6 µs",
                },
            ),
            _link(
                "roce-400g",
                "RDMA over Converged Ethernet, 400GbE port (ConnectX-7)",
                "inter-node",
                50.0,
                None,
                {
                    "bandwidth_gb_s": f"{_CX7_MANUAL}: 'NDR 400Gb/s and 400GbE'; 400 Gb/s "
                    "per direction / 8 = 50 GB/s per direction",
                    "latency_us": _NO_LATENCY,
                },
            ),
            _link(
                "roce-200g",
                "RDMA over Converged Ethernet, 200GbE port (ConnectX-6)",
                "inter-node",
                25.0,
                0.6,
                {
                    "bandwidth_gb_s": f"{_CX6_MANUAL}: 'up to two ports of 200Gb/s for "
                    "InfiniBand and Ethernet connectivity, sub-600ns latency'; 200 Gb/s per "
                    "direction / 8 = 25 GB/s per direction",
                    "latency_us": f"{_CX6_MANUAL}: 'sub-600ns latency' (an upper bound, the "
                    "adapter's): 600 ns = 0.6 µs",
                },
            ),
        )
    }
)


#: The vendor fabrics (NVLink, NVSwitch, Infinity Fabric): each joins only the GPUs built
#: for it, named by the default link of those GPUs. Third-generation NVSwitch carries NVLink 4
#: (its source above: the HGX H100 baseboard). PCIe and the network links join any GPU.
_FABRICS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "nvlink3": frozenset({"nvlink3"}),
        "nvlink4": frozenset({"nvlink4", "nvswitch3"}),
        "nvlink5": frozenset({"nvlink5"}),
        "infinity-fabric-mi300x": frozenset({"infinity-fabric-mi300x"}),
    }
)
_VENDOR_FABRIC = frozenset().union(*_FABRICS.values())


def fabric_links(own: str) -> set[str]:
    """The links that can join GPUs whose default link is ``own``: their own fabric (for a
    vendor fabric) and every link that is not a vendor fabric (PCIe, InfiniBand, RoCE).
    An L40S (``pcie4-x16``) has no NVLink; an H100 (``nvlink4``) is not on NVLink 5."""
    open_links = {name for name in LINKS if name not in _VENDOR_FABRIC}
    return open_links | set(_FABRICS.get(own, frozenset({own})))


def known_links() -> tuple[str, ...]:
    """The names of :data:`LINKS`, sorted."""
    return tuple(sorted(LINKS))


def link(name: str, field_name: str = "serving.hardware.interconnect") -> Link:
    """The bundled link called ``name`` (case-insensitive); :class:`InputError` on
    ``field_name`` listing the known names otherwise."""
    key = str(name).strip().lower()
    if key not in LINKS:
        raise InputError(
            field_name, f"unknown interconnect {name!r} (known: {', '.join(known_links())})"
        )
    return LINKS[key]


def ring_allreduce_ms(
    message_bytes, gpus: int, bandwidth_bytes_s: float, latency_s: float = 0.0
) -> np.ndarray:
    """Time of a ring all-reduce of ``message_bytes`` (any shape) over ``gpus`` GPUs, ms:
    ``2(n − 1)/n · M / B + 2(n − 1) · L`` (module docstring); 0 for one GPU or an empty
    message."""
    m = np.asarray(message_bytes, dtype=float)
    if gpus <= 1:
        return np.zeros_like(m)
    n = float(gpus)
    t = 2.0 * (n - 1.0) / n * m / bandwidth_bytes_s + 2.0 * (n - 1.0) * latency_s
    return 1e3 * np.where(m > 0, t, 0.0)
