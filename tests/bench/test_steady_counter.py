"""C(t), the jobs finished before t, from completions counted per tenth of a second: the tenth that
holds t counts in proportion to its part before t (counting all of it ran ahead of the enqueuer)."""

from __future__ import annotations

import pytest

from bench.scenarios.steady import counter


def test_a_tenth_counts_in_proportion_to_its_part_before_t():
    count = counter([(100, 300), (101, 300)])  # 300 jobs in [10.0, 10.1) and in [10.1, 10.2)
    assert count(9.99) == 0
    assert count(10.0) == 0
    assert count(10.05) == 150
    assert count(10.1) == 300
    assert count(10.15) == 450
    assert count(10.2) == 600
    assert count(99.0) == 600


def test_gaps_and_an_empty_run():
    count = counter([(0, 10), (50, 20)])
    assert count(0.0) == 0 and count(0.1) == 10
    assert count(3.0) == 10  # nothing finished between the two tenths
    assert count(5.025) == 15
    assert counter([])(5.0) == 0


@pytest.mark.parametrize("at", [0.0, 0.37, 1.0, 4.99, 9.95])
def test_it_never_counts_ahead_of_the_whole_tenths_after_t(at):
    rows = [(t, 7) for t in range(100)]
    assert 7 * int(at * 10) <= counter(rows)(at) <= 7 * (int(at * 10) + 1)
