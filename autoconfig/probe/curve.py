"""Plateaus and knees of a bandwidth-versus-working-set curve.

The curve is cut into as many plateaus as the memory hierarchy has levels (each
data cache, then DRAM) by optimal segmentation: dynamic programming over the points
(sorted by working set) minimizing the squared deviation of log-bandwidth from each
plateau's mean, each plateau at least `MIN_POINTS` long; the first plateau starts
at the smallest working set and the last ends at the largest. Points between two
plateaus may be left out as transition (a gradual ramp, or an outlier) at a fixed
cost each, `GAP_COST`; without that, a gradual ramp between two levels can take a
level of its own and merge two close ones. The knee between two
plateaus is where the curve crosses their geometric-mean bandwidth, interpolated in
log-log space.

The curve is first smoothed by a 3-point running median: on a shared machine single
points dip (interference) and, where DRAM is shared with other tenants, alternate by
up to 1.7× from one working set to the next; the median keeps one such point from
forming or moving a level. Nothing here looks at the cache sizes: the knees are found from the
measurements alone, so comparing them with sysfs sizes is a real check.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

MIN_POINTS = 2
"""Fewest points a plateau may have, so that one noisy point cannot form a level."""

RELATIVE_NOISE = 0.10
"""Timing noise tolerated within a plateau on a shared machine (repeat runs: ~5-10%)."""

GAP_COST = math.log1p(RELATIVE_NOISE) ** 2
"""Cost of leaving a point out: a point further than the noise from its plateau's
mean costs more inside the plateau than outside it."""


@dataclass(frozen=True)
class Plateaus:
    bandwidths: tuple[float, ...]  # median bandwidth of each plateau, fastest first
    knees: tuple[float, ...]  # working set ending each plateau but the last


def find_plateaus(working_sets: list[float], bandwidths: list[float], levels: int) -> Plateaus:
    """Cut the curve into `levels` plateaus; return their bandwidths and knees."""
    n = len(working_sets)
    if levels < 1 or n < levels * MIN_POINTS:
        raise ValueError(f"{n} points cannot form {levels} plateaus of {MIN_POINTS} points")
    order = sorted(range(n), key=lambda i: working_sets[i])
    xs = [working_sets[i] for i in order]
    raw = [bandwidths[i] for i in order]
    ys = [statistics.median(raw[max(0, i - 1) : i + 2]) for i in range(n)]  # see module doc
    logs = [math.log(y) for y in ys]
    prefix, prefix_sq = [0.0], [0.0]
    for v in logs:
        prefix.append(prefix[-1] + v)
        prefix_sq.append(prefix_sq[-1] + v * v)

    def cost(i: int, j: int) -> float:  # squared deviation of logs[i:j] from its mean
        total = prefix[j] - prefix[i]
        return prefix_sq[j] - prefix_sq[i] - total * total / (j - i)

    # best[k][j]: minimal cost of the first j points with k plateaus, the k-th ending
    # at j; points between plateaus are gaps at GAP_COST each.
    # The best gap before a plateau starting at i is a running minimum over its end g:
    # min_g best[k-1][g] + GAP_COST*(i-g) = GAP_COST*i + min_g (best[k-1][g] - GAP_COST*g).
    best = [[math.inf] * (n + 1) for _ in range(levels + 1)]
    start_of = [[0] * (n + 1) for _ in range(levels + 1)]
    end_of_previous = [[0] * (n + 1) for _ in range(levels + 1)]
    best[0][0] = 0.0
    for k in range(1, levels + 1):
        running, running_at = math.inf, 0
        lead = [(math.inf, 0)] * (n + 1)  # per start i: (cost before i, where the gap starts)
        for i in range(n + 1 if k > 1 else 1):  # the first plateau starts at point 0
            candidate = best[k - 1][i] - GAP_COST * i
            if candidate < running:
                running, running_at = candidate, i
            lead[i] = (running + GAP_COST * i, running_at)
        for j in range(MIN_POINTS, n + 1):
            for i in range(0, j - MIN_POINTS + 1):
                total = lead[i][0] + cost(i, j)
                if total < best[k][j]:
                    best[k][j], start_of[k][j], end_of_previous[k][j] = total, i, lead[i][1]
    last = n  # the last plateau ends at the last point: no trailing gap
    segments = []
    for k in range(levels, 0, -1):
        segments.insert(0, (start_of[k][last], last))
        last = end_of_previous[k][last]
    plateaus = [statistics.median(ys[a:b]) for a, b in segments]
    knees = []
    for k in range(levels - 1):
        threshold = math.sqrt(plateaus[k] * plateaus[k + 1])
        knees.append(_crossing(xs, ys, segments[k][0], segments[k + 1][1], threshold))
    return Plateaus(tuple(plateaus), tuple(knees))


def _crossing(xs: list[float], ys: list[float], start: int, stop: int, threshold: float) -> float:
    """First working set in xs[start:stop] where the curve falls below `threshold`."""
    for i in range(start + 1, stop):
        if ys[i] < threshold <= ys[i - 1]:
            t = math.log(ys[i - 1] / threshold) / math.log(ys[i - 1] / ys[i])
            return math.exp(math.log(xs[i - 1]) + t * math.log(xs[i] / xs[i - 1]))
    # No clean crossing (noise): the boundary between the two segments.
    middle = next((i for i in range(start + 1, stop) if ys[i] < threshold), stop - 1)
    return math.sqrt(xs[middle - 1] * xs[middle])
