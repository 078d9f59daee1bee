import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Slow tests that cannot carry ``@pytest.mark.slow`` of their own: the notebooks (nbmake
#: items, no decorators); every other slow test is marked where it is written. A file
#: path marks every item of the file; ``path::test`` every parametrisation of the test.
SLOW = frozenset(
    {
        # every notebook but 09 (a second or so): the fast loop still runs one through nbmake
        "notebooks/01-paper-reproduced.ipynb",
        "notebooks/02-correlation-breakeven.ipynb",
        "notebooks/03-budget-across-m-and-k.ipynb",
        "notebooks/04-capacity-planning.ipynb",
        "notebooks/05-serving-under-load.ipynb",
        "notebooks/06-width-against-depth.ipynb",
        "notebooks/07-capacity.ipynb",
        "notebooks/08-requests-and-slos.ipynb",
        "notebooks/10-serving-front.ipynb",
    }
)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path in SLOW or item.nodeid.split("[", 1)[0] in SLOW:
            item.add_marker(pytest.mark.slow)
    # slow tests first (in their order): under xdist the longest ones (a notebook of a
    # minute) start at once instead of ending the run alone on one worker
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def problems_dir() -> Path:
    return ROOT / "problems"


#: the PostgreSQL server the storage tests run against (set by .ci/run); unset: they skip
POSTGRES_ENV = "ALLOCATOR_TEST_POSTGRES_URL"


@pytest.fixture(scope="module")
def postgres_url() -> str:
    """The URL in ``POSTGRES_ENV`` once a connection to it succeeds; skips otherwise."""
    from allocator.search.storage import mask_text, mask_url, with_driver

    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(f"{POSTGRES_ENV} is not set (.ci/run starts a PostgreSQL server and sets it)")
    import psycopg2

    try:
        psycopg2.connect(
            with_driver(url).replace("postgresql+psycopg2", "postgresql"), connect_timeout=3
        ).close()
    except psycopg2.OperationalError as exc:
        pytest.skip(
            f"no PostgreSQL server reachable at {mask_url(url)}: {mask_text(str(exc), url)}"
        )
    return url
