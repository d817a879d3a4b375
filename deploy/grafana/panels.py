"""Panel builders of the Vigil dashboard (see generate.py): grid layout, targets, panel types.

Queries use the ``datasource`` variable and, through :data:`ENV` / :data:`SEL`, the
``environment`` and ``agent`` variables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

DS = {"type": "prometheus", "uid": "${datasource}"}
ENV = 'environment=~"$environment"'
SEL = f'{ENV}, agent=~"$agent"'
RI = "$__rate_interval"

Panel = dict[str, Any]
"""A Grafana JSON object (panel, target, variable)."""


class Layout:
    """Places panels left to right on Grafana's 24-column grid, wrapping rows."""

    def __init__(self) -> None:
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1
        self.panels: list[Panel] = []

    def row(self, title: str) -> None:
        self.y += self.row_h
        self.x, self.row_h = 0, 0
        self._add({"type": "row", "title": title, "collapsed": False, "panels": []}, 24, 1)
        self.y += 1

    def add(self, panel: Panel, w: int = 8, h: int = 8) -> None:
        if self.x + w > 24:
            self.y += self.row_h
            self.x, self.row_h = 0, 0
        self._add(panel, w, h)
        self.x += w
        self.row_h = max(self.row_h, h)

    def _add(self, panel: Panel, w: int, h: int) -> None:
        panel["id"] = self.next_id
        panel["gridPos"] = {"x": self.x, "y": self.y, "w": w, "h": h}
        self.next_id += 1
        self.panels.append(panel)


@dataclass(frozen=True)
class Chart:
    """A timeseries panel of a row table: its title, series (``(expr, legend)`` or a :func:`target`), unit, size."""

    title: str
    series: Sequence[tuple[str, str] | Panel]
    unit: str = "short"
    description: str = ""
    w: int = 8
    h: int = 8
    stack: bool = False
    thresholds: list[Panel] | None = None

    def panel(self) -> Panel:
        targets = [target(*s) if isinstance(s, tuple) else dict(s) for s in self.series]
        return timeseries(
            self.title, targets, self.unit, self.description, thresholds=self.thresholds, stack=self.stack
        )


@dataclass(frozen=True)
class Stat:
    """A stat panel of a row table (see :func:`stat`)."""

    title: str
    expr: str
    unit: str = "short"
    description: str = ""
    decimals: int | None = None
    w: int = 8
    h: int = 8

    def panel(self) -> Panel:
        return stat(self.title, self.expr, self.unit, self.description, self.decimals)


@dataclass(frozen=True)
class Heatmap:
    """A heatmap panel of a row table (see :func:`heatmap`)."""

    title: str
    expr: str
    unit: str
    description: str = ""
    w: int = 8
    h: int = 8

    def panel(self) -> Panel:
        return heatmap(self.title, self.expr, self.unit, self.description)


@dataclass(frozen=True)
class Custom:
    """Any other panel of a row table: a function that builds it."""

    build: Callable[[], Panel]
    w: int = 8
    h: int = 8

    def panel(self) -> Panel:
        return self.build()


Row = tuple[str, Sequence[Chart | Stat | Heatmap | Custom]]
"""A dashboard row as data: its title and its panels, left to right."""


def build_rows(g: Layout, rows: Sequence[Row]) -> None:
    """Lay out each row of a table: the row header, then its panels."""
    for title, panels in rows:
        g.row(title)
        for p in panels:
            g.add(p.panel(), p.w, p.h)


def target(expr: str, legend: str = "", ref: str = "A", *, exemplar: bool = False, fmt: str = "") -> Panel:
    t: Panel = {"refId": ref, "datasource": DS, "expr": expr, "legendFormat": legend or "__auto"}
    if exemplar:
        t["exemplar"] = True
    if fmt:
        t["format"] = fmt
    return t


def timeseries(
    title: str,
    targets: list[Panel],
    unit: str = "short",
    description: str = "",
    *,
    thresholds: list[Panel] | None = None,
    stack: bool = False,
) -> Panel:
    custom: Panel = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}
    if stack:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    defaults: Panel = {"unit": unit, "custom": custom}
    if thresholds:
        custom["thresholdsStyle"] = {"mode": "line+area"}
        defaults["thresholds"] = {"mode": "absolute", "steps": thresholds}
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": _refs(targets),
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
    }


def stat(title: str, expr: str, unit: str = "short", description: str = "", decimals: int | None = None) -> Panel:
    defaults: Panel = {"unit": unit}
    if decimals is not None:
        defaults["decimals"] = decimals
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": [target(expr)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"},
    }


def heatmap(title: str, expr: str, unit: str, description: str = "") -> Panel:
    return {
        "type": "heatmap",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": [target(expr, "{{le}}", fmt="heatmap")],
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {
            "calculate": False,
            "yAxis": {"unit": unit},
            "cellValues": {"unit": "reqps"},
            "color": {"scheme": "Oranges", "mode": "scheme"},
            "exemplars": {"color": "rgba(255,0,255,0.7)"},
        },
    }


def _refs(targets: list[Panel]) -> list[Panel]:
    for i, t in enumerate(targets):
        t["refId"] = chr(ord("A") + i)
    return targets


def quantiles(metric: str, by: str, sel: str, qs: tuple[float, ...] = (0.5, 0.95, 0.99)) -> list[Panel]:
    grouping = f"{by}, le" if by else "le"
    prefix = f"{{{{{by}}}}} " if by else ""
    return [
        target(
            f"histogram_quantile({q}, sum by ({grouping}) (rate({metric}_bucket{{{sel}}}[{RI}])))",
            f"{prefix}p{int(q * 100)}",
            exemplar=True,
        )
        for q in qs
    ]


def ratio_band(floor: float, ceiling: float) -> list[Panel]:
    return [
        {"color": "red", "value": None},
        {"color": "transparent", "value": floor},
        {"color": "red", "value": ceiling},
    ]
