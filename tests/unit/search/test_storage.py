"""Stored studies: resume (SQLite), shared workers and killed workers (PostgreSQL), masking.

The PostgreSQL tests need a server: ``.ci/run`` starts one and exports its URL as
``ALLOCATOR_TEST_POSTGRES_URL``. Without it they skip, saying why.
"""

import json
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import optuna
import pytest

from allocator.search.storage import mask_url, with_driver
from tests.support.cli_runner import run


@pytest.fixture
def problem_file(tmp_path):
    rng = np.random.default_rng(0)
    raw = {
        "name": "stored",
        "drafters": [
            {
                "name": f"d{i}",
                "acceptance": round(float(rng.uniform(0.3, 0.9)), 3),
                "unit_cost": 0.05,
            }
            for i in range(12)
        ],
        "search": {"k": {"max": 16}},
    }
    path = tmp_path / "problem.json"
    path.write_text(json.dumps(raw))
    return path


def solve_args(problem, storage, study, trials, out=None):
    """``allocator``'s arguments: ``solve`` of ``problem`` by optuna on a stored study."""
    args = ["solve", str(problem), "--strategy", "optuna"]
    args += ["--storage", storage, "--study", study, "--trials", str(trials)]
    return args + (["--json", str(out)] if out else [])


def solve_cmd(problem, storage, study, trials, out=None):
    return [sys.executable, "-m", "allocator", *solve_args(problem, storage, study, trials, out)]


def trials_by_state(storage, study):
    """Trials by state name; each worker's ticket (the pruned trial it took from storage
    only for its number) under ``TICKET``."""
    s = optuna.load_study(study_name=study, storage=with_driver(storage))
    out = {}
    for t in s.get_trials(deepcopy=False):
        state = "TICKET" if t.user_attrs.get("worker_ticket") else t.state.name
        out.setdefault(state, []).append(t)
    return out


def searched(trials):
    """The trials the search ran (not the seed points stored before it)."""
    return [t for t in trials if not t.user_attrs.get("seed")]


def wait_for_complete(storage, study, n, proc, limit=120.0):
    start = time.monotonic()
    while time.monotonic() - start < limit:
        assert proc.poll() is None, "the worker ended before it could be killed"
        try:
            if len(trials_by_state(storage, study).get("COMPLETE", [])) >= n:
                return
        except KeyError:
            pass  # study not created yet
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} trials finished in {limit} s")


# ------------------------------------------------------------------ masking
@pytest.mark.parametrize(
    "url, shown",
    [
        ("postgresql://bob:s3cret@db:5432/x", "postgresql://bob:***@db:5432/x"),
        ("postgresql+psycopg2://bob:p@ss@db/x", "postgresql+psycopg2://bob:***@db/x"),
        ("postgresql://bob@db/x", "postgresql://bob@db/x"),
        ("sqlite:///study.db", "sqlite:///study.db"),
        (None, "in-memory"),
    ],
)
def test_mask_url(url, shown):
    assert mask_url(url) == shown


def test_unreachable_database_is_one_masked_line(problem_file, tmp_path):
    url = "postgresql://bob:hunter2secret@127.0.0.1:9/nodb"
    out = tmp_path / "out.json"
    r = subprocess.run(solve_cmd(problem_file, url, "s", 5, out), capture_output=True, text=True)
    assert r.returncode == 2
    assert "hunter2secret" not in r.stderr + r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --storage: cannot open")
    assert "bob:***@127.0.0.1" in lines[0] and not out.exists()


# ------------------------------------------------------------------ sqlite
@pytest.mark.slow
def test_sqlite_study_resumes(problem_file, tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    docs = []
    for i in range(2):
        out = tmp_path / f"run{i}.json"
        r = subprocess.run(
            solve_cmd(problem_file, url, "resume", 30, out), capture_output=True, text=True
        )
        assert r.returncode == 0, r.stderr
        docs.append(json.loads(out.read_text()))
    states = trials_by_state(url, "resume")
    assert len(searched(states["COMPLETE"])) == 60 and set(states) == {"COMPLETE", "TICKET"}
    assert len(states["TICKET"]) == 2  # each run's worker number
    seeds = len(states["COMPLETE"]) - 60
    assert seeds > 0  # the seed points are stored once, by the first run
    assert docs[0]["evaluated"] == seeds + 30 and docs[1]["evaluated"] == seeds + 60
    assert all(d["exact"] is False for d in docs)
    assert "seeded with" in docs[0]["notes"][0] and "resumed" in docs[1]["notes"][0]


def test_study_made_for_another_problem_is_refused(problem_file, tmp_path):
    """In-process: the refusal is the command's own (no process boundary is involved)."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    assert run(*solve_args(problem_file, url, "one", 5)).exit_code == 0
    other = json.loads(problem_file.read_text())
    other["drafters"] = other["drafters"][:5]
    path = tmp_path / "other.json"
    path.write_text(json.dumps(other))
    r = run(*solve_args(path, url, "one", 5))
    assert r.exit_code == 2 and r.stderr.startswith("error: --study:"), r.output


# ------------------------------------------------------------------ workers
def kill_and_resume(problem_file, url, tmp_path):
    study = f"kill-{uuid.uuid4().hex[:8]}"
    # the schema is made here, before the worker starts: a reader polling a new SQLite
    # file while the worker makes the same tables can both insert alembic's version row
    # (UNIQUE constraint failed: alembic_version.version_num)
    optuna.storages.RDBStorage(with_driver(url))
    proc = subprocess.Popen(
        solve_cmd(problem_file, url, study, 10**7),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_complete(url, study, 100, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = {t.number: t.values for t in trials_by_state(url, study)["COMPLETE"]}
    assert len(before) >= 100
    out = tmp_path / "resumed.json"
    r = subprocess.run(solve_cmd(problem_file, url, study, 40, out), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    states = trials_by_state(url, study)
    after = {t.number: t.values for t in states["COMPLETE"]}
    # nothing finished before the kill is lost or changed; the rerun adds its 40
    assert all(after[n] == v for n, v in before.items())
    assert len(after) == len(before) + 40
    assert json.loads(out.read_text())["evaluated"] == len(after)
    # workers store only finished trials (and each its ticket): nothing running or failed
    assert set(states) == {"COMPLETE", "TICKET"}
    assert all(t.state.name == "PRUNED" for t in states["TICKET"])


@pytest.mark.slow
def test_sqlite_killed_worker_loses_no_finished_trial(problem_file, tmp_path):
    kill_and_resume(problem_file, f"sqlite:///{tmp_path / 'study.db'}", tmp_path)


def test_postgres_killed_worker_loses_no_finished_trial(problem_file, tmp_path, postgres_url):
    kill_and_resume(problem_file, postgres_url, tmp_path)


def test_postgres_two_workers_share_one_study(problem_file, tmp_path, postgres_url):
    study = f"two-{uuid.uuid4().hex[:8]}"
    outs = [tmp_path / f"w{i}.json" for i in range(2)]
    procs = [
        subprocess.Popen(
            solve_cmd(problem_file, postgres_url, study, 80, o), stderr=subprocess.PIPE, text=True
        )
        for o in outs
    ]
    password = postgres_url.split("@")[0].rsplit(":", 1)[-1]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert password not in err
        assert "password" not in err.lower() or "***" in err
    states = trials_by_state(postgres_url, study)
    numbers = sorted(t.number for t in states["COMPLETE"] + states["TICKET"])
    assert set(states) == {"COMPLETE", "TICKET"}  # none lost half-way, none failed
    assert len(states["TICKET"]) == 2  # one number per worker
    assert numbers == list(range(len(numbers)))  # every trial once: no duplicate, no gap
    assert len(searched(states["COMPLETE"])) == 160
    docs = [json.loads(o.read_text()) for o in outs]
    assert all("80 trials run now" in d["notes"][0] for d in docs)
    assert max(d["evaluated"] for d in docs) == len(states["COMPLETE"])
    for o in outs:
        assert password not in o.read_text()


# ------------------------------------------------------------------ command line
def test_cli_optuna_is_reproducible_from_its_seed(problem_file):
    cmd = [sys.executable, "-m", "allocator", "solve", str(problem_file), "--strategy", "optuna"]
    cmd += ["--trials", "60", "--seed", "7", "--json", "-"]
    runs = [subprocess.run(cmd, capture_output=True, text=True) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    docs = [json.loads(r.stdout) for r in runs]
    assert docs[0]["front"] == docs[1]["front"] and docs[0]["exact"] is False


def test_cli_auto_says_what_it_picked_and_why(problem_file):
    r = subprocess.run(
        [sys.executable, "-m", "allocator", "solve", str(problem_file)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "auto picked exact: 4,095 subsets" in " ".join(r.stderr.split())
    assert "exact" in r.stdout
