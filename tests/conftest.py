import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
