"""The harness's outlier rule and the report's ranges, from figures alone: no database, no processes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench import findings, harness
from bench.core import Gate, Summary
from bench.profiles import PROFILES

PARAMS = {"unit": "jobs/s", "system": "ReliableQ", "job": "noop", "workers": "2 x 16", "run": "tp-p2"}


def test_a_repetition_below_half_the_median_of_its_siblings_is_listed_with_its_parameters() -> None:
    # Issue 12's run: repetition 2 stalled in a plan collapse while its siblings ran normally.
    review = findings.review([("throughput", Summary([7325.0, 255.0, 8130.0], params=PARAMS))])

    assert review.checked == 1
    [outlier] = review.outliers
    assert (outlier.scenario, outlier.repetition, outlier.value) == ("throughput", 2, 255.0)
    assert outlier.siblings == (7325.0, 8130.0)
    assert outlier.sibling_median == 7727.5
    assert outlier.params == PARAMS
    text = findings.markdown(review)
    assert text.startswith("## Findings")
    row = next(line for line in text.splitlines() if line.startswith("| throughput |"))
    assert row == (
        "| throughput | system ReliableQ, job noop, workers 2 x 16, run tp-p2 | 2 | 255 jobs/s | "
        "7,728 jobs/s | 3% | 7,325, 8,130 |"
    )


@pytest.mark.parametrize("values", [[7325.0, 6800.0, 8130.0], [4000.0, 8000.0, 8000.0], [8000.0, 4100.0]])
def test_a_normal_spread_produces_no_finding(values: list[float]) -> None:
    # Exactly half of the siblings' median is still in the spread: the rule is "below half".
    review = findings.review([("throughput", Summary(values, params=PARAMS))])

    assert review.outliers == []
    text = findings.markdown(review)
    assert "No repetition fell below 50% of the median of its siblings (1 measured point with" in text


def test_a_stall_in_a_pair_of_repetitions_is_found() -> None:
    review = findings.review([("pileup", Summary([8000.0, 3000.0], params={"unit": "jobs/s", "finished_rows": 0}))])

    assert [(o.repetition, o.describe()) for o in review.outliers] == [(2, "finished rows 0")]


def test_one_repetition_has_no_siblings_and_the_report_says_so() -> None:
    review = findings.review([("throughput", Summary([255.0], params=PARAMS)), ("ingestion", Summary([]))])

    assert (review.outliers, review.checked) == ([], 0)
    assert "measured once" in findings.markdown(review)


def test_the_report_lists_findings_right_after_the_targets() -> None:
    pytest.importorskip("matplotlib")
    from bench import report
    from bench.scenarios import Section

    review = findings.review([("throughput", Summary([7325.0, 255.0, 8130.0], params=PARAMS))])
    text = report.markdown(
        title="t",
        header=[],
        summary="## Targets\n\n...",
        findings=findings.markdown(review),
        sections=[Section("throughput", "Execution throughput: no-op jobs")],
        gate=Gate(),
        closing="",
    )

    assert text.index("## Targets") < text.index("## Findings") < text.index("## Execution throughput")
    assert "| throughput | system ReliableQ, job noop, workers 2 x 16, run tp-p2 | 2 | 255 jobs/s |" in text


def test_the_targets_show_the_range_of_every_repetition_beside_each_median() -> None:
    fleet = Summary([1600.0, 1500.0, 1700.0])
    bench = SimpleNamespace(
        p=PROFILES["quick"],
        results={
            "fleet": fleet,
            "fleet_peers": {"procrastinate": Summary([400.0, 500.0, 450.0])},
            "enqueue_one": Summary([2000.0]),  # one repetition: no range to show
            "pileup": {0: fleet, 1_000_000: Summary([1200.0, 1300.0, 1400.0]), 100_000: Summary([1600.0])},
        },
    )
    table = harness._targets_table(harness._targets(bench))

    assert "| no-op processing with a fleet (2 x 16) | 1,600 jobs/s (1,500–1,700) |" in table
    # A ratio of medians spans every pairing of the two points' repetitions: 1,500 / 500 to 1,700 / 400.
    assert "| 3.56x (3.00x–4.25x) |" in table
    assert "| 81.2% (70.6%–93.3%) | ≥ 90.0% | **missed** by 10% |" in table
    assert "claim throughput at 100,000 finished rows vs an empty table | 100.0% (94.1%–106.7%) |" in table
    assert table.index("at 100,000 finished rows") < table.index("at 1,000,000 finished rows")
    assert "| enqueue, one process, one job per transaction | 2,000 jobs/s |" in table
