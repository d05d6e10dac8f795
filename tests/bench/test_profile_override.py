"""`python -m bench --set name=value` changes one field of a profile for one run, and says so."""

from __future__ import annotations

import pytest

from bench import harness
from bench.profiles import PROFILES, override


def test_a_tuple_a_number_and_a_flag_are_read_in_their_fields_types():
    quick = PROFILES["quick"]
    changed = override(quick, "xmin_rates=3000")
    changed = override(changed, "xmin_variants=none, idle in transaction")
    changed = override(changed, "pileup=0,1e6")
    changed = override(changed, "soak_seconds=90")
    changed = override(changed, "reps=1")
    changed = override(changed, "peers=false")
    changed = override(changed, "fleet=4,8")
    assert changed.xmin_rates == (3000,)
    assert changed.xmin_variants == ("none", "idle in transaction")
    assert changed.pileup == (0, 1_000_000)
    assert changed.soak_seconds == 90.0 and changed.reps == 1 and changed.peers is False
    assert changed.fleet == (4, 8)
    assert quick.xmin_rates == (800, 3000)  # the profile itself is untouched


@pytest.mark.parametrize(
    ("assignment", "says"),
    [
        ("xmin_rate=3000", "the name one of"),
        ("name=other", "the name one of"),
        ("reps", "name=value"),
        ("reps=two", "--set reps"),
        ("reps=1.5", "not a whole number"),
        ("peers=maybe", "not true or false"),
        ("xmin_phases=1,2", "takes 3 comma-separated values"),
        ("fleet=2", "takes 2 comma-separated values"),
    ],
)
def test_a_bad_assignment_is_refused_in_words(assignment, says):
    with pytest.raises(ValueError, match=says):
        override(PROFILES["quick"], assignment)


def test_the_command_line_refuses_a_bad_assignment_before_anything_starts(capsys):
    with pytest.raises(SystemExit) as exit_:
        harness.main(["--profile", "smoke", "--set", "xmin_rate=1"])
    assert exit_.value.code == 2
    assert "the name one of" in capsys.readouterr().err


def test_the_report_gives_the_command_that_repeats_the_run():
    parser_args = type(
        "Args",
        (),
        {"profile": "full", "only": "xmin", "no_peers": True, "set": ["xmin_variants=none,idle in transaction"]},
    )()
    assert harness._command(parser_args) == (
        "python -m bench --profile full --only xmin --no-peers --set 'xmin_variants=none,idle in transaction'"
    )
