"""The one error type users see: bad input, named by the field it concerns."""

from __future__ import annotations


class InputError(ValueError):
    """Bad or unsatisfiable input.

    ``field`` is the dotted path of the offending field in the problem file or the
    command-line option (``drafters.1.acceptance``, ``budget.hosting_cost``,
    ``--drafters``); ``message`` says what is wrong with it. The command line prints
    ``error: <field>: <message>`` on one line and exits with status 2.
    """

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
