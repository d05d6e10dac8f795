"""The queue layer's statements are composed by parameters, and name statuses only through the models."""

from __future__ import annotations

import re

import pytest

from reliableq.models import JobStatus
from reliableq.queue import limits, pick, sql
from reliableq.registry import Rate

CTE = r"^\s*(?:/\* reliableq:claim \*/ )?(?:WITH\s+)?(\w+) AS (?:MATERIALIZED )?\("  # a CTE's name, one a line


@pytest.mark.django_db  # the ORM compiles FOR UPDATE inside a transaction only; nothing is sent
def test_a_rated_claim_locks_its_window_before_the_pick_and_records_its_starts_beside_the_claim():
    statement, params = limits.rated_sql(("default",), 5, "test.rated", Rate(10, 1.0))

    ctes = re.findall(CTE, statement, re.M)
    assert ctes == ["rate_window", "picked", "moved", "recorded", "opened"], statement
    assert "UPDATE reliableq_ratewindow r SET (buckets, counts)" in " ".join(statement.split())
    assert params[0] == "test.rated"


@pytest.mark.django_db
def test_a_plain_claim_has_no_window_and_a_claim_takes_one_pick_only():
    statement, _ = pick.take_sql(("default",), 5, (), None)

    assert re.findall(
        r"^\s*(?:/\* reliableq:claim \*/ )?(?:WITH\s+)?,?(\w+) AS (?:MATERIALIZED )?\(", statement, re.M
    ) == [
        "picked",
        "moved",
        "opened",
    ]
    with pytest.raises(ValueError, match="not both"):
        pick.claim_sql("SELECT id FROM x", before="picked AS (SELECT 1)")
    with pytest.raises(ValueError, match="needs a pick"):
        pick.claim_sql()


def test_statuses_reach_sql_only_as_the_models_values():
    assert sql.S.RUNNING == "'RUNNING'" and sql.lit(JobStatus.DEAD) == "'DEAD'"
    assert sql.S.LEASE_EXPIRED == "'LEASE_EXPIRED'"
    with pytest.raises(ValueError, match="is not a JobStatus"):
        sql.lit("RUNING")
    with pytest.raises(AttributeError):
        _ = sql.S.RUNING


@pytest.mark.django_db
def test_the_claims_columns_are_named_as_the_claim_row_reads_them():
    """The claim's rows are read by name (pick.ClaimRow): its select list names each column so."""
    from reliableq.queue import db

    statement, params = pick.take_sql(("default",), 5, (), None)
    with db.cursor() as cursor:
        cursor.execute(statement, (*params, 30.0, "w-names", "w-names"))  # no due job: no row, the columns
        assert tuple(column.name for column in cursor.description) == pick.ClaimRow._fields


def test_the_claim_reads_each_row_by_the_claim_rows_names_in_order():
    """run_claim unpacks a row in its comprehension: the names there are ClaimRow's, in order."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(pick.run_claim))
    [comprehension] = [node for node in ast.walk(tree) if isinstance(node, ast.comprehension)]
    assert isinstance(comprehension.target, ast.Tuple)
    names = tuple(element.id for element in comprehension.target.elts if isinstance(element, ast.Name))
    assert names == pick.ClaimRow._fields
