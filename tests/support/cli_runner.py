"""Running the ``allocator`` command line in-process, for the tests that drive it."""

from typer.testing import CliRunner, Result

from allocator.cli import app

runner = CliRunner()


def run(*args: object) -> Result:
    """Invoke ``allocator`` with ``args``, each turned into a string (paths, numbers)."""
    return runner.invoke(app, [str(a) for a in args])
