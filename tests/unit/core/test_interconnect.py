"""The bundled link table and the ring all-reduce (allocator/core/interconnect.py).

The ring's closed form, from R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of
Collective Communication Operations in MPICH", IJHPCA 19(1), 2005: an all-reduce of ``M``
bytes over ``n`` GPUs as a reduce-scatter and an all-gather around a ring takes
``2(n − 1)/n · M / B + 2(n − 1) · L`` (``B`` per direction, ``L`` per step).
"""

import numpy as np
import pytest

from allocator.core.hardware import GPUS, Hardware, gpu
from allocator.core.interconnect import LINKS, known_links, link, ring_allreduce_ms
from allocator.exceptions import InputError, NotModelledError

ASKED = (
    "nvlink3",
    "nvlink4",
    "nvlink5",
    "nvswitch3",
    "pcie4-x16",
    "pcie5-x16",
    "infinity-fabric-mi300x",
    "ib-ndr",
    "ib-hdr",
    "roce-400g",
    "roce-200g",
)


def test_every_link_asked_for_is_in_the_table_with_its_sources():
    assert set(ASKED) <= set(LINKS)
    for name, ln in LINKS.items():
        assert ln.name == name and ln.bandwidth_gb_s > 0
        assert ln.scope in ("intra-node", "inter-node")
        assert set(ln.sources) == {"bandwidth_gb_s", "latency_us"}
        assert "http" in ln.sources["bandwidth_gb_s"]
        # the conversion ends at the table's figure
        assert f"{ln.bandwidth_gb_s:g} GB/s per direction" in ln.sources["bandwidth_gb_s"]
        if ln.latency_us is None:
            assert "no vendor document" in ln.sources["latency_us"]
            assert ln.latency_s == 0.0
        else:
            assert "http" in ln.sources["latency_us"]


def test_bidirectional_figures_are_halved():
    """The vendors' totals over both directions: NVLink 4 900 GB/s → 450 per direction,
    NVLink 5 1.8 TB/s → 900, NVLink 3 600 → 300, PCIe Gen5 x16 128 → 64, Gen4 64 → 32,
    MI300X's 896 GB/s ring aggregate → 448; network ports 400 Gb/s → 50 GB/s, 200 → 25."""
    per_direction = {
        "nvlink3": 300,
        "nvlink4": 450,
        "nvlink5": 900,
        "nvswitch3": 450,
        "pcie4-x16": 32,
        "pcie5-x16": 64,
        "infinity-fabric-mi300x": 448,
        "ib-ndr": 50,
        "ib-hdr": 25,
        "roce-400g": 50,
        "roce-200g": 25,
    }
    for name, v in per_direction.items():
        assert LINKS[name].bandwidth_gb_s == v
        assert LINKS[name].bandwidth_bytes_s == v * 1e9
    assert {LINKS[n].scope for n in ("ib-ndr", "ib-hdr", "roce-400g", "roce-200g")} == {
        "inter-node"
    }


def test_every_gpu_has_a_default_intra_node_link():
    expected = {
        "a100-80g": "nvlink3",
        "h100-sxm": "nvlink4",
        "h200": "nvlink4",
        "b200": "nvlink5",
        "l40s": "pcie4-x16",
        "mi300x": "infinity-fabric-mi300x",
    }
    assert {n: g.link for n, g in GPUS.items()} == expected
    for g in GPUS.values():
        assert LINKS[g.link].scope == "intra-node"
        assert Hardware(g, 2).link is LINKS[g.link]


def test_an_unknown_link_is_one_line_listing_the_known_ones():
    with pytest.raises(InputError) as e:
        link("nvlink9")
    msg = str(e.value)
    assert "\n" not in msg and e.value.field == "serving.hardware.interconnect"
    assert all(n in msg for n in known_links())
    assert link(" NVLink4 ") is LINKS["nvlink4"]
    with pytest.raises(InputError, match="unknown interconnect 'token-ring'"):
        Hardware.from_fields("h100-sxm", 2, "token-ring")


def test_serving_hardware_interconnect_overrides_the_default():
    hw = Hardware.from_fields("h100-sxm", 4, "pcie5-x16")
    assert hw.link is LINKS["pcie5-x16"] and hw.tp == 4
    assert Hardware.from_fields("h100-sxm", 4).link is LINKS["nvlink4"]


@pytest.mark.parametrize("key", ["pp", "ep"])
def test_pipeline_and_expert_parallelism_are_refused_by_name(key):
    with pytest.raises(NotModelledError) as e:
        Hardware(gpu("h100-sxm"), 8, **{key: 2})
    assert e.value.field == f"serving.hardware.{key}"
    assert "not modelled" in e.value.message
    assert Hardware(gpu("h100-sxm"), 8, **{key: 1}).count == 8  # 1 is no parallelism
    with pytest.raises(InputError):
        Hardware(gpu("h100-sxm"), 8, **{key: 0})


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_allreduce_is_the_closed_form(n):
    m = np.array([1.0, 2.0**20, 3.5e7])
    b, lat = 450e9, 2e-6
    expected = 1e3 * (2 * (n - 1) / n * m / b + 2 * (n - 1) * lat)
    np.testing.assert_allclose(ring_allreduce_ms(m, n, b, lat), expected, rtol=1e-14)
    # the bandwidth term alone, and linear in the message
    np.testing.assert_allclose(
        ring_allreduce_ms(2 * m, n, b), 2 * ring_allreduce_ms(m, n, b), rtol=1e-14
    )


def test_one_gpu_or_an_empty_message_sends_nothing():
    assert np.all(ring_allreduce_ms(np.array([0.0, 1e6]), 1, 450e9, 1e-6) == 0.0)
    assert float(ring_allreduce_ms(0.0, 8, 450e9, 1e-6)) == 0.0


@pytest.mark.parametrize(
    ("name", "bad"),
    [("l40s", "nvlink5"), ("l40s", "nvlink4"), ("h100-sxm", "nvlink5"), ("b200", "nvlink4")],
)
def test_a_vendor_fabric_joins_only_its_own_gpus(name, bad):
    """An L40S is a PCIe card (no NVLink); an H100 is on NVLink 4, not 5: refused naming
    the field and listing the links that do join it."""
    with pytest.raises(InputError) as e:
        Hardware(gpu(name), 2, bad)
    assert e.value.field == "serving.hardware.interconnect"
    assert bad in str(e.value) and GPUS[name].link in str(e.value)


@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_gpu_takes_its_own_link_pcie_and_the_network(name):
    own = GPUS[name].link
    for other in {own, "pcie4-x16", "ib-ndr", "roce-400g"}:
        assert Hardware(gpu(name), 2, other).link.name == other
    if own == "nvlink4":  # HGX H100/H200: NVLink 4 through third-generation NVSwitch
        assert Hardware(gpu(name), 8, "nvswitch3").link.name == "nvswitch3"
