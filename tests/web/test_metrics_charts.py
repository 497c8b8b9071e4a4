"""The Metrics tab's charts as the server draws them (pure geometry): a round top,
gaps where a minute had no runs, lone points still visible, and a heat map whose rows
are the run-time buckets in use, slowest on top."""

from __future__ import annotations

import pytest

from cogworker_async.web.format import (
    CHART_WIDTH,
    HEAT_FAINTEST,
    HEAT_ROW_HEIGHT,
    LINE_CHART_HEIGHT,
    heat_map,
    line_chart,
    nice_top,
)


@pytest.mark.parametrize(("peak", "top"), [(0, 1), (1, 1), (1.5, 2), (3, 5), (7, 10),
                                           (10, 10), (11, 20), (450, 500), (606, 1000)])
def test_the_top_is_a_round_number_at_or_above_the_peak(peak: float, top: float) -> None:
    assert nice_top(peak) == top


def test_lines_share_one_scale_and_break_where_a_minute_has_no_value() -> None:
    chart = line_chart([("a", [0, 5, 10]), ("b", [None, 2.5, None])])
    assert chart.top == 10
    a, b = chart.lines
    assert (a.label, a.css, b.css) == ("a", "s0", "s1")
    [points] = a.segments
    ys = [float(point.split(",")[1]) for point in points.split()]
    assert ys[0] == LINE_CHART_HEIGHT - 2  # zero sits on the axis
    assert ys[2] == 2.0  # the peak touches the top
    assert [float(point.split(",")[0]) for point in points.split()] == [0, 300, 600]
    # A lone value is a dash across its minute (one point would draw nothing).
    [dash] = b.segments
    (x1, y1), (x2, y2) = (map(float, point.split(",")) for point in dash.split())
    assert y1 == y2
    assert x1 < 300 < x2


def test_a_lone_point_at_the_edge_stays_inside_the_chart() -> None:
    [line] = line_chart([("a", [None, None, 4])], css=["p95"]).lines
    assert line.css == "p95"
    xs = [float(point.split(",")[0]) for point in line.segments[0].split()]
    assert xs[1] == CHART_WIDTH
    assert xs[0] < CHART_WIDTH


def test_the_heat_map_rows_span_the_buckets_in_use_slowest_on_top() -> None:
    heat = heat_map([[0, 4, 0, 0], [0, 0, 0, 0], [0, 1, 0, 2]])
    assert heat.rows == (3, 2, 1)
    assert heat.height == 3 * HEAT_ROW_HEIGHT
    assert heat.peak == 4
    cells = {(cell.minute, cell.bucket): cell for cell in heat.cells}
    assert set(cells) == {(0, 1), (2, 1), (2, 3)}
    assert cells[(0, 1)].opacity == 1.0
    assert cells[(2, 1)].opacity == pytest.approx(HEAT_FAINTEST + (1 - HEAT_FAINTEST) / 4)
    assert cells[(2, 3)].y == 0  # the slowest bucket's row is the top one
    assert cells[(0, 1)].y == 2 * HEAT_ROW_HEIGHT
    assert cells[(2, 3)].x == 2 * CHART_WIDTH / 3
    assert heat_map([[0, 0], [0, 0]]).cells == ()
