"""The report's chart ticks (``trace_train.report.svg.nice_ticks``) and their labels, tested directly."""

from __future__ import annotations

import math
import re

import pytest

from trace_train.report.svg import Series, line_chart, nice_ticks


@pytest.mark.parametrize("lo, hi, count, expected", [
    (0.0, 1.0, 5, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
    (0.0, 97.0, 5, [0.0, 20.0, 40.0, 60.0, 80.0]),
    (-0.13, 0.87, 5, [-0.2, 0.0, 0.2, 0.4, 0.6, 0.8]),
    (1.0, 12.0, 6, [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0]),
    (0.0, 1e-3, 4, [0.0, 0.00025, 0.0005, 0.00075, 0.001]),
])
def test_ticks_are_round_evenly_spaced_and_cover_the_range(lo, hi, count, expected):
    ticks = nice_ticks(lo, hi, count)
    assert ticks == pytest.approx(expected)
    steps = {round(b - a, 12) for a, b in zip(ticks, ticks[1:])}
    assert len(steps) == 1
    step = steps.pop()
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert round(mantissa, 9) in (1.0, 2.0, 2.5, 5.0)
    assert ticks[0] <= lo < ticks[0] + step and ticks[-1] <= hi + 1e-9 and hi - ticks[-1] < step


def test_ticks_are_exact_decimals_not_float_drift():
    # 0.1 added seven times is 0.7000000000000001 in floats: the ticks are rounded back
    assert nice_ticks(0.0, 0.7, 7) == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]


def test_an_empty_or_inverted_range_still_gets_ticks():
    assert nice_ticks(3.0, 3.0) == pytest.approx([3.0, 3.2, 3.4, 3.6, 3.8, 4.0])
    assert nice_ticks(5.0, 2.0) == nice_ticks(5.0, 6.0)


def test_the_chart_labels_exactly_the_ticks_inside_its_axes():
    svg = line_chart([Series("success", [0, 50, 100], [0.1, 0.5, 0.9])], "iteration", "success", y_range=(0.0, 1.0))
    labels = re.findall(r'class="tick" text-anchor="(end|middle)">([^<]+)</text>', svg)
    y_labels = [text for anchor, text in labels if anchor == "end"]
    x_labels = [text for anchor, text in labels if anchor == "middle"]
    assert y_labels == ["0", "0.2", "0.4", "0.6", "0.8", "1"]
    assert x_labels == ["0", "20", "40", "60", "80", "100"]
