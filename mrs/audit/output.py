"""The audit report as files and on the terminal: Parquet + CSV per table, one
self-contained HTML page (charts as inline base64 PNG), a short rich table, JSON.

Why self-contained: the page is mailed to auditors and opened from a file share,
so it carries its charts and styles and loads nothing from the network.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from mrs.audit.report import NAMED_COLUMNS, TABLES, Report, _plain

_COUNT = pa.int64()
_RECONCILED = [("stored", _COUNT), ("confirmed", _COUNT), ("dead_lettered", _COUNT),
               ("in_dqf", _COUNT), ("in_saf", _COUNT), ("missing", _COUNT),
               ("duplicates", _COUNT)]  # fmt: skip
_MS = pa.float64()
TABLE_SCHEMAS = {
    "totals": pa.schema(
        [(name, _COUNT) for name in ("confirmed", "dead_letters", "possdupl")]
        + [("possdupl_rate", pa.float64())]
        + [(name, _COUNT) for name in ("replayed", "corrupt_records", "body_bytes")]
        + [("first_confirm", pa.string()), ("last_confirm", pa.string())]
        + [(name, _COUNT) for name in ("in_dqf", "in_saf", "missing", "missing_unattributed",
                                       "gaps", "duplicates")]  # fmt: skip
        + [("checks_truncated", pa.bool_()), ("correlation_missing_numbers", _COUNT),
           ("correlation_duplicate_confirms", _COUNT)]  # fmt: skip
    ),
    "reconciliation_queue": pa.schema([("target", pa.string()), *_RECONCILED]),
    "reconciliation_sender": pa.schema([("source", pa.string()), *_RECONCILED]),
    "per_queue": pa.schema([("target", pa.string()), ("messages", _COUNT)]),
    "per_sender": pa.schema([("source", pa.string()), ("messages", _COUNT)]),
    "per_hour": pa.schema([("hour", pa.timestamp("us", "UTC")), ("messages", _COUNT)]),
    "cross_group": pa.schema([("source_group", _COUNT), ("target_group", _COUNT),
                              ("messages", _COUNT)]),  # fmt: skip
    "latency": pa.schema([("target", pa.string()), ("messages", _COUNT), ("p50_ms", _MS),
                          ("p95_ms", _MS), ("p99_ms", _MS), ("max_ms", _MS)]),  # fmt: skip
    "dead_letters": pa.schema([("dead_letter_reason", pa.string()), ("messages", _COUNT)]),
    "gaps": pa.schema([("after_seq", _COUNT), ("before_seq", _COUNT), ("missing", _COUNT),
                       ("sender", pa.string()), ("queue", pa.string())]),  # fmt: skip
    "duplicates": pa.schema([("seq", _COUNT), ("source", pa.string()),
                             ("target", pa.string()), ("places", pa.string())]),  # fmt: skip
    "correlation": pa.schema(
        [("prefix", pa.string()), ("senders", _COUNT), ("source", pa.string())]
        + [(name, _COUNT) for name in ("messages", "numbers", "first_number", "last_number",
                                       "confirmed", "confirmed_ids", "missing_numbers",
                                       "duplicate_confirms")]  # fmt: skip
    ),
}
"""Each table's columns and types, whatever its rows: a table with no rows (the
`gaps` of a clean audit) was one column `empty`, and a column whose values were all
null (a gap's `sender` when every gap was between two senders) had no type, so the
same table of two audits did not read or union as one dataset."""


def table_of(name: str, rows: list[dict], named: bool = False) -> pa.Table:
    """One table of the report in its `TABLE_SCHEMAS` columns, then (`named`: the
    report has the config's names) a `_name` column beside each address, then any
    other column its rows carry."""
    declared = TABLE_SCHEMAS.get(name, pa.schema([]))
    if named:
        names = [f"{c}_name" for c in NAMED_COLUMNS if c in declared.names]
        declared = pa.schema([*declared, *((n, pa.string()) for n in names)])
    keys = dict.fromkeys(key for row in rows for key in row if key not in declared.names)
    extra = [(key, pa.string()) if key.endswith("_name") else
             pa.Table.from_pylist([{key: row.get(key)} for row in rows]).schema.field(key)
             for key in keys]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=pa.schema([*declared, *extra]))


def write_tables(report: Report, out_dir: Path) -> list[Path]:
    """tables/NAME.parquet and tables/NAME.csv for each table, plus totals."""
    directory = out_dir / "tables"
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    named = {"totals": [_plain(report.totals)], **report.tables}
    for name, rows in named.items():
        table = table_of(name, rows, report.named)
        for suffix, write in (
            (".parquet", lambda t, p: pq.write_table(t, p)),
            (".csv", lambda t, p: pacsv.write_csv(t, p)),
        ):
            path = directory / f"{name}{suffix}"
            write(table, path)
            written.append(path)
    return written


def write_json(report: Report, path: Path) -> None:
    path.write_text(json.dumps(report.as_json(), indent=2) + "\n")


# ------------------------------------------------------------------ charts
def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode()


def _figure(bars: int):
    """A figure as wide as its bars need (a label needs about half an inch)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    width_in = min(14.0, max(4.0, 1.5 + 0.45 * bars))
    return plt, *plt.subplots(figsize=(width_in, 3))


def _bar_chart(title: str, labels: list[str], values: list[float], ylabel: str) -> str | None:
    """Counts as bars with whole-number ticks; no chart for fewer than two bars (the
    table says it better)."""
    from matplotlib.ticker import MaxNLocator

    if len(labels) < 2:
        return None
    plt, figure, axes = _figure(len(labels))
    axes.bar(range(len(labels)), values, color="#3b6ea5")
    slanted = len(labels) > 6
    axes.set_xticks(range(len(labels)), labels, rotation=45 if slanted else 0,
                    ha="right" if slanted else "center")  # fmt: skip
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_title(title)
    axes.set_ylabel(ylabel)
    axes.grid(axis="y", alpha=0.3)
    encoded = _png(figure)
    plt.close(figure)
    return encoded


LATENCY_FLOOR_MS = 0.001
"""A log axis cannot show 0: a latency below a microsecond is drawn at one."""


def _latency_chart(rows: list[dict]) -> str | None:
    """p50/p95/p99 per queue on a log axis: a 3 ms queue stays visible beside a 40 s one."""
    if not rows:
        return None
    plt, figure, axes = _figure(3 * len(rows))
    labels = [_label(r, "target") for r in rows]
    width = 0.27
    for offset, key in ((-width, "p50_ms"), (0.0, "p95_ms"), (width, "p99_ms")):
        values = [max(r[key] or 0.0, LATENCY_FLOOR_MS) for r in rows]
        axes.bar([i + offset for i in range(len(rows))], values, width=width,
                 label=key.replace("_ms", ""))  # fmt: skip
    axes.set_yscale("log")
    axes.set_xticks(range(len(rows)), labels, rotation=45 if len(rows) > 6 else 0,
                    ha="right" if len(rows) > 6 else "center")  # fmt: skip
    axes.set_title("Confirm latency per queue (log scale)")
    axes.set_ylabel("ms")
    axes.legend()
    axes.grid(axis="y", alpha=0.3, which="both")
    encoded = _png(figure)
    plt.close(figure)
    return encoded


def _label(row: dict, column: str) -> str:
    """The queue's name from the config when the report has it, else GROUP.QUEUE."""
    return str(row.get(f"{column}_name") or row[column])


def charts(report: Report) -> list[tuple[str, str]]:
    """(title, base64 PNG) for each chart that has data."""
    t = report.tables
    hour_labels = [_plain(r["hour"])[5:16].replace("T", " ") for r in t["per_hour"]]
    made = [
        ("Confirmed messages per queue", _bar_chart(
            "Confirmed messages per queue", [_label(r, "target") for r in t["per_queue"]],
            [r["messages"] for r in t["per_queue"]], "messages")),
        ("Confirmed messages per sender", _bar_chart(
            "Confirmed messages per sender", [_label(r, "source") for r in t["per_sender"]],
            [r["messages"] for r in t["per_sender"]], "messages")),
        ("Confirmed messages per hour (UTC)", _bar_chart(
            "Confirmed messages per hour (UTC)", hour_labels,
            [r["messages"] for r in t["per_hour"]], "messages")),
        ("Confirm latency per queue", _latency_chart(t["latency"])),
        ("Dead letters by reason", _bar_chart(
            "Dead letters by reason", [str(r["dead_letter_reason"]) for r in t["dead_letters"]],
            [r["messages"] for r in t["dead_letters"]], "dead letters")),
    ]  # fmt: skip
    return [(title, image) for title, image in made if image]


# ------------------------------------------------------------------ html
_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:60em;color:#222}
h1{font-size:1.5em} h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ccc;padding:.25em .6em}
th{background:#f2f4f7;text-align:left} td.n{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%} .meta{color:#666}
"""


def _format(value, column: str = "") -> str:
    """A cell as the page shows it: counts with thousands separators; a seq or a group
    id as `mrs dump --seq` and `--group` take it, and a flag as JSON writes it. Why:
    a gap's `after_seq` read "566,808,395,146,504", which no tool takes pasted, and
    `checks_truncated` read 0 or 1."""
    value = _plain(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1 else f"{value:,.2f}"
    if isinstance(value, int):
        return str(value) if column.endswith(("seq", "group")) else f"{value:,}"
    return "" if value is None else str(value)


def _html_table(rows: list[dict]) -> str:
    if not rows:
        return "<p>none</p>"
    columns = list(rows[0])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{"n" if isinstance(r[c], int | float) else ""}">'
            f"{html.escape(_format(r[c], c))}</td>"
            for c in columns
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def write_html(report: Report, path: Path, title: str, description: str) -> Path:
    sections = [
        f"<h1>{html.escape(title)}</h1><p class=meta>{html.escape(description)}</p>",
        *(f"<p class=note>{html.escape(note)}</p>" for note in report.notes),
        "<h2>Totals</h2>",
        _html_table([{"figure": k, "value": v} for k, v in report.totals.items()]),
    ]
    for chart_title, image in charts(report):
        sections.append(f"<h2>{html.escape(chart_title)}</h2>")
        alt = html.escape(chart_title)
        sections.append(f'<img alt="{alt}" src="data:image/png;base64,{image}">')
    for name in TABLES:
        sections.append(f"<h2>{html.escape(name.replace('_', ' '))}</h2>")
        sections.append(_html_table(report.tables[name]))
    page = (
        "<!doctype html><html><head><meta charset=utf-8>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        + "\n".join(sections)
        + "</body></html>\n"
    )
    path.write_text(page)
    return path


# ------------------------------------------------------------------ terminal
SUMMARY_FIGURES = ("confirmed", "dead_letters", "in_dqf", "in_saf", "missing", "duplicates",
                   "possdupl", "possdupl_rate", "replayed", "corrupt_records",
                   "correlation_missing_numbers", "correlation_duplicate_confirms")  # fmt: skip
SUMMARY_ROWS_MAX = 12
"""Rows of a table on the terminal; the files (--out, --json) hold them all."""


def print_summary(report: Report, console) -> None:
    """Totals, the reconciliation per queue and the latency, on the terminal."""
    from rich.table import Table

    totals = report.totals
    table = Table(title="MRS audit", show_header=True)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key in SUMMARY_FIGURES:
        value = totals[key]
        table.add_row(key.replace("_", " "), f"{value:.2%}" if key.endswith("rate") else
                      f"{value:,}")  # fmt: skip
    for row in report.tables["latency"][:SUMMARY_ROWS_MAX]:
        table.add_row(
            f"latency {_label(row, 'target')} p50/p95/p99 ms",
            f"{row['p50_ms']:.1f} / {row['p95_ms']:.1f} / {row['p99_ms']:.1f}",
        )
    console.print(table)
    rows = report.tables["reconciliation_queue"]
    if rows:
        columns = ("stored", "confirmed", "dead_lettered", "in_dqf", "in_saf", "missing",
                   "duplicates")  # fmt: skip
        queues = Table(title="Reconciliation per queue", show_header=True)
        queues.add_column("queue")
        for column in columns:
            queues.add_column(column.replace("_", " "), justify="right")
        for row in rows[:SUMMARY_ROWS_MAX]:
            queues.add_row(_label(row, "target"), *(f"{row[c]:,}" for c in columns))
        console.print(queues)
    for note in report.notes:
        console.print(f"[yellow]note[/]: {note}")
    if totals["missing"] or totals["duplicates"]:
        console.print(
            f"[bold red]{totals['missing']:,} missing, {totals['duplicates']:,} "
            "duplicates[/]: see the gaps and duplicates tables (--out or --json)"
        )
