"""Templates of the built-in local SWE tasks: tiny stdlib-only repos, each with one bug.

Each template gives the buggy base tree (source + visible tests, which pass at base), the gold fix as
``(path, old, new)`` replacements, the hidden test file (added by ``test_patch`` at evaluation only)
and the FAIL_TO_PASS / PASS_TO_PASS pytest node ids. A hidden test entry whose path is also a base file
is *appended* to that file (the test patch then touches it, so the eval runs it, as in SWE-bench where
only the test files of ``test_patch`` run).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LocalTaskTemplate:
    name: str
    problem_statement: str
    files: dict[str, str]
    fix: tuple[tuple[str, str, str], ...]
    hidden_tests: dict[str, str]
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]


INVENTORY = LocalTaskTemplate(
    name="inventory",
    problem_statement=(
        "Bulk discount is not applied at exactly the threshold quantity.\n\n"
        "The docs say orders of 10 or more units get the bulk discount, but "
        "`line_total(Item('bolt', 2.0), 10)` returns 20.0 instead of 18.0. With 11 units it works."
    ),
    files={
        "inventory/__init__.py": "from inventory.pricing import Item, line_total, order_total\n",
        "inventory/pricing.py": '''"""Pricing of order lines."""

from dataclasses import dataclass

BULK_QUANTITY = 10
BULK_DISCOUNT = 0.10


@dataclass(frozen=True)
class Item:
    sku: str
    unit_price: float


def line_total(item, quantity):
    """Price of ``quantity`` units; orders of BULK_QUANTITY or more units get BULK_DISCOUNT off."""
    if quantity < 0:
        raise ValueError("quantity must be non-negative")
    total = item.unit_price * quantity
    if quantity > BULK_QUANTITY:
        total *= 1 - BULK_DISCOUNT
    return round(total, 2)


def order_total(lines):
    """Sum of line totals for ``[(item, quantity), ...]``."""
    return round(sum(line_total(item, qty) for item, qty in lines), 2)
''',
        "tests/__init__.py": "",
        "tests/test_pricing.py": '''from inventory import Item, line_total, order_total


def test_small_order():
    assert line_total(Item("nut", 0.5), 4) == 2.0


def test_order_total():
    assert order_total([(Item("a", 1.0), 2), (Item("b", 3.0), 1)]) == 5.0
''',
    },
    fix=(("inventory/pricing.py", "    if quantity > BULK_QUANTITY:", "    if quantity >= BULK_QUANTITY:"),),
    hidden_tests={"tests/test_bulk.py": '''import pytest

from inventory import Item, line_total


def test_discount_at_threshold():
    assert line_total(Item("bolt", 2.0), 10) == 18.0


def test_discount_above_threshold():
    assert line_total(Item("bolt", 2.0), 11) == 19.8


def test_no_discount_below_threshold():
    assert line_total(Item("bolt", 2.0), 9) == 18.0


def test_negative_quantity():
    with pytest.raises(ValueError):
        line_total(Item("bolt", 2.0), -1)
''',
    "tests/test_pricing.py": '''

def test_empty_order():
    assert order_total([]) == 0
'''},
    fail_to_pass=("tests/test_bulk.py::test_discount_at_threshold",),
    pass_to_pass=("tests/test_bulk.py::test_discount_above_threshold",
                  "tests/test_bulk.py::test_no_discount_below_threshold",
                  "tests/test_bulk.py::test_negative_quantity", "tests/test_pricing.py::test_small_order",
                  "tests/test_pricing.py::test_order_total", "tests/test_pricing.py::test_empty_order"),
)

TEXTKIT = LocalTaskTemplate(
    name="textkit",
    problem_statement=(
        "`truncate` returns strings longer than the requested width.\n\n"
        "`truncate('hello world', 8)` gives 'hello wo...' (11 characters). The result, ellipsis "
        "included, should never be longer than `width`: expected 'hello...'."
    ),
    files={
        "textkit/__init__.py": "from textkit.shorten import slugify, truncate\n",
        "textkit/shorten.py": '''"""Shortening helpers."""

import re

ELLIPSIS = "..."


def truncate(text, width):
    """Cut ``text`` to at most ``width`` characters, ending in an ellipsis when cut."""
    if width < len(ELLIPSIS):
        raise ValueError("width too small")
    if len(text) <= width:
        return text
    return text[:width] + ELLIPSIS


def slugify(text):
    """Lower-case words joined by single dashes."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return "-".join(words)
''',
        "tests/__init__.py": "",
        "tests/test_slug.py": '''from textkit import slugify


def test_slugify():
    assert slugify("Hello,  World!") == "hello-world"
''',
    },
    fix=(("textkit/shorten.py", "    return text[:width] + ELLIPSIS",
          "    return text[: width - len(ELLIPSIS)] + ELLIPSIS"),),
    hidden_tests={"tests/test_truncate.py": '''from textkit import truncate


def test_truncate_width():
    assert truncate("hello world", 8) == "hello..."


def test_truncate_never_longer():
    for width in range(3, 12):
        assert len(truncate("abcdefghijklmnop", width)) <= width


def test_short_text_untouched():
    assert truncate("hi", 5) == "hi"
''',
    "tests/test_slug.py": '''

def test_slugify_digits():
    assert slugify("Route 66") == "route-66"
'''},
    fail_to_pass=("tests/test_truncate.py::test_truncate_width", "tests/test_truncate.py::test_truncate_never_longer"),
    pass_to_pass=("tests/test_truncate.py::test_short_text_untouched", "tests/test_slug.py::test_slugify",
                  "tests/test_slug.py::test_slugify_digits"),
)

SCHEDULER = LocalTaskTemplate(
    name="scheduler",
    problem_statement=(
        "Back-to-back meetings are reported as conflicting.\n\n"
        "A meeting 9:00-10:00 and one 10:00-11:00 should fit in the same room, but "
        "`find_conflicts([(540, 600), (600, 660)])` returns `[(0, 1)]`. Slots are half-open [start, end)."
    ),
    files={
        "scheduler/__init__.py": "from scheduler.slots import find_conflicts, overlaps, total_busy\n",
        "scheduler/slots.py": '''"""Time slots as (start_minute, end_minute), half-open."""


def overlaps(a, b):
    """True when slots ``a`` and ``b`` share at least one minute."""
    return a[0] <= b[1] and b[0] <= a[1]


def find_conflicts(slots):
    """Index pairs ``(i, j)``, i < j, of overlapping slots."""
    return [(i, j) for i in range(len(slots)) for j in range(i + 1, len(slots)) if overlaps(slots[i], slots[j])]


def total_busy(slots):
    """Minutes covered by at least one slot."""
    minutes = set()
    for start, end in slots:
        minutes.update(range(start, end))
    return len(minutes)
''',
        "tests/__init__.py": "",
        "tests/test_busy.py": '''from scheduler import total_busy


def test_total_busy():
    assert total_busy([(0, 10), (5, 20), (30, 31)]) == 21
''',
    },
    fix=(("scheduler/slots.py", "    return a[0] <= b[1] and b[0] <= a[1]", "    return a[0] < b[1] and b[0] < a[1]"),),
    hidden_tests={"tests/test_conflicts.py": '''from scheduler import find_conflicts, overlaps


def test_back_to_back_is_free():
    assert find_conflicts([(540, 600), (600, 660)]) == []


def test_touching_slots_do_not_overlap():
    assert not overlaps((0, 5), (5, 9))


def test_real_overlap():
    assert find_conflicts([(0, 30), (10, 20), (40, 50)]) == [(0, 1)]
''',
    "tests/test_busy.py": '''

def test_total_busy_empty():
    assert total_busy([]) == 0
'''},
    fail_to_pass=("tests/test_conflicts.py::test_back_to_back_is_free",
                  "tests/test_conflicts.py::test_touching_slots_do_not_overlap"),
    pass_to_pass=("tests/test_conflicts.py::test_real_overlap", "tests/test_busy.py::test_total_busy",
                  "tests/test_busy.py::test_total_busy_empty"),
)

STATS = LocalTaskTemplate(
    name="stats",
    problem_statement=(
        "median() is wrong for lists with an even number of values.\n\n"
        "`median([1, 2, 3, 4])` returns 3 but the median is 2.5 (the mean of the two middle values)."
    ),
    files={
        "stats/__init__.py": "from stats.summary import mean, median, spread\n",
        "stats/summary.py": '''"""Summary statistics of number lists."""


def mean(values):
    if not values:
        raise ValueError("empty")
    return sum(values) / len(values)


def median(values):
    if not values:
        raise ValueError("empty")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid]


def spread(values):
    """max - min."""
    return max(values) - min(values)
''',
        "tests/__init__.py": "",
        "tests/test_summary.py": '''from stats import mean, spread


def test_mean():
    assert mean([1, 2, 3]) == 2


def test_spread():
    assert spread([4, 1, 9]) == 8
''',
    },
    fix=(("stats/summary.py", "    return ordered[mid]\n",
          "    if len(ordered) % 2 == 0:\n        return (ordered[mid - 1] + ordered[mid]) / 2\n"
          "    return ordered[mid]\n"),),
    hidden_tests={"tests/test_median.py": '''from stats import median


def test_median_even():
    assert median([1, 2, 3, 4]) == 2.5


def test_median_odd():
    assert median([5, 1, 3]) == 3
''',
    "tests/test_summary.py": '''

def test_spread_single():
    assert spread([7]) == 0
'''},
    fail_to_pass=("tests/test_median.py::test_median_even",),
    pass_to_pass=("tests/test_median.py::test_median_odd", "tests/test_summary.py::test_mean",
                  "tests/test_summary.py::test_spread", "tests/test_summary.py::test_spread_single"),
)

TEMPLATES: tuple[LocalTaskTemplate, ...] = (INVENTORY, TEXTKIT, SCHEDULER, STATS)
