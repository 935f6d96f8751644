"""Point labels that never overlap: each placed beside its point where it covers no other label,
no point's marker and no other label's leader line, or left out.

A panel's labels are placed together, after everything is drawn and the axes' limits are final
(:func:`place_labels`), in display pixels. Each label's size is measured once; its candidate
positions are around its point, nearest first: beside it (at a corner, above, below or level
with it), then in rings farther out, each with a thin leader line to the point. A candidate is
out if it leaves the panel, covers another point's marker or an artist the caller keeps clear
(``avoid``: a legend inside the panel, other points' markers), or its leader passes through one. Of
the rest, a label takes the cheapest free one (not over a label placed before it or its leader,
its own leader over none): cost grows with the ring, and a label also pays for lying across a
curve and, beside its point without a leader, for being about as near another point (which it
would seem to name). A label with no free spot then takes one where a single placed label is in
its way, if that one has another free spot to move to. Several orders of the labels are tried
(as given, reversed, the most constrained first, left to right) and the layout with the fewest
labels left out, then the lowest cost, is drawn. A label with no free position is left out (the
caller says how many), never drawn over another.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.text import Annotation

__all__ = ["PointLabel", "place_labels"]

FONT_SIZE = 7.0
_NEAR_PT = 4.0  # a label beside its point: this far from it
_STEP_PT = 9.0  # each farther ring (with a leader line) this much farther out
_RINGS = 10  # the ring beside the point and 9 farther out (up to 85 pt)
_GAP_X_PX, _GAP_Y_PX = 5.0, 2.0  # clear space kept beside and above/below each label
_MARKER_PT = 3.5  # half a marker's size (matplotlib's default marker is 6 pt across)
# costs: a ring farther out; lying across a curve; a leader across one; a leaderless label
# about as near another point as its own; a leader across another leader; a label left out
_RING_COST, _CURVE_COST, _LEADER_CURVE_COST = 10.0, 4.0, 1.0
_AMBIGUOUS_COST, _LEADERS_CROSS_COST, _LEFT_OUT_COST = 25.0, 6.0, 1000.0
# (ha, va, x sign, y sign) of each side, the sides towards the panel's middle first
_SIDES_LEFT_HALF = (
    ("left", "bottom", 1, 1),
    ("left", "top", 1, -1),
    ("center", "bottom", 0, 1),
    ("center", "top", 0, -1),
    ("left", "center", 1, 0),
    ("right", "bottom", -1, 1),
    ("right", "top", -1, -1),
    ("right", "center", -1, 0),
)
_SIDES_RIGHT_HALF = tuple(
    ({"left": "right", "right": "left"}.get(ha, ha), va, -sx, sy)
    for ha, va, sx, sy in _SIDES_LEFT_HALF
)

Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in display pixels
Segment = tuple[float, float, float, float]


@dataclass(frozen=True)
class PointLabel:
    """One label to place: the point (data coordinates), its text, its colour, and how large
    the point's marker is (points across: a label keeps clear of it)."""

    x: float
    y: float
    text: str
    color: str = "dimgrey"
    marker_pt: float = 2 * _MARKER_PT


@dataclass(frozen=True)
class _Spot:
    """One candidate position of a label: its box, its cost alone, how to annotate it."""

    cost: float
    box: Box
    ha: str
    va: str
    offset_pt: tuple[float, float]
    leader: Segment | None


def place_labels(
    axes: Axes, labels: Sequence[PointLabel], avoid: Sequence[Artist] = ()
) -> tuple[list[Annotation], int]:
    """Annotate ``labels`` on ``axes`` (everything else drawn, its limits and position final)
    so that no two overlap, and none covers an artist of ``avoid`` (its drawn extent) or has
    its leader through one; returns the annotations drawn (in the order of ``labels``, less
    those left out) and how many were left out for want of room."""
    if not labels:
        return [], 0
    axes.get_xlim(), axes.get_ylim()  # (settles the autoscaled limits transData maps to)
    at = [(float(x), float(y)) for x, y in axes.transData.transform([(p.x, p.y) for p in labels])]
    panel = _Panel.of(axes, at, labels, avoid)
    spots = [_spots(panel, label.text, index) for index, label in enumerate(labels)]
    best: tuple[float, dict[int, _Spot]] | None = None
    for order in _orders(at, spots):
        total, chosen = _greedy(order, spots)
        if best is None or total < best[0]:
            best = (total, chosen)
        if total == sum(min((s.cost for s in found), default=_LEFT_OUT_COST) for found in spots):
            break  # (every label at its own best spot: no order does better)
    assert best is not None
    chosen = best[1]
    drawn = [
        _annotate(axes, label, chosen[index])
        for index, label in enumerate(labels)
        if index in chosen
    ]
    return drawn, len(labels) - len(chosen)


@dataclass(frozen=True)
class _Panel:
    """What every label of one panel is placed against (display pixels)."""

    axes: Axes
    renderer: Any
    px_per_pt: float
    inside: Box
    at: list[tuple[float, float]]  # the points
    halves: list[float]  # half of each point's marker
    curves: list[Segment]
    blocked: list[Box]  # what no label covers and no leader crosses (``avoid``)

    @classmethod
    def of(
        cls,
        axes: Axes,
        at: list[tuple[float, float]],
        labels: Sequence[PointLabel],
        avoid: Sequence[Artist],
    ) -> _Panel:
        fig = axes.get_figure()
        assert fig is not None
        frame = axes.bbox
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        extents = [artist.get_window_extent(renderer) for artist in avoid]
        px_per_pt = fig.dpi / 72.0
        return cls(
            axes,
            renderer,
            px_per_pt,
            (frame.x0, frame.y0, frame.x1, frame.y1),
            at,
            [label.marker_pt / 2 * px_per_pt for label in labels],
            _curve_segments(axes),
            [(e.x0, e.y0, e.x1, e.y1) for e in extents],
        )


def _spots(panel: _Panel, text: str, index: int) -> list[_Spot]:
    """The candidate positions of one label, cheapest first: each inside the panel, over no
    other point's marker, and with a leader through none."""
    marker = panel.halves[index]
    clearance = max(0.0, marker - _MARKER_PT * panel.px_per_pt)  # (a marker larger than 6 pt)
    px, py = panel.at[index]
    # (another label's point on the very spot, a compared sweep's, is this one's point too)
    apart = [
        (x, y, half)
        for (x, y), half in zip(panel.at, panel.halves, strict=True)
        if abs(x - px) > 1 or abs(y - py) > 1
    ]
    others = [(x, y) for x, y, _ in apart]
    markers = [(x - half, y - half, x + half, y + half) for x, y, half in apart]
    markers += panel.blocked
    middle = (min(x for x, _ in panel.at) + max(x for x, _ in panel.at)) / 2
    sides = _SIDES_RIGHT_HALF if px > middle else _SIDES_LEFT_HALF
    width, height = _size(panel.axes, text, panel.renderer)
    found: list[_Spot] = []
    for ring in range(_RINGS):
        distance = (_NEAR_PT + ring * _STEP_PT) * panel.px_per_pt + clearance
        for order, (ha, va, sx, sy) in enumerate(sides):
            dx, dy = sx * distance, sy * distance
            if sy == 0:  # level with the point: clear of its marker
                dx = sx * (distance + marker)
            box = _box(px + dx, py + dy, width, height, ha, va)
            if not _within(box, panel.inside) or any(_overlap(box, m) for m in markers):
                continue
            cost = ring * _RING_COST + order * 0.1
            if any(_crosses(segment, box) for segment in panel.curves):
                cost += _CURVE_COST
            leader = None
            if ring:
                leader = (px, py, px + dx, py + dy)  # to the label's corner or edge facing it
                if any(_crosses(leader, m) for m in markers):
                    continue
                if any(_segments_cross(leader, segment) for segment in panel.curves):
                    cost += _LEADER_CURVE_COST
            else:
                own = _distance(box, px, py)
                if any(_distance(box, x, y) <= 2 * own for x, y in others):
                    cost += _AMBIGUOUS_COST
            offset = (dx / panel.px_per_pt, dy / panel.px_per_pt)
            found.append(_Spot(cost, box, ha, va, offset, leader))
    found.sort(key=lambda spot: spot.cost)
    return found


def _orders(at: list[tuple[float, float]], spots: list[list[_Spot]]) -> list[list[int]]:
    given = list(range(len(at)))
    constrained = sorted(given, key=lambda i: (len(spots[i]), i))
    left_to_right = sorted(given, key=lambda i: (at[i][0], at[i][1]))
    orders: list[list[int]] = []
    for order in (given, given[::-1], constrained, left_to_right):
        if order not in orders:
            orders.append(order)
    return orders


def _greedy(order: list[int], spots: list[list[_Spot]]) -> tuple[float, dict[int, _Spot]]:
    """Each label of ``order`` in turn at its cheapest spot free of those placed before it,
    then each label left out placed by moving one in its way (:func:`_repair`); the layout's
    total cost (``_LEFT_OUT_COST`` per label left out) and the spots taken."""
    chosen: dict[int, _Spot] = {}
    for index in order:
        spot = _cheapest(spots[index], chosen)
        if spot is not None:
            chosen[index] = spot
    for index in order:
        if index not in chosen:
            _repair(index, spots, chosen)
    total = sum(_cost(spot, chosen, index) for index, spot in chosen.items())
    return total + _LEFT_OUT_COST * (len(spots) - len(chosen)), chosen


def _cheapest(candidates: list[_Spot], chosen: dict[int, _Spot]) -> _Spot | None:
    """The cheapest of ``candidates`` in conflict with none of ``chosen``."""
    pick: tuple[float, _Spot] | None = None
    for spot in candidates:
        if pick is not None and spot.cost >= pick[0]:
            break  # (sorted by cost alone: nothing later is cheaper)
        if any(_conflict(spot, other) for other in chosen.values()):
            continue
        cost = _cost(spot, chosen)
        if pick is None or cost < pick[0]:
            pick = (cost, spot)
    return None if pick is None else pick[1]


def _repair(index: int, spots: list[list[_Spot]], chosen: dict[int, _Spot]) -> None:
    """Place a label left out at a spot where exactly one placed label is in its way, moving
    that one to a free spot of its own (``chosen`` updated; unchanged when none works)."""
    for spot in spots[index]:
        blocking = [j for j, other in chosen.items() if _conflict(spot, other)]
        if len(blocking) != 1:
            continue
        (moved,) = blocking
        kept = {j: other for j, other in chosen.items() if j != moved}
        kept[index] = spot
        elsewhere = _cheapest([s for s in spots[moved] if s is not chosen[moved]], kept)
        if elsewhere is not None:
            chosen.clear()
            chosen.update(kept)
            chosen[moved] = elsewhere
            return


def _conflict(a: _Spot, b: _Spot) -> bool:
    """Whether two labels' spots cannot both be taken: their boxes overlap, or one's leader
    runs through the other's box."""
    if _overlap(a.box, b.box):
        return True
    if a.leader is not None and _crosses(a.leader, b.box):
        return True
    return b.leader is not None and _crosses(b.leader, a.box)


def _cost(spot: _Spot, chosen: dict[int, _Spot], index: int | None = None) -> float:
    """A spot's cost among the others taken (``index``: its own label, not counted)."""
    cost = spot.cost
    if spot.leader is not None:
        crossed = sum(
            1
            for j, other in chosen.items()
            if j != index
            and other.leader is not None
            and _segments_cross(spot.leader, other.leader)
        )
        cost += _LEADERS_CROSS_COST * crossed
    return cost


def _annotate(axes: Axes, label: PointLabel, spot: _Spot) -> Annotation:
    arrow: dict[str, Any] | None = None
    if spot.leader is not None:
        # (from the label's corner or edge facing the point, not through its middle)
        relpos = (
            {"left": 0.0, "right": 1.0}.get(spot.ha, 0.5),
            {"bottom": 0.0, "top": 1.0}.get(spot.va, 0.5),
        )
        arrow = {
            "arrowstyle": "-",
            "color": "silver",
            "linewidth": 0.6,
            "shrinkA": 0,
            "shrinkB": 3,
            "relpos": relpos,
        }
    return axes.annotate(
        label.text,
        (label.x, label.y),
        xytext=spot.offset_pt,
        textcoords="offset points",
        ha=spot.ha,
        va=spot.va,
        fontsize=FONT_SIZE,
        color=label.color,
        arrowprops=arrow,
    )


def _size(axes: Axes, text: str, renderer: Any) -> tuple[float, float]:
    """A label's width and height in pixels."""
    probe = axes.text(0, 0, text, fontsize=FONT_SIZE)
    extent = probe.get_window_extent(renderer)
    probe.remove()
    return extent.width, extent.height


def _box(x: float, y: float, width: float, height: float, ha: str, va: str) -> Box:
    """The box of a text of that size aligned so at (x, y), with the clear space around it."""
    x0 = {"left": x, "right": x - width}.get(ha, x - width / 2)
    y0 = {"bottom": y, "top": y - height}.get(va, y - height / 2)
    return (x0 - _GAP_X_PX, y0 - _GAP_Y_PX, x0 + width + _GAP_X_PX, y0 + height + _GAP_Y_PX)


def _distance(box: Box, x: float, y: float) -> float:
    """How far the point (x, y) is from the box (0 inside it)."""
    dx = max(box[0] - x, 0.0, x - box[2])
    dy = max(box[1] - y, 0.0, y - box[3])
    return float((dx * dx + dy * dy) ** 0.5)


def _within(box: Box, frame: Box) -> bool:
    return box[0] >= frame[0] and box[1] >= frame[1] and box[2] <= frame[2] and box[3] <= frame[3]


def _overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _crosses(segment: Segment, box: Box) -> bool:
    """Whether the segment passes through the box (Liang-Barsky clipping)."""
    x0, y0, x1, y1 = segment
    dx, dy = x1 - x0, y1 - y0
    low, high = 0.0, 1.0
    for p, q in ((-dx, x0 - box[0]), (dx, box[2] - x0), (-dy, y0 - box[1]), (dy, box[3] - y0)):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return False
    return True


def _segments_cross(a: Segment, b: Segment) -> bool:
    """Whether two segments cross (touching at an end does not count)."""

    def side(s: Segment, x: float, y: float) -> float:
        return (s[2] - s[0]) * (y - s[1]) - (s[3] - s[1]) * (x - s[0])

    return (side(a, b[0], b[1]) * side(a, b[2], b[3]) < 0) and (
        side(b, a[0], a[1]) * side(b, a[2], a[3]) < 0
    )


def _curve_segments(axes: Axes) -> list[Segment]:
    """The panel's drawn lines (each in its own coordinates: a threshold's ``axhline`` spans the
    panel) and line collections (``vlines``: interval bars) as display-pixel segments."""
    from matplotlib.collections import LineCollection

    segments: list[Segment] = []
    for line in axes.get_lines():
        points = line.get_transform().transform(line.get_xydata())
        for (ax0, ay0), (ax1, ay1) in itertools.pairwise(points):
            segments.append((float(ax0), float(ay0), float(ax1), float(ay1)))
    for collection in axes.collections:
        if isinstance(collection, LineCollection):
            to_display = collection.get_transform()
            for path in collection.get_segments():
                points = to_display.transform(path)
                for (ax0, ay0), (ax1, ay1) in itertools.pairwise(points):
                    segments.append((float(ax0), float(ay0), float(ax1), float(ay1)))
    return segments
