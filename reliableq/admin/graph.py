"""A workflow's members laid out left to right: a member's depth (the longest path to it from a
member with no upstream) is its column. Pure: no Django, no database; the admin passes ids and edges."""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)

NODE_WIDTH = 150
NODE_HEIGHT = 28
COLUMN_GAP = 56
ROW_GAP = 10
PADDING = 8


def depths(nodes: Iterable[K], edges: Iterable[tuple[K, K]]) -> dict[K, int]:
    """Each node's depth: the length of the longest path to it from a node with no upstream.

    Edges with an end outside `nodes` are ignored (a member's job may be pruned before its edges).
    Kahn's order visits each edge once, so a 10,000-member fan-in costs 10,000 steps, not a search
    per member. Nodes on a cycle (enqueue refuses those) keep the depth their other upstreams gave."""
    depth = dict.fromkeys(nodes, 0)
    down: dict[K, list[K]] = {node: [] for node in depth}
    waiting = dict.fromkeys(depth, 0)
    for upstream, target in edges:
        if upstream in depth and target in depth and upstream != target:
            down[upstream].append(target)
            waiting[target] += 1
    ready = [node for node, count in waiting.items() if count == 0]
    while ready:
        node = ready.pop()
        for target in down[node]:
            depth[target] = max(depth[target], depth[node] + 1)
            waiting[target] -= 1
            if waiting[target] == 0:
                ready.append(target)
    return depth


def natural(text: str) -> tuple[Any, ...]:
    """A sort key that puts "load-2" before "load-10"."""
    # re.split with a group alternates text and digit runs: odd positions are the runs (isdigit() would
    # also take "²", which int() refuses).
    return tuple(int(part) if n % 2 else part for n, part in enumerate(re.split(r"(\d+)", text)))


@dataclass(frozen=True, slots=True)
class Box(Generic[K]):
    key: K
    depth: int
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class Line:
    path: str  # an SVG path: from the upstream's right edge to the target's left edge


@dataclass(frozen=True, slots=True)
class Drawing(Generic[K]):
    boxes: list[Box[K]]
    lines: list[Line]
    width: int
    height: int
    left_out: int  # nodes past the limit, not drawn
    lines_left_out: int  # edges between drawn nodes past max_lines, not drawn


def draw(
    depth: Mapping[K, int],
    edges: Iterable[tuple[K, K]],
    *,
    order: Callable[[K], Any],
    limit: int = 200,
    max_lines: int = 2_000,
) -> Drawing[K]:
    """Place the first `limit` nodes by (depth, order): a column per depth, in `order` down each column.

    Every depth below the deepest drawn one is drawn whole (a node's upstream is shallower), so the
    columns have no gaps and each drawn node's longest path is drawn with it."""
    chosen = sorted(depth, key=lambda key: (depth[key], order(key)))[:limit]
    rows: dict[int, int] = {}
    placed: dict[K, Box[K]] = {}
    for key in chosen:
        column = depth[key]
        row = rows.get(column, 0)
        rows[column] = row + 1
        x = PADDING + column * (NODE_WIDTH + COLUMN_GAP)
        placed[key] = Box(key=key, depth=column, x=x, y=PADDING + row * (NODE_HEIGHT + ROW_GAP))
    lines: list[Line] = []
    skipped = 0
    for upstream, target in edges:
        if upstream not in placed or target not in placed or upstream == target:
            continue
        if len(lines) >= max_lines:
            skipped += 1
            continue
        lines.append(_line(placed[upstream], placed[target]))
    columns, tallest = len(rows), max(rows.values(), default=0)
    return Drawing(
        boxes=list(placed.values()),
        lines=lines,
        width=2 * PADDING + columns * NODE_WIDTH + max(columns - 1, 0) * COLUMN_GAP,
        height=2 * PADDING + tallest * NODE_HEIGHT + max(tallest - 1, 0) * ROW_GAP,
        left_out=len(depth) - len(chosen),
        lines_left_out=skipped,
    )


def _line(upstream: Box[Any], target: Box[Any]) -> Line:
    x1, y1 = upstream.x + NODE_WIDTH, upstream.y + NODE_HEIGHT // 2
    x2, y2 = target.x, target.y + NODE_HEIGHT // 2
    middle = (x1 + x2) // 2
    return Line(path=f"M{x1},{y1} C{middle},{y1} {middle},{y2} {x2},{y2}")
