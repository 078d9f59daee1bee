"""Optuna seeds over the whole documented range, workers of one stored study seeded apart,
and storage strings that are not URLs (issue 20)."""

import hashlib
import json
import multiprocessing
import subprocess
import sys

import numpy as np
import optuna
import pytest

from allocator.search.storage import mask_text, mask_url
from allocator.search.study import SAMPLER_SEEDS, TICKET_ATTR, OptunaStrategy, sampler_seed
from tests.support.cli_runner import run


def run_cli(*args, timeout=300):
    """``allocator`` in a fresh interpreter: for what must hold across processes (a seed's
    run reproduced); :func:`run` runs the command in this one."""
    return subprocess.run(
        [sys.executable, "-m", "allocator", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_problem(path, n=12, seed=0, k_max=16):
    rng = np.random.default_rng(seed)
    raw = {
        "name": f"n{n}",
        "drafters": [
            {
                "name": f"d{i}",
                "acceptance": round(float(rng.uniform(0.3, 0.9)), 3),
                "unit_cost": round(float(rng.uniform(0.01, 0.1)), 3),
            }
            for i in range(n)
        ],
        "search": {"k": {"max": k_max}},
    }
    path.write_text(json.dumps(raw))
    return path


# ------------------------------------------------------------------ storage strings
@pytest.mark.parametrize("text", ["foo", "foo@bar", "a:b", "@", "x", "memory-db"])
def test_mask_of_a_string_that_is_no_url_returns(text):
    """``mask_url`` and ``mask_text`` called each other without end on a string with
    neither ``://`` nor ``@`` (a RecursionError)."""
    shown = mask_url(text)
    assert isinstance(shown, str)
    assert isinstance(mask_text(f"cannot open {text}", text), str)
    if "@" not in text:
        assert shown == text  # nothing in it is a password


def test_cli_storage_foo_is_one_line(tmp_path):
    problem = write_problem(tmp_path / "p.json", n=3)
    r = run("solve", problem, "--strategy", "optuna", "--storage", "foo", "--trials", 5)
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == [
        "error: --storage: 'foo' is not a URL (sqlite:///file.db, postgresql://...)"
    ]


def test_cli_empty_storage_is_refused(tmp_path):
    """``--storage ''`` ran in memory and printed an empty storage name in its note."""
    problem = write_problem(tmp_path / "p.json", n=3)
    r = run("solve", problem, "--strategy", "optuna", "--storage", "", "--trials", 5)
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [
        "error: --storage: is empty: give a URL, or leave --storage out for an in-memory study"
    ]


# ------------------------------------------------------------------ seeds
def test_sampler_seed_fits_optunas_range_and_is_deterministic():
    for seed in (0, 1, 2**32 - 1, 2**32, 2**40 + 3, 2**63 - 1):
        got = sampler_seed(seed)
        assert 0 <= got < SAMPLER_SEEDS
        assert got == sampler_seed(seed)  # the same --seed, the same sampler
    # seeds Optuna takes are used as they are: in-memory runs keep their results
    assert [sampler_seed(s) for s in (0, 7, 2**32 - 1)] == [0, 7, 2**32 - 1]
    # beyond, the first four bytes of SHA-256 of "<seed>:<worker>", little-endian
    digest = hashlib.sha256(b"4294967296:0").digest()
    assert sampler_seed(2**32) == int.from_bytes(digest[:4], "little")
    assert sampler_seed(None) is None


def test_workers_get_different_sampler_seeds():
    seeds = {sampler_seed(7, w) for w in range(200)}
    assert len(seeds) == 200
    assert sampler_seed(7, 0) == 7 and sampler_seed(7, 3) == sampler_seed(7, 3)


@pytest.mark.parametrize("seed", [2**32, 2**63 - 1])
def test_cli_optuna_takes_every_documented_seed(tmp_path, seed):
    """The README promises --seed 0..2**63-1; Optuna's sampler took only < 2**32."""
    problem = write_problem(tmp_path / "p.json", n=6)
    cmd = ("solve", problem, "--strategy", "optuna", "--trials", 20, "--seed", seed, "--json", "-")
    runs = [run_cli(*cmd) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    assert json.loads(runs[0].stdout)["front"] == json.loads(runs[1].stdout)["front"]


# ------------------------------------------------------------------ two workers
def _worker(problem_path, url, barrier, seed):
    from allocator.io.build import problem_from_file

    problem = problem_from_file(problem_path)
    strategy = OptunaStrategy(
        trials=50, seed=seed, storage=url, study="shared", population=50, seed_front=False
    )
    barrier.wait(timeout=120)
    strategy.solve(problem)


@pytest.mark.slow
def test_two_workers_starting_one_fresh_sqlite_study_sample_apart(tmp_path):
    """Two processes start one fresh SQLite study at the same moment with the same --seed:
    each sampled the same 50 configurations (100 trials, 50 distinct) before the workers
    were seeded apart. The space holds 65,536 drafter choices x 16 k, so 100 independent
    draws repeat a configuration only by chance (expected about 0.08 repeats); a worker
    that starts late breeds its batch from the other's stored trials (NSGA-II's
    crossover), which may repeat a few of them, far from half."""
    problem = write_problem(tmp_path / "p.json", n=12)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(storage=url, study_name="shared", directions=["maximize", "minimize"])
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_worker, args=(problem, url, barrier, 3)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    study = optuna.load_study(study_name="shared", storage=url)
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    tickets = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(TICKET_ATTR)]
    assert len(done) == 100 and len(tickets) == 2
    assert {t.state for t in tickets} == {optuna.trial.TrialState.PRUNED}
    configs = {tuple(sorted(t.params.items())) for t in done}
    assert len(configs) >= 80, f"{len(configs)} distinct configurations in 100 trials"
