"""The edge: files in, documents out (docs/design.md §5, §6).

- :mod:`.spec`: the problem file's pydantic schema (the only pydantic models), its value
  types in :mod:`.spec_types` and its error messages in :mod:`.spec_errors`;
- :mod:`.build`: the only code that turns a validated file into a
  :class:`~allocator.core.problem.Problem`;
- :mod:`.inputs`: safe reading of every input (regular files, size and depth limits);
- :mod:`.trace`: request traces (the Azure LLM inference trace CSV) for the simulator;
- :mod:`.outcome_log`: the outcome log a problem file names (``errors.outcomes``);
- :mod:`.staged`: output files written only once a command has succeeded;
- :mod:`.quoting`: names and input text on their way to a terminal, a picture, a shell
  script or an error message (escaped, quoted, secrets masked);
- :mod:`.ranges`: ``LO:HI:STEPS`` ranges.

The modules are imported where they are needed (``spec`` loads pydantic), so this
package re-exports nothing.
"""

__all__: list[str] = []
