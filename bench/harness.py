"""python -m bench: ReliableQ against its peers and PostgreSQL's own ceiling, in one run, gated.

    python -m bench --profile quick            # about 10 minutes on a 2-core machine
    python -m bench --profile full             # longer runs, more repetitions
    python -m bench --profile smoke            # under a minute (CI)
    python -m bench --only throughput,ceilings # a subset

It starts its own embedded PostgreSQL 18 in .pgdata/bench (synchronous_commit on; stopped at the
end if it started it), its own gunicorn and workers, runs every scenario several times, passes every run through the
correctness gate, and writes report.md with PNG plots to bench/results/<profile>-<time>/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import shlex
import statistics
import sys
import traceback
from pathlib import Path
from typing import Any

from . import core, findings, scenarios
from .core import Summary
from .profiles import PROFILES, override

# Importing bench.scenarios registers every scenario; it touches no settings, so this runs before Django is set up.
SCENARIOS = scenarios.names()

# What was changed in reliableq/ because of what this harness showed (each its own commit, with the
# before/after figures in its message).
CHANGES: list[str] = [
    "Claims (`jobqueue.claim`): the claim and rescue statements are compiled by the ORM once and cached; a worker "
    "rescues expired leases on its first claim and then at most once per POLL_SECONDS (every idle poll still "
    "does), so a busy worker's claim is one statement sent in autocommit: one round trip instead of four "
    "(BEGIN, rescue, take, COMMIT). No-op 2 x 8: 1,044 -> 1,727 jobs/s.",
    "Worker loop: when a handler shorter than 2 ms reports, the loop keeps collecting results that arrive less "
    "than 0.5 ms apart (2 ms at most) before writing, so jobs that finish together are finalized by one fenced "
    "statement and refilled by one claim (claims of 8 came back as ~4.5-job finishes before). Longer handlers never "
    "wait. No-op 2 x 8: 1,727 -> 3,892 jobs/s; 50 ms jobs unchanged.",
    "`enqueue`: the INSERT returns only what the database decided (run_at, created_at, updated_at) instead of the "
    "whole row: 1,828 -> 2,007 jobs/s in autocommit, 1,394 -> 1,506 in atomic() blocks.",
    "`reliableq.enqueue_many(kind, payloads, ...)`: bulk ingestion with one INSERT and one NOTIFY: 2,611 jobs/s "
    "(enqueue x 1,000 in one transaction) -> ~50,000 jobs/s.",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {','.join(SCENARIOS)}")
    parser.add_argument(
        "--out", type=Path, default=None, help="results folder (default bench/results/<profile>-<time>)"
    )
    parser.add_argument("--data-dir", type=Path, default=core.DATA_DIR, help="the harness's own PostgreSQL data dir")
    parser.add_argument("--no-peers", action="store_true", help="skip procrastinate and django-tasks-db")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="change one of the profile's fields for this run (repeatable): --set xmin_rates=3000 "
        "--set 'xmin_variants=none,idle in transaction'",
    )
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    if args.no_peers:
        from dataclasses import replace

        profile = replace(profile, peers=False)
    for assignment in args.set:
        try:
            profile = override(profile, assignment)
        except ValueError as exc:
            parser.error(str(exc))
    try:
        # With what they need: the ceilings, for one, are stated as fractions of the throughput's fleet.
        only = [spec.name for spec in scenarios.select(s.strip() for s in args.only.split(",") if s.strip())]
    except ValueError as exc:
        parser.error(str(exc))

    progress = core.Progress()
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.out or core.RESULTS / f"{profile.name}-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    progress.say(f"bench profile {profile.name}: results in {out}")
    url = core.start_server(args.data_dir)
    try:
        return _run(args, profile, only, progress, out, url)
    finally:
        from testproject import embedded

        if embedded.started_here(args.data_dir):  # a server that was already running keeps running
            embedded.stop(args.data_dir)


def _command(args: Any) -> str:
    """The command line that repeats this run: its profile, subset, peers and every --set."""
    words = ["python", "-m", "bench", "--profile", args.profile]
    if args.only:
        words += ["--only", args.only]
    if args.no_peers:
        words.append("--no-peers")
    for assignment in args.set:
        words += ["--set", assignment]
    return shlex.join(words)


def _run(args: Any, profile: Any, only: list[str], progress: core.Progress, out: Path, url: str) -> int:
    core.prepare_environment(url)

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        machine = core.machine(cursor)
    progress.say(f"PostgreSQL {machine['postgresql']}, synchronous_commit={machine['synchronous_commit']}")

    from .scenarios import Bench, Section

    gate = core.Gate()
    bench = Bench(profile, out, progress, gate, url)
    if bench.missing_peers:
        progress.say(f"peers not installed, skipped: {', '.join(bench.missing_peers)} (pip install -e '.[bench]')")
    sections: list[Section] = []
    measured: list[tuple[str, Summary]] = []  # (scenario, repeated point): checked for outliers at the end
    failed = False
    for spec in scenarios.select(only):
        name = spec.name
        progress.say(f"== {name}")
        mark = len(bench.measured)
        try:
            section = Section(name, spec.title)
            spec.run(bench, section)
            sections.append(section)
        except Exception as exc:  # one broken scenario must not hide the others' figures
            failed = True
            traceback.print_exc()
            sections.append(Section(name, name, error=f"{type(exc).__name__}: {exc}"))
            progress.say(f"   {name} FAILED: {exc}")
        finally:  # a failed scenario's completed points are still checked: a stall may be why it failed
            measured += [(name, summary) for summary in bench.measured[mark:]]
    review = findings.review(measured)
    for o in review.outliers:
        progress.say(
            f"   outlier: {o.scenario} {o.describe()} rep {o.repetition}: {o.value:,.0f} {o.unit} against "
            f"a median of {o.sibling_median:,.0f} for its siblings"
        )
    _attach_throughput_plot(bench, sections)
    wall = progress.elapsed()
    load = core.load_average()

    targets = _targets(bench)
    header = [
        f"Profile **{profile.name}**, {dt.datetime.now():%Y-%m-%d %H:%M}, wall time {wall / 60:.1f} min. "
        f'Reproduce: `{_command(args)}` (after `pip install -e ".[bench]"`).',
        "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()) + f"; load average at the end {load}.",
        "",
        f"Every figure is the median of {profile.reps} run(s) (range in brackets) and counts only because its "
        "run passed the correctness gate (end of the report). Ratios are side by side, from this one run.",
    ]
    if profile.reps > 1:
        header[-1] += (
            " Each ratio is one of medians; in the targets, its range spans every pair of repetitions. "
            "A repetition below half the median of its siblings is listed under Findings."
        )
    summary = "## Targets\n\n" + _targets_table(targets)
    closing = _closing(bench, targets)
    text = _report_markdown(header, summary, findings.markdown(review), sections, gate, closing)
    (out / "report.md").write_text(text)
    (out / "results.json").write_text(
        json.dumps(
            {
                "profile": profile.name,
                "command": _command(args),
                "wall_seconds": wall,
                "machine": machine,
                "gate_passed": gate.passed,
                "checks": len(gate.checks),
                "targets": targets,
                "sections": {s.key: s.data for s in sections},
                "findings": [o.to_json() for o in review.outliers],
                "errors": {s.key: s.error for s in sections if s.error},
            },
            indent=1,
            default=_json_default,
        )
    )
    if args.out is None:
        latest = core.RESULTS / f"latest-{profile.name}"
        try:
            if latest.is_symlink() or latest.exists():
                latest.unlink()
            latest.symlink_to(out.resolve())
        except OSError:
            pass
    ok = gate.passed and not failed
    progress.say(
        f"{'GREEN' if ok else 'RED'}: {len(gate.checks)} gate checks over {gate.runs} runs, "
        f"{sum(1 for *_, passed in gate.checks if not passed)} failed; report: {out / 'report.md'}"
    )
    return 0 if ok else 1


def _report_markdown(header: list[str], summary: str, found: str, sections: list[Any], gate: Any, closing: str) -> str:
    from . import report

    return report.markdown(
        title="ReliableQ benchmark",
        header=header,
        summary=summary,
        findings=found,
        sections=sections,
        gate=gate,
        closing=closing,
    )


def _attach_throughput_plot(bench: Any, sections: list[Any]) -> None:
    if "throughput" not in bench.results:
        return
    from . import report

    by_conc, by_proc, peers = bench.results["throughput"]
    ceilings = bench.results.get("ceilings", {"pgbench": Summary([]), "bare": Summary([])})
    name = report.plot_throughput(bench.out, by_conc, by_proc, peers, ceilings, bench.p.fleet)
    for s in sections:
        if s.key == "throughput":
            s.plots.append(name)


def _targets(bench: Any) -> list[dict[str, Any]]:
    r = bench.results
    out: list[dict[str, Any]] = []

    def add(
        name: str,
        value: float | None,
        goal: float,
        unit: str,
        higher: bool = True,
        why: str = "",
        spread: tuple[float, float] | None = None,
    ) -> None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            out.append(
                {
                    "target": name,
                    "value": None,
                    "goal": goal,
                    "met": None,
                    "by": None,
                    "unit": unit,
                    "why": why,
                    "range": None,
                }
            )
            return
        met = value >= goal if higher else value <= goal
        by = 0.0 if met or not goal else (goal - value) / goal if higher else (value - goal) / goal
        out.append(
            {
                "target": name,
                "value": value,
                "goal": goal,
                "met": met,
                "by": None if met else by,
                "unit": unit,
                "why": why,
                "range": spread,
            }
        )

    fleet = r.get("fleet")
    fleet_rate = fleet.median if fleet else None
    add(
        f"no-op processing with a fleet ({bench.p.fleet[0]} x {bench.p.fleet[1]})",
        fleet_rate,
        10_000,  # on two cores; where pgbench itself is slower, the fraction of pgbench below is the goal
        "jobs/s",
        spread=_spread(fleet) if fleet else None,
    )
    peers = r.get("fleet_peers", {})
    if peers and fleet_rate:
        best_key = max(peers, key=lambda k: peers[k].median)
        add(
            f"fleet vs the faster peer ({best_key}, same processes x concurrency)",
            fleet_rate / peers[best_key].median,
            5.0,
            "x",
            spread=_ratio_spread(fleet, peers[best_key]),
        )
    else:
        add("fleet vs the faster peer", None, 5.0, "x", why="peers not measured")
    ceilings = r.get("ceilings")
    if ceilings and fleet_rate:
        add(
            "fleet as a fraction of the bare psycopg loop",
            fleet_rate / ceilings["bare"].median,
            0.60,
            "fraction",
            spread=_ratio_spread(fleet, ceilings["bare"]),
        )
        add(
            "fleet as a fraction of pgbench running the same statements",
            fleet_rate / ceilings["pgbench"].median,
            0.60,
            "fraction",
            spread=_ratio_spread(fleet, ceilings["pgbench"]),
        )
        paired = r.get("paired_one")
        if paired is not None:  # each repetition of the worker against the loop's right after it
            shares = paired[2]
            add(
                f"one process x {bench.p.fleet[1]} as a fraction of a one-process bare psycopg loop, paired",
                statistics.median(shares),
                0.80,
                "fraction",
                spread=(min(shares), max(shares)),
            )
    enqueue_one = r.get("enqueue_one")
    add(
        "enqueue, one process, one job per transaction",
        enqueue_one.median if enqueue_one else None,
        1500,
        "jobs/s",
        spread=_spread(enqueue_one) if enqueue_one else None,
    )
    paths = r.get("enqueue_paths", {})
    # The enqueue goals (issue 48): each path against procrastinate and against the ceiling of a plain
    # Django create of the same row, measured in the same repetitions.
    for mode, label, against, goal in (
        ("one", "one job per transaction", "procrastinate", 1.2),
        ("atomic", "one job per atomic() block", "procrastinate", 1.2),
        ("bulk", "bulk", "procrastinate", 2.0),
        ("one", "one job per transaction", "django", 0.8),
        ("atomic", "one job per atomic() block", "django", 0.8),
    ):
        mine, theirs = paths.get("reliableq", {}).get(mode), paths.get(against, {}).get(mode)
        what = "procrastinate" if against == "procrastinate" else "a plain Django create of the same row"
        name = f"enqueue, {label}, vs {what}"
        if mine and theirs and mine.values and theirs.values and theirs.median:
            add(name, mine.median / theirs.median, goal, "x", spread=_ratio_spread(mine, theirs))
        else:
            add(name, None, goal, "x", why="not measured in this run (ingestion, with peers)")
    if "pileup" in r:
        levels = r["pileup"]
        base = levels[min(levels)]
        for level in sorted(levels)[1:]:
            add(
                f"claim throughput at {level:,} finished rows vs an empty table",
                levels[level].median / base.median,
                0.90,
                "fraction",
                spread=_ratio_spread(levels[level], base),
            )
    if "flow" in r:
        runs = r["flow"]
        for key, label in (("keyed", "1,000 concurrency keys at max_running_per_key=1"), ("rated", "a rate limit")):
            add(
                f"claims under {label} vs the same run without limits",
                runs[key].median / runs["none"].median,
                0.70,
                "fraction",
                spread=_ratio_spread(runs[key], runs["none"]),
            )
    if "workflows" in r:
        w = r["workflows"]
        add(
            f"a workflow of {w['members']:,} (a fan-in of {w['members'] - 1:,} and a report) vs as many "
            "independent jobs, same fleet, alternating",
            w["fan_in"].median / w["independent"].median,
            0.80,
            "fraction",
            spread=_ratio_spread(w["fan_in"], w["independent"]),
        )
        add(
            f"a chain of {w['links']:,} members: time per link",
            w["link_ms"].median,
            5.0,
            "ms",
            higher=False,
            spread=_spread(w["link_ms"]),
        )
        add(
            "a workflow's success callback: start after the workflow's finish, worst (informative, no target)",
            w["callback_max_ms"],
            0.0,
            "ms",
            higher=False,
        )
    if "fairness" in r:
        f = r["fairness"]
        add(
            "fair claims: small tenants' p99 start delay behind one tenant's flood, worst repetition",
            max(f["fair_p99"].values),
            1.0,
            "s",
            higher=False,
            spread=_spread(f["fair_p99"]),
        )
        add(
            "FIFO: the same small tenants' p99 start delay (informative, no target)",
            f["fifo_p99"].median,
            0.0,
            "s",
            higher=False,
            spread=_spread(f["fifo_p99"]),
        )
        add(
            "a fair kind's one key alone vs the plain claim, same fleet, alternating",
            f["alone"].median / f["plain"].median,
            0.90,
            "fraction",
            spread=_ratio_spread(f["alone"], f["plain"]),
        )
        add(
            f"a fair claim's p99 over {f['keys']:,} keys vs over 10 keys, as many jobs, side by side",
            f["claim_p99_ms"] / f["few_keys_claim_p99_ms"],
            1.5,
            "x",
            higher=False,
        )
        add(
            f"a fair claim's p99 over {f['keys']:,} keys vs the plain claim's (informative, no target)",
            f["claim_p99_ms"] / f["plain_claim_p99_ms"],
            0.0,
            "x",
            higher=False,
        )
    if "recovery" in r:
        _met, worst = r["recovery"]
        excess = max(worst[lease] - lease for lease in worst)
        add("recovery after SIGKILL: worst (recovery - lease)", excess, 1.0, "s", higher=False)
    if "amplification" in r:
        add("retry amplification: worst error against theory", r["amplification"], 0.05, "fraction", higher=False)
    return out


def _spread(summary: Summary) -> tuple[float, float] | None:
    """The range of a median's repetitions (None for one repetition: there is no range to show)."""
    return (summary.low, summary.high) if len(summary.values) > 1 else None


def _ratio_spread(a: Summary, b: Summary) -> tuple[float, float] | None:
    """The range of a / b over every pair of repetitions: the runs of a and b are not paired."""
    if (len(a.values) < 2 and len(b.values) < 2) or not a.values or not b.values or b.low <= 0:
        return None
    return a.low / b.high, a.high / b.low


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "not measured"
    if unit == "fraction":
        return f"{100 * value:.1f}%"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "ms":
        return f"{value:.2f} ms"
    return f"{value:,.0f} {unit}"


def _targets_table(targets: list[dict[str, Any]]) -> str:
    rows = ["| target | measured | goal | |", "| --- | ---: | ---: | --- |"]
    for t in targets:
        at_most = t["unit"] in ("s", "ms") or "error" in t["target"]
        goal = "-" if t["goal"] == 0.0 else ("≤ " if at_most else "≥ ") + _fmt(t["goal"], t["unit"])
        missed = f"**missed** by {100 * t['by']:.0f}%" if t["by"] is not None else ""
        state = ("met" if t["met"] else missed) if t["met"] is not None else t["why"] or "-"
        if t["goal"] == 0.0:
            state = ""
        measured = _fmt(t["value"], t["unit"])
        if t["range"]:
            low, high = (_fmt(x, t["unit"]).removesuffix(" jobs/s").removesuffix(" ms") for x in t["range"])
            measured += f" ({low}–{high})"
        rows.append(f"| {t['target']} | {measured} | {goal} | {state} |")
    return "\n".join(rows)


def _closing(bench: Any, targets: list[dict[str, Any]]) -> str:
    lines = []
    for t in targets:
        if t["value"] is None:
            continue
        lines.append(
            f"- {t['target']}: {_fmt(t['value'], t['unit'])}"
            + ("" if t["met"] in (None, True) or t["goal"] == 0.0 else f" (missed by {100 * t['by']:.0f}%)")
        )
    missed = [t for t in targets if t["met"] is False and t["goal"] != 0.0]
    text = "Ratios from this run:\n\n" + "\n".join(lines)
    if CHANGES:
        text += "\n\nWhat was changed in `reliableq/` to reach them (each a separate commit with its before/after):\n\n"
        text += "\n".join(f"- {c}" for c in CHANGES)
    if missed:
        text += "\n\nMissed targets and what limits them: see LIMITS below.\n\n" + "\n".join(
            f"- {t['target']}: {LIMITS.get(_limit_key(t['target']), 'see the scenario section.')}" for t in missed
        )
    return text


# What limits each target, stated when a run misses it (keys are substrings of the target names).
LIMITS: dict[str, str] = {
    "no-op processing": "the worker's round trips: a claim and a finish per batch, one statement each, each "
    "waiting for its commit's WAL flush on the other core; see the ceilings.",
    "faster peer": "the fleet's own rate (above) and the database's limit for this SQL (pgbench): the ratio cannot "
    "exceed pgbench's rate over the peer's.",
    "bare psycopg": "the worker's Python per job that the loop does not have: the handler threads' hand-offs and "
    "the GIL they share, the ledger and the completer, Django's cursor layer (docs: where a no-op job's time goes).",
    "enqueue": "one INSERT that updates seven of the job table's nine indexes (claim, pruning and the admin's "
    "listings) and a commit that waits for the WAL flush (synchronous_commit on).",
    "finished rows": "the claim reads the partial index of due PENDING rows, whatever the table holds; what "
    "moves is the rest of the machine (autovacuum, checkpoints) during the run.",
    "recovery": "what is left of the lease at the kill (the heartbeat renews every third of it) plus the leader's "
    "POLL_SECONDS (its rescue interval); when the leader dies too, its maintenance lease first.",
    "amplification": "sampling: the spread of attempts per job at this many jobs.",
    "a fan-in of": "the report member's claim, which reads every upstream member's return value by a LEFT JOIN "
    "whose condition repeats `r.job_id = ANY(ARRAY(SELECT upstream FROM e))`: one index probe per upstream, each "
    "with the whole array as a key (quadratic: seconds at 5,000 upstreams, tens of seconds at 10,000); then each "
    "member's finish, a statement of some 25 CTEs planned afresh on every execution (about 2 ms of planning), in a "
    "transaction with the INSERT of its return value. See the Workflows section of docs/internals/benchmark-record.md.",
    "time per link": "the statements of one link: the claim, a second query for the upstream values, the finish "
    "statement (about 2 ms of planning alone), the return value's INSERT, BEGIN and COMMIT: 8-10 ms with no "
    "worker at all, on this machine. See the Workflows section of docs/internals/benchmark-record.md.",
}


def _limit_key(name: str) -> str:
    for key in LIMITS:
        if key in name:
            return key
    return ""


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
