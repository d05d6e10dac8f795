"""PNG plots (matplotlib, Agg) and the Markdown report."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {"reliableq": "#1f77b4", "procrastinate": "#ff7f0e", "tasksdb": "#2ca02c", "ceiling": "#7f7f7f"}
NAMES = {"reliableq": "ReliableQ", "procrastinate": "procrastinate", "tasksdb": "django-tasks-db"}


def _save(fig: Any, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def _err(summary: Any) -> tuple[float, float]:
    return summary.median - summary.low, summary.high - summary.median


def plot_ingestion(out: Path, http: dict[int, Any], python: dict[str, dict[str, Any]], bulk: int) -> str:
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    clients = sorted(http)
    a.errorbar(
        clients,
        [http[c].median for c in clients],
        yerr=list(zip(*[_err(http[c]) for c in clients], strict=True)),
        marker="o",
        color=COLORS["reliableq"],
        capsize=3,
    )
    a.set_xscale("log", base=2)
    a.set_xticks(clients, [str(c) for c in clients])
    a.set_xlabel("concurrent HTTP clients")
    a.set_ylabel("committed submissions / s")
    a.set_title("ReliableQ: POST /v1/jobs through gunicorn")
    a.set_ylim(bottom=0)
    modes = [("one", "1 per transaction"), ("atomic", "1 per atomic() block"), ("bulk", f"bulk, {bulk} per call")]
    width = 0.8 / max(1, len(python))
    for i, (key, d) in enumerate(python.items()):
        xs = [j + i * width for j in range(len(modes))]
        ys = [d[m].median if m in d and d[m].values else 0 for m, _ in modes]
        b.bar(xs, ys, width, label=NAMES[key], color=COLORS[key])
    b.set_xticks([j + width * (len(python) - 1) / 2 for j in range(len(modes))], [label for _, label in modes])
    b.set_yscale("log")
    b.set_ylabel("committed submissions / s (log)")
    b.set_title("enqueue from Python, one process")
    b.legend()
    return _save(fig, out, "ingestion.png")


def plot_throughput(
    out: Path,
    by_conc: dict[int, Any],
    by_proc: dict[int, Any],
    peers: dict[str, dict[str, Any]],
    ceilings: dict[str, Any],
    fleet: tuple[int, int],
) -> str:
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    cs = sorted(by_conc)
    a.errorbar(
        cs,
        [by_conc[c].median for c in cs],
        yerr=list(zip(*[_err(by_conc[c]) for c in cs], strict=True)),
        marker="o",
        color=COLORS["reliableq"],
        label="ReliableQ",
        capsize=3,
    )
    for key, d in peers.items():
        cfg = f"1x{fleet[1]}"
        if cfg in d:
            a.plot([fleet[1]], [d[cfg].median], marker="s", linestyle="none", color=COLORS[key], label=NAMES[key])
    a.set_xscale("log", base=2)
    a.set_xticks(cs, [str(c) for c in cs])
    a.set_xlabel("worker concurrency (one process)")
    a.set_ylabel("no-op jobs / s")
    a.set_ylim(bottom=0)
    a.set_title("one worker process")
    a.legend()
    ps = sorted(by_proc)
    b.errorbar(
        ps,
        [by_proc[p].median for p in ps],
        yerr=list(zip(*[_err(by_proc[p]) for p in ps], strict=True)),
        marker="o",
        color=COLORS["reliableq"],
        label="ReliableQ",
        capsize=3,
    )
    for key, d in peers.items():
        pts = [(int(cfg.split("x")[0]), v.median) for cfg, v in d.items()]
        b.plot(
            [p for p, _ in pts], [v for _, v in pts], marker="s", linestyle="none", color=COLORS[key], label=NAMES[key]
        )
    styles = {"pgbench": "--", "bare": ":", "bare_one": "-."}
    labels = {
        "pgbench": f"pgbench ceiling ({fleet[0]} clients)",
        "bare": f"bare psycopg ceiling ({fleet[0]} processes)",
        "bare_one": "bare psycopg ceiling (1 process)",
    }
    for key, v in ceilings.items():
        if v.values and key in styles:
            b.axhline(v.median, linestyle=styles[key], color=COLORS["ceiling"], label=labels[key])
    b.set_xticks(ps, [str(p) for p in ps])
    b.set_xlabel(f"worker processes (concurrency {fleet[1]} each)")
    b.set_ylabel("no-op jobs / s")
    b.set_ylim(bottom=0)
    b.set_title("a fleet, the peers and the ceilings")
    b.legend(fontsize=8)
    return _save(fig, out, "throughput.png")


def plot_io(out: Path, ours: dict[int, Any], peers: dict[str, dict[int, Any]], sleep: float) -> str:
    fig, ax = plt.subplots(figsize=(8, 4))
    cs = sorted(ours)
    series = {"reliableq": ours, **peers}
    width = 0.8 / len(series)
    for i, (key, d) in enumerate(series.items()):
        ax.bar(
            [j + i * width for j in range(len(cs))],
            [d[c].median for c in cs],
            width,
            label=NAMES[key],
            color=COLORS[key],
        )
    for j, c in enumerate(cs):
        ax.hlines(
            c / sleep,
            j - width / 2,
            j + width * (len(series) - 0.5),
            colors="black",
            linestyles="--",
            label="ideal (c / 50 ms)" if j == 0 else None,
        )
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(cs))], [f"concurrency {c}" for c in cs])
    ax.set_ylabel("jobs / s")
    ax.set_title(f"I/O-bound jobs ({sleep * 1000:.0f} ms each), one worker process")
    ax.legend()
    return _save(fig, out, "io.png")


def plot_latency(out: Path, results: dict[str, dict[str, list[float]]], names: dict[str, str]) -> str:
    from .core import percentile

    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [f"{k} p{q}" for k in ("start", "finish") for q in (50, 95, 99)]
    width = 0.8 / len(results)
    for i, (key, r) in enumerate(results.items()):
        ys = [1000 * percentile(r[k], q) for k in ("start", "finish") for q in (50, 95, 99)]
        ax.bar([j + i * width for j in range(len(labels))], ys, width, label=names[key], color=COLORS[key])
    ax.set_xticks([j + width * (len(results) - 1) / 2 for j in range(len(labels))], labels)
    ax.set_yscale("log")
    ax.set_ylabel("ms from enqueue (log)")
    ax.set_title("latency at a steady offered load")
    ax.legend()
    return _save(fig, out, "latency.png")


def plot_pileup(out: Path, rates: dict[int, Any]) -> str:
    fig, ax = plt.subplots(figsize=(7, 4))
    levels = sorted(rates)
    xs = list(range(len(levels)))
    ax.errorbar(
        xs,
        [rates[lv].median for lv in levels],
        yerr=list(zip(*[_err(rates[lv]) for lv in levels], strict=True)),
        marker="o",
        color=COLORS["reliableq"],
        capsize=3,
    )
    base = rates[levels[0]].median
    ax.axhline(0.8 * base, linestyle="--", color=COLORS["ceiling"], label="target: 80% of the empty table")
    ax.set_xticks(xs, [f"{lv:,}" for lv in levels])
    ax.set_xlabel("finished jobs in the table")
    ax.set_ylabel("no-op jobs / s")
    ax.set_ylim(bottom=0)
    ax.set_title("claim throughput as finished rows pile up")
    ax.legend()
    return _save(fig, out, "pileup.png")


def plot_recovery(out: Path, samples: dict[float, list[float]]) -> str:
    fig, ax = plt.subplots(figsize=(7, 4))
    for lease, v in samples.items():
        ax.plot([lease] * len(v), v, "o", color=COLORS["reliableq"], alpha=0.7)
    leases = sorted(samples)
    ax.plot(leases, [x + 1 for x in leases], "--", color="black", label="target: lease + 1 s")
    ax.plot(leases, leases, ":", color=COLORS["ceiling"], label="lease")
    ax.set_xlabel("lease length, s")
    ax.set_ylabel("SIGKILL to attempt 2 started, s")
    ax.set_title("recovery after SIGKILL")
    ax.legend()
    return _save(fig, out, "recovery.png")


def plot_amplification(out: Path, data: dict[float, dict[str, float]]) -> str:
    fig, ax = plt.subplots(figsize=(7, 4))
    rates = sorted(data)
    xs = list(range(len(rates)))
    ax.bar(
        [x - 0.2 for x in xs], [data[p]["measured"] for p in rates], 0.4, label="measured", color=COLORS["reliableq"]
    )
    ax.bar([x + 0.2 for x in xs], [data[p]["theory"] for p in rates], 0.4, label="theory", color=COLORS["ceiling"])
    ax.set_xticks(xs, [f"{p:.0%} failures" for p in rates])
    ax.set_ylabel("attempts per job")
    ax.set_title("retry amplification")
    ax.legend()
    return _save(fig, out, "amplification.png")


def plot_xmin(out: Path, results: dict[str, dict[str, Any]], base: float, pin: float) -> str:
    """Completed / offered and the claim p99 per window of each run, the held snapshot shaded."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name, r in results.items():
        ws = r["windows"]
        mids = [(w.start + w.end) / 2 for w in ws]
        a.plot(mids, [100 * w.completed / max(1, w.offered) for w in ws], marker="o", markersize=3, label=name)
        b.plot(mids, [w.p(99) for w in ws], marker="o", markersize=3, label=name)
    for ax in (a, b):
        ax.axvspan(base, base + pin, color="#dddddd", zorder=0)
        ax.set_xlabel("seconds (shaded: snapshot held)")
    a.axhline(95, color=COLORS["ceiling"], linestyle=":")
    a.set_ylabel("completed / offered, %")
    a.set_ylim(bottom=0)
    a.legend(fontsize=7)
    b.set_yscale("log")
    b.set_ylabel("claim p99, ms (log)")
    b.legend(fontsize=7)
    return _save(fig, out, "xmin.png")


def plot_soak(out: Path, rows: list[dict[str, Any]]) -> str:
    """Completed jobs/s and the tables' sizes over the soak."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    at = [r["at"] for r in rows]
    a.plot(at, [r["rate"] for r in rows], color=COLORS["reliableq"])
    a.set_xlabel("seconds")
    a.set_ylabel("completed jobs / s")
    a.set_ylim(bottom=0)
    for key, label in [("job_mb", "job"), ("job_indexes_mb", "job indexes"), ("attempt_mb", "attempt"),
                       ("attempt_indexes_mb", "attempt indexes")]:  # fmt: skip
        b.plot(at, [r[key] for r in rows], label=label)
    b.set_xlabel("seconds")
    b.set_ylabel("MB")
    b.set_ylim(bottom=0)
    b.legend(fontsize=7)
    return _save(fig, out, "soak.png")


def markdown(
    *, title: str, header: list[str], summary: str, sections: list[Any], gate: Any, closing: str, findings: str = ""
) -> str:
    # Findings (outlying repetitions) come right after the targets: a stall must be seen before any median.
    lines = [f"# {title}", "", *header, "", summary, ""] + ([findings, ""] if findings else [])
    for s in sections:
        lines += [f"## {s.title}", ""]
        if s.error:
            lines += [f"**This scenario failed and has no figures:** `{s.error}`", ""]
            continue
        if s.intro:
            lines += [s.intro, ""]
        for t in s.tables:
            lines += [t, ""]
        for p in s.plots:
            lines += [f"![{s.title}]({p})", ""]
        for n in s.notes:
            lines += [n, ""]
    lines += ["## Correctness gate", ""]
    failed = [(r, c) for r, c, ok in gate.checks if not ok]
    lines += [
        f"{len(gate.checks)} checks over {gate.runs} runs: "
        + ("**all passed**." if not failed else f"**{len(failed)} FAILED**."),
        "",
    ]
    for r, c in failed:
        lines.append(f"- FAILED: {r}: {c}")
    lines += ["", "<details><summary>Every check</summary>", ""]
    lines += [f"- {'ok' if ok else 'FAILED'}: {r}: {c}" for r, c, ok in gate.checks]
    lines += ["", "</details>", "", "## Closing note", "", closing, ""]
    return "\n".join(lines)


def nan_safe(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x
