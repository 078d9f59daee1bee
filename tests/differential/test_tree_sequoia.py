"""Sequoia's acceptance-rate vector against ``acceptance_by_rank``.

Sequoia (Infini-AI-Lab/Sequoia) measures, per verification step, which rank's child was
accepted (``tests/test_accept.py``: counts divided by the number of steps), so its vector
holds the *unconditional* share ``q_r``; its ``tree_search.py`` multiplies those shares
along paths. ``acceptance_by_rank`` holds the conditional ``p_r``. Here Sequoia's
recursion is written out independently on ``q`` and compared with ``allocator``'s
programme on ``from_unconditional(q)``.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from allocator.cli import app
from allocator.exceptions import InputError
from allocator.model.token_tree import TreeProgramme, edge_weights, from_unconditional

ROOT = Path(__file__).resolve().parents[2]


def sequoia_best(q: list[float], nodes: int, depth: int) -> float:
    """Sequoia's tree_search recursion on unconditional shares ``q`` (index r-1 = rank r):
    the best ``1 + Σ path products`` of a tree of ``nodes`` speculated nodes (the root not
    counted) and at most ``depth`` levels below the root."""

    @functools.cache
    def t(m: int, levels: int, b: int) -> float:
        # best subtree of m nodes (its root included) with `levels` levels (root's
        # included) whose root has exactly b children of ranks 1..b
        if b == 0:
            return 1.0 if m == 1 else -math.inf
        if levels < 2 or m < b + 1 or b > len(q):
            return -math.inf
        best = -math.inf
        for y in range(1, m):  # y nodes in the part holding ranks 1..b-1 (and the root)
            rest = m - y
            sub = max(t(rest, levels - 1, c) for c in range(len(q) + 1))
            best = max(best, t(y, levels, b - 1) + q[b - 1] * sub)
        return best

    return max(t(nodes + 1, depth + 1, b) for b in range(len(q) + 1))


@pytest.mark.parametrize(
    "q", [[0.62, 0.14, 0.06, 0.03], [0.45, 0.2, 0.1], [0.8, 0.15, 0.05], [0.3, 0.3, 0.3]]
)
@pytest.mark.parametrize(("nodes", "depth"), [(1, 1), (4, 2), (7, 3), (9, 9)])
def test_converted_sequoia_vector_reproduces_sequoias_optimum(q, nodes, depth):
    p = from_unconditional(q)
    got = TreeProgramme(p[None, :], nodes, depth).best().expected_accepted
    assert got == pytest.approx(sequoia_best(q, nodes, depth), rel=1e-12)


def test_an_unconverted_vector_discounts_later_ranks_twice():
    q = [0.62, 0.14, 0.06, 0.03]
    # p_2 = 0.14 / (1 - 0.62), p_3 = 0.06 / (1 - 0.76), p_4 = 0.03 / (1 - 0.82), by hand
    assert from_unconditional(q) == pytest.approx([0.62, 0.14 / 0.38, 0.06 / 0.24, 0.03 / 0.18])
    assert edge_weights(from_unconditional(q)) == pytest.approx(q)
    # the README's numbers: the best tree of 9 nodes, depth <= 16
    assert sequoia_best(q, 9, 16) == pytest.approx(2.856, abs=5e-4)
    raw = TreeProgramme(np.array([q]), 9, 16).best().expected_accepted
    assert raw == pytest.approx(2.660, abs=5e-4)


def test_conversion_refuses_what_is_not_a_share_vector():
    for bad in ([0.7, 0.5], [-0.1, 0.2], [], [float("nan")]):
        with pytest.raises(InputError):
            from_unconditional(bad)
    # a rank never accepted converts to 0, which the problem file then refuses
    assert from_unconditional([0.5, 0.0])[1] == 0.0


def test_help_says_which_vector_acceptance_by_rank_is():
    text = " ".join(CliRunner().invoke(app, ["tree", "--help"]).output.split())
    assert "conditional" in text and "Sequoia" in text and "from_unconditional" in text


def test_design_doc_warns_that_sequoias_vector_is_unconditional():
    """docs/design.md §8.10 states the conversion and its example; the example checked by
    hand here, independently of :func:`from_unconditional`."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text[text.index("### 8.10") : text.index("### 8.11")]
    flat = " ".join(section.split())
    assert "from_unconditional" in flat and "test_accept.py" in flat
    assert "p_r(ℓ) = q_r(ℓ) / (1 − Σ_{s<r} q_s(ℓ))" in flat
    assert "`[0.62, 0.14, 0.06, 0.03]` → `[0.62, 0.368, 0.25, 0.167]`" in flat
    q = [0.62, 0.14, 0.06, 0.03]
    left = [1.0, 1 - 0.62, 1 - 0.62 - 0.14, 1 - 0.62 - 0.14 - 0.06]
    assert [round(a / b, 3) for a, b in zip(q, left, strict=True)] == [0.62, 0.368, 0.25, 0.167]
    assert "`E = 2.856` to 2.660" in flat  # the numbers of the test above
