"""Pictures of results, drawing only: the front, the gain against error correlation, the
distribution of accepted units, the hosting and load sweeps, the serving schedule and
the tree front.

Every function takes plain data (a :class:`~allocator.core.result.SolveResult`, numpy
arrays or a command's JSON document, computed by the caller) and an output path, draws
on a private :class:`matplotlib.figure.Figure` with the Agg canvas (no pyplot, no global
backend change, nothing happens on ``import allocator``), writes PNG or SVG by the
path's extension (atomically: a file is written whole or not at all) and returns the
data it plotted, read back from the drawn artists, so that callers and tests can check
the picture.

One module per family: :mod:`.common` (paths, figure, saving, literal text, axis names),
:mod:`.labels` (label placement), :mod:`.front`, :mod:`.breakeven`, :mod:`.accepted`,
:mod:`.sweep` (hosting and load sweeps), :mod:`.schedule`, :mod:`.tree`, :mod:`.bench`
(a simulated run's latencies, a fleet's cost against the request rate),
:mod:`.serving_front` (tokens/s per GPU against per user, speculation on and off).
"""

from .accepted import plot_accepted
from .bench import plot_bench, plot_rate_sweep
from .breakeven import plot_breakeven
from .common import COST_LABELS, FORMATS, THROUGHPUT_LABEL, check_plot_path
from .front import plot_front, point_label
from .labels import PlacedLabel, boxes_overlap, place_labels
from .schedule import plot_schedule
from .serving_front import plot_serving_front
from .sweep import plot_capacity_sweep, plot_sweep
from .tree import plot_tree_front

__all__ = [
    "COST_LABELS",
    "FORMATS",
    "THROUGHPUT_LABEL",
    "PlacedLabel",
    "boxes_overlap",
    "check_plot_path",
    "place_labels",
    "plot_accepted",
    "plot_bench",
    "plot_breakeven",
    "plot_capacity_sweep",
    "plot_front",
    "plot_rate_sweep",
    "plot_schedule",
    "plot_serving_front",
    "plot_sweep",
    "plot_tree_front",
    "point_label",
]
