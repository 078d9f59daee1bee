"""Stored studies under faults: passwords never shown, seeding that survives a kill,
``--timeout`` while seeding, a database that goes away, SQLite without a path, and
``auto`` at N = 1024.

Secrets are checked against what SQLAlchemy's own parser (``make_url``, the one that
connects) reads from each URL, not against the masking code. The PostgreSQL tests need
``ALLOCATOR_TEST_POSTGRES_URL`` (``.ci/run`` sets it) and skip without it.
"""

import json
import subprocess
import sys
import time
import types
import uuid
from decimal import Decimal
from urllib.parse import quote

import numpy as np
import optuna
import pytest
from sqlalchemy.engine import make_url

import allocator
from allocator.exceptions import InputError
from allocator.io.build import problem_from_file
from allocator.search import study as study_module
from allocator.search.auto import choose_strategy, scientific
from allocator.search.exact import ExactStrategy
from allocator.search.knapsack import KnapsackStrategy
from allocator.search.storage import mask_text, mask_url, with_driver
from allocator.search.study import OptunaStrategy
from tests.support.cli_runner import run
from tests.support.tcp_proxy import TcpProxy


def run_cli(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "allocator", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_problem(path, n, seed=0, errors=None, k_max=16, m=None):
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
    if errors is not None:
        raw["errors"] = errors
    if m is not None:
        raw["search"]["m"] = m
    path.write_text(json.dumps(raw))
    return path


def sqlalchemy_secrets(url):
    """Every password SQLAlchemy reads from ``url``, and their encoded forms."""
    u = make_url(url)
    found = [u.password] if u.password else []
    found += [v for k, v in u.query.items() if k == "password"]
    return [s for f in found for s in (f, quote(f, safe=""))]


# ------------------------------------------------------------------ masking
URLS = [
    "postgresql://bob:s3cret-pw@db.example:5432/plans",
    "postgresql://bob@db.example/plans?password=qu3ry-secret&sslmode=require",
    "postgresql://bob@db.example/plans?sslmode=require&password=qu3ry%20secret",
    "postgresql://bob:enc%40oded-pw@db.example/plans",
    "postgresql+psycopg2://bob:col:on-pw@db.example/plans",
    "postgresql://bob:in@side-pw@db.example/plans",
    "mysql://bob:xx1@yy2@z-pw@db.example/plans?password=second-pw",
]


@pytest.mark.parametrize("url", URLS)
def test_mask_hides_every_password_sqlalchemy_reads(url):
    shown = mask_url(url)
    for secret in sqlalchemy_secrets(url):
        assert secret not in shown
    assert "db.example" in shown and "plans" in shown and "bob" in shown
    text = f"could not connect to {url}: password {make_url(url).password} rejected"
    masked = mask_text(text, url)
    for secret in sqlalchemy_secrets(url):
        assert secret not in masked


@pytest.mark.parametrize(
    "url, password",
    [
        ("postgresql://bob:in@side-pw@db.example/plans", "in@side-pw"),
        ("mysql://bob:xx1@yy2@z-pw@db.example/plans", "xx1@yy2@z-pw"),
    ],
)
def test_unencoded_at_in_password_hides_all_of_it(url, password):
    # SQLAlchemy reads the password only up to the first '@' and the rest as the host
    assert make_url(url).password != password
    shown = mask_url(url)
    assert shown.endswith("@db.example/plans") and "side" not in shown and "z-pw" not in shown
    for piece in [password, *password.split("@")]:
        assert piece not in mask_text(f"host {make_url(url).host!r}: {password}", url)


@pytest.mark.parametrize(
    "url, secret",
    [
        ("postgresql://bob@127.0.0.1:9/nodb?password=hunter2query", "hunter2query"),
        ("postgresql://bob:hunt@er2secret@127.0.0.1:9/nodb", "er2secret"),
        ("postgresql://bob:hunt%40er2secret@127.0.0.1:9/nodb", "er2secret"),
    ],
)
def test_cli_never_prints_the_password(tmp_path, url, secret):
    problem = write_problem(tmp_path / "p.json", 5)
    out = tmp_path / "out.json"
    r = run_cli("solve", problem, "-s", "optuna", "--storage", url, "--trials", 5, "--json", out)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --storage:"), r.stderr
    assert secret not in r.stderr + r.stdout and "hunt" not in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


def test_password_in_query_or_with_at_never_reaches_outputs(tmp_path, postgres_url):
    """A working server: the password given as ``?password=`` and one holding ``@``
    (percent-encoded, as it must be) appear in neither stderr nor the JSON."""
    import psycopg2

    base = make_url(postgres_url)
    role = f"r{uuid.uuid4().hex[:8]}"
    password = f"pw{uuid.uuid4().hex[:8]}@ss{uuid.uuid4().hex[:8]}"  # both halves unique
    conn = psycopg2.connect(
        with_driver(postgres_url).replace("postgresql+psycopg2", "postgresql"), connect_timeout=5
    )
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"CREATE ROLE {role} LOGIN PASSWORD %s", (password,))
        cur.execute(f"CREATE DATABASE {role} OWNER {role}")
    conn.close()
    server = f"{base.host}:{base.port}/{role}"
    urls = {
        "query": (
            f"postgresql://{role}@{server}?password={quote(password, safe='')}",
            [password, quote(password, safe="")],
        ),
        "encoded-at": (
            f"postgresql://{role}:{quote(password, safe='')}@{server}",
            [password, quote(password, safe="")],
        ),
    }
    problem = write_problem(tmp_path / "p.json", 6)
    for name, (url, secrets) in urls.items():
        out = tmp_path / f"{name}.json"
        r = run_cli(
            "solve", problem, "-s", "optuna", "--storage", url, "--study", name, "--trials", 10,
            "--json", out,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        text = r.stderr + r.stdout + out.read_text()
        assert all(s not in text for s in secrets) and "***" in out.read_text()
    # the same password unencoded: refused before connecting, still hidden
    raw = f"postgresql://{role}:{password}@{server}"
    r = run_cli("solve", problem, "-s", "optuna", "--storage", raw, "--trials", 5)
    assert r.returncode == 2 and "unencoded '@'" in r.stderr
    assert all(piece not in r.stderr for piece in password.split("@"))


# ------------------------------------------------------------------ sqlite without a path
@pytest.mark.parametrize("url", ["sqlite:///", "sqlite://"])
def test_sqlite_without_a_path_is_refused(tmp_path, url):
    problem = write_problem(tmp_path / "p.json", 5)
    r = run("solve", problem, "-s", "optuna", "--storage", url, "--trials", 5)  # in-process
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --storage:")
    assert "names no database file" in lines[0]


# ------------------------------------------------------------------ seeding and kills
class Killed(BaseException):
    """Stands for SIGKILL: nothing in the package catches it."""


def seed_configs(url, study):
    """``{(frozenset(drafters), k)}`` of the stored seed points, and how many rows."""
    s = optuna.load_study(study_name=study, storage=url)
    rows = [t for t in s.get_trials(deepcopy=False) if t.user_attrs.get("seed")]
    # a trial's parameters: k and one 0/1 "d:<name>" per drafter
    chosen = [frozenset(p[2:] for p, v in t.params.items() if p[:2] == "d:" and v) for t in rows]
    configs = {(c, t.params["k"]) for c, t in zip(chosen, rows, strict=True)}
    return configs, len(rows), s.user_attrs.get("seeded")


def front_configs(problem, front):
    """``{(frozenset(drafters), k)}`` of a front's points."""
    return {
        (frozenset(problem.names[i] for i in np.flatnonzero(row)), int(k))
        for row, k in zip(front.members, front.k, strict=True)
    }


def exact_front_configs(problem):
    return front_configs(problem, ExactStrategy().solve(problem).front)


@pytest.mark.parametrize("kill_at", ["after 5 seed points", "writing the seeded flag"])
def test_a_kill_while_seeding_leaves_a_study_the_next_run_completes(tmp_path, monkeypatch, kill_at):
    problem = problem_from_file(write_problem(tmp_path / "p.json", 10))
    url = f"sqlite:///{tmp_path / 'study.db'}"
    expected = exact_front_configs(problem)  # independent errors: the seeds are this front
    assert 5 < len(expected) <= study_module.SEED_MAX_TRIALS

    add_trial, set_attr = optuna.study.Study.add_trial, optuna.study.Study.set_user_attr
    stored = []

    def dying_add_trial(self, trial):  # finished trials are stored; enqueued ones wait
        finished = trial.state == optuna.trial.TrialState.COMPLETE
        if finished and kill_at == "after 5 seed points" and len(stored) == 5:
            raise Killed
        add_trial(self, trial)
        if finished:
            stored.append(trial)

    def dying_set_attr(self, key, value):
        if kill_at == "writing the seeded flag" and key == "seeded":
            raise Killed
        set_attr(self, key, value)

    with monkeypatch.context() as patch:
        patch.setattr(optuna.study.Study, "add_trial", dying_add_trial)
        patch.setattr(optuna.study.Study, "set_user_attr", dying_set_attr)
        with pytest.raises(Killed):
            OptunaStrategy(trials=20, seed=1, storage=url, study="s").solve(problem)
    configs, rows, flag = seed_configs(url, "s")
    assert not flag
    assert rows == (5 if kill_at == "after 5 seed points" else len(expected))

    res = OptunaStrategy(trials=20, seed=1, storage=url, study="s").solve(problem)
    configs, rows, flag = seed_configs(url, "s")
    assert flag is True
    assert configs == expected and rows == len(expected)  # every seed once
    assert "stored by an earlier run" in res.notes[-1]
    # the heuristic's front, seeded with the whole exact front, is that front
    assert front_configs(problem, res.front) == expected
    again = OptunaStrategy(trials=5, seed=1, storage=url, study="s").solve(problem)
    assert "study resumed" in again.notes[-1]
    assert seed_configs(url, "s")[1] == len(expected)


def test_timeout_is_honoured_while_seeding(tmp_path, monkeypatch):
    """A clock that advances one second per stored trial: with ``timeout=10`` the run
    stops after about ten stored seed points and answers from them."""
    problem = problem_from_file(write_problem(tmp_path / "p.json", 100))
    url = f"sqlite:///{tmp_path / 'study.db'}"
    clock = [0.0]
    add_trial = optuna.study.Study.add_trial

    def slow_add_trial(self, trial):  # finished trials are stored; enqueued ones wait
        add_trial(self, trial)
        if trial.state == optuna.trial.TrialState.COMPLETE:
            clock[0] += 1.0

    monkeypatch.setattr(optuna.study.Study, "add_trial", slow_add_trial)
    monkeypatch.setattr(study_module, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    res = OptunaStrategy(timeout=10, seed=0, storage=url, study="t").solve(problem)
    configs, rows, flag = seed_configs(url, "t")
    assert 10 <= rows <= 11 and not flag  # seeding unfinished, what was stored is kept
    assert res.evaluated == rows and len(res.front) >= 1
    assert "--timeout" in res.notes[-1] and "seeding unfinished" in res.notes[-1]
    assert len(KnapsackStrategy().solve(problem).front) > rows  # there was more to seed


# ------------------------------------------------------------------ the database goes away
def test_database_error_mid_run_is_one_masked_line(tmp_path, monkeypatch):
    """Optuna wraps the driver's error in ``StorageInternalError``: still one line."""
    from sqlalchemy.exc import OperationalError

    problem = problem_from_file(write_problem(tmp_path / "p.json", 6))
    url = f"sqlite:///{tmp_path / 'study.db'}"
    calls = [0]
    add_trial = optuna.study.Study.add_trial

    def failing(self, trial):
        calls[0] += 1
        if calls[0] > 3:
            cause = OperationalError("INSERT ...", {}, Exception("server closed the connection"))
            raise optuna.exceptions.StorageInternalError("commit failed") from cause
        add_trial(self, trial)

    monkeypatch.setattr(optuna.study.Study, "add_trial", failing)
    with pytest.raises(InputError) as info:
        OptunaStrategy(trials=20, storage=url, study="x").solve(problem)
    assert info.value.field == "storage"
    assert "server closed the connection" in info.value.message


def test_postgres_going_away_mid_run_is_one_line_exit_2(tmp_path, postgres_url):
    real = make_url(with_driver(postgres_url))
    proxy = TcpProxy(real.host, real.port)
    via_proxy = real.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    study = f"away-{uuid.uuid4().hex[:8]}"
    problem = write_problem(tmp_path / "p.json", 12)
    out = tmp_path / "out.json"
    cmd = [sys.executable, "-m", "allocator", "solve", str(problem), "-s", "optuna"]
    cmd += ["--storage", via_proxy, "--study", study, "--trials", "10000000", "--json", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        start = time.monotonic()
        while time.monotonic() - start < 120:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                s = optuna.load_study(study_name=study, storage=with_driver(postgres_url))
                if len(s.get_trials(deepcopy=False)) >= 60:
                    break
            except KeyError:
                pass  # not created yet
            time.sleep(0.2)
        proxy.cut()
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --storage:"), stderr
    assert "Traceback" not in stderr and not out.exists()
    assert all(secret not in stderr for secret in sqlalchemy_secrets(postgres_url))


# ------------------------------------------------------------------ N = 1024
@pytest.mark.parametrize("n", [0, 7, 999, 1000, 9994, 9995, 99_999, 2**40, 2**1023, 2**1024 - 1])
def test_scientific_matches_decimal(n):
    digits = len(str(n))
    want = f"{Decimal(n):.2e}" if digits > 3 else str(n)
    want = want.replace("E+", "e+")
    if digits > 3:  # Decimal writes the exponent unpadded
        mant, exp = want.split("e+")
        want = f"{mant}e+{int(exp):02d}"
    assert scientific(n) == want


def test_auto_at_1024_drafters(tmp_path):
    problem = problem_from_file(write_problem(tmp_path / "p.json", 1024))
    name, reason = choose_strategy(problem)
    assert name == "knapsack" and "1.80e+308 subsets" in reason
    r = run("solve", tmp_path / "p.json", "--json", "-")  # in-process
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["exact"] is True and len(doc["front"]) > 10


@pytest.mark.slow
def test_optuna_at_1024_drafters_is_bounded(tmp_path):
    """Under correlated errors auto picks optuna; it runs the trials asked for."""
    path = write_problem(
        tmp_path / "p.json", 1024, errors={"model": "exchangeable", "correlation": 0.3}
    )
    problem = allocator.load(path)
    assert choose_strategy(problem)[0] == "optuna"
    r = run_cli("solve", path, "--trials", 10, "--json", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (note,) = [n for n in doc["notes"] if n.startswith("optuna NSGA-II")]
    assert doc["exact"] is False and "10 trials run now" in note
