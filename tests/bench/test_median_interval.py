"""The ceilings scenario's paired ratio is reported with a bootstrap interval of its median."""

from __future__ import annotations

import math
import statistics

from bench.core import median_interval
from bench.profiles import PROFILES, override


def test_the_interval_holds_the_median_and_narrows_with_more_pairs():
    few = [0.70, 0.95, 0.78, 0.88, 0.81]
    many = few * 8
    low, high = median_interval(few)
    assert low <= statistics.median(few) <= high
    narrow = median_interval(many)
    assert narrow[0] <= statistics.median(many) <= narrow[1]
    assert narrow[1] - narrow[0] < high - low


def test_the_same_pairs_give_the_same_interval_and_degenerate_inputs_say_so():
    pairs = [0.74, 0.83, 0.91, 0.79, 0.86, 0.80]
    assert median_interval(pairs) == median_interval(list(pairs))
    assert median_interval([0.8]) == (0.8, 0.8)
    assert all(math.isnan(x) for x in median_interval([]))


def test_pairs_is_a_knob_of_its_own_and_defaults_to_the_repetitions():
    quick = PROFILES["quick"]
    assert quick.pairs == 0  # the ceilings scenario then runs as many pairs as reps
    assert override(quick, "pairs=12").pairs == 12 and override(quick, "pairs=12").reps == quick.reps
