"""The HTML of the UI page: each pipeline's tables, splits and chunks, the stream's position, its lag
over time and what awaits a re-snapshot, from ``status.pipeline_status`` (what ``bin/status``
prints). Plain HTML and inline SVG, no script: it renders the same in any browser and in Airflow's
iframe. Every value from the state location is escaped."""

from __future__ import annotations

import datetime as dt
import html
import time
from collections.abc import Sequence
from typing import Any

from airflow_provider_mysqlcdc.cdc.model.offset import BinlogOffset
from airflow_provider_mysqlcdc.cdc.model.schema import TableId
from airflow_provider_mysqlcdc.protocol.offsets import StreamOffset

#: splits listed per table (the count is always shown)
MAX_SPLITS_LISTED = 200

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1f2933; background: #fff; }
h1 { font-size: 1.4rem; margin: 0 0 1rem; }
h2 { font-size: 1.15rem; margin: 2rem 0 .3rem; border-bottom: 2px solid #0b7285; padding-bottom: .2rem; }
h3 { font-size: 1rem; margin: 1.2rem 0 .4rem; }
table { border-collapse: collapse; margin: .3rem 0 .8rem; font-size: .88rem; }
th, td { border: 1px solid #d9e2ec; padding: .25rem .55rem; text-align: left; vertical-align: top; }
th { background: #f0f4f8; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.muted { color: #829ab1; font-size: .85rem; }
.ok { color: #2b8a3e; font-weight: 600; }
.warn { color: #c92a2a; font-weight: 600; }
.badge { display: inline-block; padding: 0 .45rem; border-radius: .6rem; font-size: .78rem; background: #e3f2fd; }
.error { border: 1px solid #c92a2a; background: #fff5f5; padding: .5rem; }
svg { background: #f8fafc; border: 1px solid #d9e2ec; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _ago(epoch_s: float | None) -> str:
    if not epoch_s:
        return "-"
    seconds = max(0.0, time.time() - epoch_s)
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago" if seconds < 7200 \
        else f"{seconds / 3600:.1f} h ago"


def _offset(body: dict[str, Any] | None) -> str:
    return str(BinlogOffset.from_dict(body)) if body else "-"


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], numeric: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="n">{cell}</td>' if i in numeric else f"<td>{cell}</td>"
                                    for i, cell in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def lag_chart(points: Sequence[Sequence[Any]], *, index: int, title: str, unit: str, width: int = 640,
              height: int = 160) -> str:
    """An SVG line chart of one figure of the stream's history (``[at, lag_s, bytes_behind, changes]``)."""
    values = [(p[0], p[index]) for p in points if p[index] is not None]
    if len(values) < 2:
        return f'<p class="muted">{_e(title)}: not enough stream batches yet for a chart.</p>'
    t0, t1 = values[0][0], values[-1][0]
    top = max(v for _, v in values) or 1
    left, bottom = 56, height - 24
    span = max(t1 - t0, 1e-9)

    def xy(at: float, value: float) -> str:
        return f"{left + (at - t0) / span * (width - left - 10):.1f},{bottom - value / top * (bottom - 12):.1f}"

    line = " ".join(xy(at, v) for at, v in values)
    start = dt.datetime.fromtimestamp(t0, dt.timezone.utc).strftime("%H:%M:%S")
    end = dt.datetime.fromtimestamp(t1, dt.timezone.utc).strftime("%H:%M:%S UTC")
    return (f'<figure><figcaption>{_e(title)} (latest {_e(f"{values[-1][1]:,.2f}".rstrip("0").rstrip("."))} '
            f'{_e(unit)}; max {_e(f"{top:,.2f}".rstrip("0").rstrip("."))})</figcaption>'
            f'<svg role="img" aria-label="{_e(title)}" width="{width}" height="{height}" '
            f'xmlns="http://www.w3.org/2000/svg">'
            f'<line x1="{left}" y1="{bottom}" x2="{width - 10}" y2="{bottom}" stroke="#9fb3c8"/>'
            f'<line x1="{left}" y1="12" x2="{left}" y2="{bottom}" stroke="#9fb3c8"/>'
            f'<text x="4" y="16" font-size="11">{_e(f"{top:,.4g}")}</text>'
            f'<text x="4" y="{bottom}" font-size="11">0</text>'
            f'<text x="{left}" y="{height - 6}" font-size="11">{_e(start)}</text>'
            f'<text x="{width - 110}" y="{height - 6}" font-size="11">{_e(end)}</text>'
            f'<polyline fill="none" stroke="#0b7285" stroke-width="2" points="{line}"/></svg></figure>')


def _tables_section(status: dict[str, Any]) -> str:
    rows, pending = [], []
    for name, t in status["tables"].items():
        if t["frozen_since"]:
            state = (f'<span class="warn">frozen since {_e(t["frozen_since"])}</span>: re-snapshot pending')
        elif t["drift"]:
            state = '<span class="warn">drift</span>: re-snapshot pending'
        else:
            state = '<span class="ok">in sync</span>'
        shown = _e(name) + (f' <span class="muted">(into {_e(t["sink"])})</span>' if t["sink"] != name else "")
        rows.append([shown, _e(t["chunk_key"]), _e(t["how"]), t["splits"], t["staged_splits"],
                     f'{t["rows_at_snapshot"]:,}', f'{_e(t["high_watermarks"][0])} .. {_e(t["high_watermarks"][1])}',
                     state])
        pending += [[_e(name), _e(e["kind"]), _e(e["offset"]), _e(e["reason"])] for e in t["drift"]]
    out = "<h3>Tables</h3>" + (_table(["table", "chunk key", "captured by", "splits", "staged", "rows at snapshot",
                                       "high watermarks", "state"], rows, numeric=(3, 4, 5))
                               if rows else '<p class="muted">No table captured yet.</p>')
    out += "<h3>Drift and pending re-snapshots</h3>" + (
        _table(["table", "event", "at", "reason"], pending) if pending else
        '<p class="muted">None: every table follows its source exactly.</p>')
    ddl = [[_e(name), _e(d["offset"]), _e(d["statement"]), _e(d["policy"]), _e(d["outcome"])]
           for name, t in status["tables"].items() for d in t.get("ddl", [])]
    if ddl:  # the latest DDL the stream met of each table, and what its policy did with it
        out += "<h3>Schema changes met</h3>" + _table(["table", "at", "statement", "schema_changes", "what it did"], ddl)
    new_tables = [[_e(t["table"]), _e(t["offset"]), _e(t["statement"])] for t in status.get("new_tables", [])]
    if new_tables:  # a pattern matches them since the stream saw them created: the next run captures them
        out += "<h3>Tables the next run captures</h3>" + _table(["table", "matches a pattern since", "statement"],
                                                                 new_tables)
    return out


def _splits_section(splits: dict[str, list[dict[str, Any]]]) -> str:
    parts = []
    for name, listed in splits.items():
        rows = [[s["index"], _e(s["start"]), _e(s["end"]), f'{s["rows"]:,}', _e(s["high_watermark"]),
                 "staged" if s["staged"] else "stream only" if s["stream_only"] else "in the sink"]
                for s in listed[:MAX_SPLITS_LISTED]]
        more = f' <span class="muted">(first {MAX_SPLITS_LISTED} of {len(listed)})</span>' \
            if len(listed) > MAX_SPLITS_LISTED else ""
        parts.append(f"<details><summary>{_e(name)}: {len(listed)} split(s){more}</summary>"
                     + _table(["split", "from", "to", "rows", "high watermark", "rows are"], rows, numeric=(0, 3))
                     + "</details>")
    return "<h3>Splits</h3>" + ("".join(parts) or '<p class="muted">No splits yet.</p>')


def _run_section(status: dict[str, Any]) -> str:
    run = status["latest_run"]
    if not run:
        return '<h3>Chunks of the latest DAG run</h3><p class="muted">No DAG run planned yet.</p>'
    rows = [[_e(name), f'{t["done"]}/{t["chunks"]}', f'{t["rows"]:,}'] for name, t in sorted(run["tables"].items())]
    return (f'<h3>Chunks of the latest DAG run</h3><p class="muted">{_e(run["run"])}, planned {_e(run["planned_at"])}'
            f'</p>' + (_table(["table", "chunks done", "rows read"], rows, numeric=(1, 2)) if rows else
                       '<p class="muted">None: this run read no table (every table was captured already).</p>'))


def _stream_section(status: dict[str, Any]) -> str:
    lease, stream, committed = status["lease"], status["stream"], status["stream_offset"]
    if lease and lease["live"]:
        running = f'<span class="ok">running</span> <span class="muted">{_e(lease["description"])}</span>'
    elif lease:
        running = f'<span class="badge">not running</span> <span class="muted">{_e(lease["description"])}</span>'
    else:
        running = '<span class="badge">has not run yet</span>'
    rows = [["state", running]]
    if committed:
        offset = StreamOffset.from_spark(committed["offset"])
        behind = committed.get("bytes_behind")
        rows += [["committed up to", f"{_e(offset.offset)} (registry generation {offset.generation}), "
                  f"{_e(_ago(committed['committed_at']))}"],
                 ["binlog head then", _e(_offset(committed.get("head")))],
                 ["behind the head", "-" if behind is None else f"{behind:,} bytes"]]
    if stream:
        rows += [["last batch", f"{stream['batch']}, finished {_e(_ago(stream['finished_at']))}, took "
                  f"{stream.get('batch_seconds', 0.0):.2f}s"],
                 ["event-time lag at its end", f"{stream.get('lag_s', 0.0):.2f}s"],
                 ["changes applied by this stream process", f"{stream['changes_total']:,}"]]
    out = "<h3>Stream</h3>" + _table(["", ""], rows)
    if stream and stream.get("table_changes"):
        out += _table(["table", "changes applied"], [[_e(TableId.parse(t)), f"{n:,}"] for t, n in
                                                     sorted(stream["table_changes"].items())], numeric=(1,))
    history = status.get("stream_history") or []
    out += lag_chart(history, index=1, title="Event-time lag per batch", unit="s")
    out += lag_chart(history, index=2, title="Binlog bytes behind the head per batch", unit="bytes")
    for epoch in status["servers"][1:]:
        out += (f'<p>Failed over: from GTID position {_e(epoch["since"])} the pipeline reads server_id '
                f'{_e(epoch["server_id"])} (epoch {_e(epoch["epoch"])}).</p>')
    return out


def pipeline_section(name: str, status: dict[str, Any] | None, splits: dict[str, list[dict[str, Any]]],
                     error: str | None = None) -> str:
    head = f'<h2 id="{_e(name)}">{_e(name)}</h2>'
    if error is not None or status is None:
        return head + f'<p class="error">This pipeline\'s state could not be read: {_e(error)}</p>'
    return (head + f'<p class="muted">state {_e(status["state"])}; registry generation {status["generation"]} '
            f'({_e(status["created"] or "none")})</p>' + _tables_section(status) + _splits_section(splits)
            + _run_section(status) + _stream_section(status))


def page(sections: Sequence[str], *, state_dirs: Sequence[str], refresh_s: int = 30) -> str:
    if not state_dirs:
        body = ('<p class="error">No state location configured: set <code>[mysqlcdc] state_dirs</code> '
                '(<code>AIRFLOW__MYSQLCDC__STATE_DIRS</code>) to the pipelines\' state_dir, comma-separated.</p>')
    elif not sections:
        body = f'<p class="muted">No pipeline found in {_e(", ".join(state_dirs))}.</p>'
    else:
        body = "".join(sections)
    return (f'<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="{refresh_s}">'
            f'<title>MySQL CDC pipelines</title><style>{_STYLE}</style></head><body><h1>MySQL CDC pipelines</h1>'
            f'<p class="muted">Read from {_e(", ".join(state_dirs) or "-")} at '
            f'{_e(dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))}; refreshed every '
            f'{refresh_s}s.</p>{body}</body></html>')
