"""One training step drawn as a timeline (chapter 15): when the forward, the backward's computation and each
all-reduce ran on a rank, for several ways of averaging the gradients, from :func:`tutorial_lib.distributed.step_timeline`.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from tutorial_lib.distributed import StepTimeline
from tutorial_lib.widgets._plotting import new_figure

_FORWARD, _BACKWARD, _ALL_REDUCE, _LAUNCH = "0.7", "C0", "C1", "C3"


def plot_step_timelines(timelines: dict[str, StepTimeline], *, title: str) -> Figure:
    """One row per way of averaging (top to bottom in ``timelines``' order): the computation on the upper lane, the
    all-reduces on the lower one: a tick where each was launched, a bar while gloo's threads ran it; in ms from the
    step's start."""
    if not timelines:
        raise ValueError("timelines must hold at least one step")
    fig, ax = new_figure(1, 1, figsize=(7.0, 0.75 + 0.62 * len(timelines)))
    for row, timeline in enumerate(reversed(list(timelines.values()))):
        compute, communicate = row + 0.12, row - 0.22
        for (start, end), colour in ((timeline.forward, _FORWARD), (timeline.backward, _BACKWARD)):
            ax.broken_barh([(start, end - start)], (compute, 0.3), color=colour)
        ax.broken_barh([(start, end - start) for start, end in timeline.all_reduces], (communicate, 0.3),
                       color=_ALL_REDUCE, edgecolor="white", linewidth=0.5)
        ax.plot(timeline.launches, [communicate + 0.15] * len(timeline.launches), linestyle="none", marker="|",
                markersize=11, markeredgewidth=1.2, color=_LAUNCH)
        ax.plot([timeline.step[1]] * 2, [communicate - 0.05, compute + 0.35], color="black", lw=1)
    ax.set_yticks(range(len(timelines)), list(reversed(list(timelines))), fontsize=8)
    ax.set(xlabel="ms from the step's start (the black tick: the step ends)", title=title, xlim=(0, None))
    ax.legend(handles=[Patch(color=_FORWARD, label="forward"), Patch(color=_BACKWARD, label="backward (computation)"),
                       Line2D([], [], linestyle="none", marker="|", markersize=9, color=_LAUNCH,
                              label="all-reduce launched"),
                       Patch(color=_ALL_REDUCE, label="all-reduce run (gloo's thread)")],
              fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    return fig
