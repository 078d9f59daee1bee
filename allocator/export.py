"""A configuration from a front, as the serving system's own settings.

- vLLM: the JSON of ``--speculative-config``:
  ``{"method": "draft_model", "model": <drafter model>, "num_speculative_tokens": k}``.
- SGLang: ``--speculative-algorithm STANDALONE`` (a separate small draft model)
  with ``--speculative-draft-model-path``, ``--speculative-num-steps k``,
  ``--speculative-eagle-topk 1`` (a chain, not a tree) and
  ``--speculative-num-draft-tokens k + 1`` (SGLang counts the root token; with
  top-k 1 it must be ``num_steps + 1``).

Both run one draft model. Configurations pooling several drafters, and drafters
without a ``model`` (the serving system's model name or path), are refused with
an :class:`~allocator.exceptions.InputError`, never exported silently.
"""

from __future__ import annotations

import json
import shlex

from .exceptions import InputError

TARGETS = ("vllm", "sglang")


def pick_point(points: list[dict], pick: int | None) -> dict:
    """The ``pick``-th point (1-based, as numbered in the table), or the best by throughput."""
    if not points:
        raise InputError("--export", "the front is empty: nothing to export")
    if pick is None:
        return max(points, key=lambda p: p["throughput"])
    if not 1 <= pick <= len(points):
        raise InputError("--pick", f"{pick} is not a point of the front (1..{len(points)})")
    return points[pick - 1]


def _single_model(point: dict, models: dict[str, str | None], target: str) -> str:
    drafters = point["drafters"]
    if len(drafters) != 1:
        raise InputError(
            "--export",
            f"the configuration pools {len(drafters)} drafters ({', '.join(drafters)}); "
            f"{target} runs one draft model, so it cannot serve this ensemble (choose a "
            "single-drafter point with --pick, or set search.m.max: 1)",
        )
    name = drafters[0]
    model = models.get(name)
    if not model:
        raise InputError(
            "--export",
            f"drafter {name!r} has no `model` (the serving system's model name or path); "
            "add `model:` to it in the problem file",
        )
    return model


def vllm_config(point: dict, models: dict[str, str | None]) -> dict:
    """vLLM's ``--speculative-config`` for one point."""
    return {
        "method": "draft_model",
        "model": _single_model(point, models, "vLLM"),
        "num_speculative_tokens": int(point["k"]),
    }


def sglang_flags(point: dict, models: dict[str, str | None]) -> list[str]:
    """SGLang's ``launch_server`` flags for one point."""
    k = int(point["k"])
    return [
        "--speculative-algorithm",
        "STANDALONE",
        "--speculative-draft-model-path",
        _single_model(point, models, "SGLang"),
        "--speculative-num-steps",
        str(k),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(k + 1),
    ]


def export_text(target: str, point: dict, models: dict[str, str | None]) -> str:
    """What ``solve --export`` prints: vLLM's JSON, or SGLang's flags (shell-quoted)."""
    if target == "vllm":
        return json.dumps(vllm_config(point, models)) + "\n"
    if target == "sglang":
        return shlex.join(sglang_flags(point, models)) + "\n"
    raise InputError("--export", f"{target!r} is not one of {', '.join(TARGETS)}")


def convention_warning(convention: str) -> str | None:
    """A note when ``k`` of the problem does not mean what the serving system means by it."""
    if convention == "paper":
        return (
            "note: this problem uses the paper convention (a round yields at most k units); "
            "vLLM and SGLang draft k tokens plus the verifier's own (convention: bonus), so "
            "re-solve with convention: bonus for a k in their terms"
        )
    return None
