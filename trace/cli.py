"""The trace package's ``groundlens`` commands: ``report`` renders saved trace JSON as HTML,
``traces`` scores the LLM spans a tracing backend already stores (docs/traces.md).

Registered in the ``groundlens_core.commands`` entry point group, so the core CLI offers them
without importing this package.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from groundlens_core.batch.json_input import loads
from groundlens_core.errors import GroundlensInputError, printable


def add_commands(sub: Any) -> None:
    """Add ``report`` and ``traces`` to the ``groundlens`` subparsers ``sub``."""
    s = sub.add_parser("report", help="render saved trace JSON file(s) as an HTML triage report")
    s.add_argument("traces", nargs="+", help="saved trace JSON files (trace.save(), one trace or a list each)")
    s.add_argument("--output", "-o", required=True, help="the HTML file to write (a new file or an HTML report)")
    s.add_argument(
        "--title", default=None, help='the report\'s title (default: "groundlens triage: <trace>" or "<n> traces")'
    )
    s.add_argument("--redact", action="store_true", help="show hashes and lengths instead of text")
    s.set_defaults(func=cmd_report)
    add_traces_command(sub)


def cmd_report(args: argparse.Namespace) -> int:
    from groundlens_core.batch.outputs import check_html_target, check_target
    from groundlens_core.trace.html import write_html

    check_target(args.output, what="the report", inputs=args.traces)
    check_html_target(args.output, what="the report")
    traces = [t for p in args.traces for t in read_traces(Path(p))]
    write_html(traces, args.output, title=args.title, redact=args.redact)
    print(printable(f"wrote {args.output} ({sum(len(t.steps) for t in traces)} steps from {len(traces)} trace(s))"))
    return 0


def read_traces(path: Path) -> list[Any]:
    """The traces of one saved JSON file (one trace or a list), or a one-line error naming the file."""
    from groundlens_core.batch.outputs import special_kind
    from groundlens_core.trace.model import Trace, json_schema
    from groundlens_core.trace.schema_check import schema_problem

    kind = special_kind(path)
    if kind is not None:
        raise GroundlensInputError(f"trace file {path} is {kind}, not a JSON file")
    if not path.is_file():
        raise GroundlensInputError(f"trace file not found: {path}")
    data = loads(path.read_bytes(), name=str(path))  # one line naming the file: deep, invalid, huge numbers
    items = data if isinstance(data, list) else [data]
    try:
        traces = [Trace.from_dict(d) for d in items]
    except (KeyError, TypeError, ValueError) as exc:
        why = f"missing the field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise GroundlensInputError(f"{path} is not a groundlens trace: {why}") from None
    schema = json_schema()
    for i, d in enumerate(items):  # and what reading lets pass: every field the format requires, in range
        problem = schema_problem(d, schema)
        if problem is not None:
            where = f" (trace {i + 1} of {len(items)})" if isinstance(data, list) else ""
            raise GroundlensInputError(f"{path} is not a groundlens trace{where}: {problem}")
    return traces


#: the entry point group of the stored-span sources that need a vendor SDK (plugins/ registers
#: ``phoenix`` and ``langfuse``): each entry is a module with ``open_source(args)`` and
#: ``open_writer(args, name)``, so this package never imports plugins/
SPAN_SOURCES_GROUP = "groundlens_core.span_sources"
TRACE_SOURCES = ("phoenix", "langfuse", "otlp")


def add_traces_command(sub: Any) -> None:
    """Add ``traces``: score what a Phoenix project, Langfuse or OTLP JSON files already store."""
    s = sub.add_parser(
        "traces",
        help="score the LLM spans already stored in Phoenix, Langfuse or OTLP JSON files, and write the scores back",
    )
    s.add_argument("source", choices=TRACE_SOURCES, help="where the spans are stored")
    s.add_argument(
        "files", nargs="*", help="otlp: the OTLP JSON lines files (an OpenTelemetry Collector's file exporter)"
    )
    s.add_argument("--project", default=None, help="phoenix: the project's name (default: PHOENIX_PROJECT_NAME)")
    s.add_argument(
        "--url",
        default=None,
        help="the server (default: Phoenix PHOENIX_COLLECTOR_ENDPOINT or localhost:6006; Langfuse LANGFUSE_HOST)",
    )
    s.add_argument(
        "--since", default=None, help="score spans that started at or after this time (ISO 8601, or 24h, 7d ago)"
    )
    s.add_argument("--until", default=None, help="score spans that started before this time (ISO 8601, or 90m ago)")
    s.add_argument("--name", action="append", default=None, help="score only spans of this name (repeat for several)")
    s.add_argument(
        "--kind", action="append", default=None, help="score spans of this kind (default LLM; repeat for several)"
    )
    s.add_argument(
        "--sample", type=float, default=1.0, help="score this share of traces, chosen by trace id (0.1: one in ten)"
    )
    s.add_argument(
        "--state",
        default=None,
        help="a state file: a run resumes where the last one stopped, and scores only what is new",
    )
    s.add_argument(
        "--write",
        action="append",
        choices=("phoenix", "langfuse", "none"),
        default=None,
        help="where scores go: Phoenix span annotations, Langfuse scores (default: back to the source; none: nowhere)",
    )
    s.add_argument("--output", "-o", default=None, help="also write one JSON line per span to this file")
    s.add_argument(
        "--score-name", default="groundlens", help="the name of the annotation or score (default groundlens)"
    )
    s.add_argument("--page-size", type=int, default=200, help="spans read per request (default 200, at most 1000)")
    s.add_argument("--limit", type=int, default=None, help="stop after the page that reaches this many spans")
    s.add_argument(
        "--long-context",
        choices=("mean", "nearest"),
        default=None,
        help="a context longer than the model reads: mean = the pieces' average, nearest = the piece nearest it",
    )
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.set_defaults(func=cmd_traces)


def _vendor(name: str) -> Any:
    """The plugin module of a vendor source (entry point group :data:`SPAN_SOURCES_GROUP`)."""
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group=SPAN_SOURCES_GROUP) if ep.name == name]
    if not found:
        raise GroundlensInputError(
            f"no {name} source is installed (groundlens_core.plugins registers one): reinstall groundlens-core"
        )
    return found[0].load()


def cmd_traces(args: argparse.Namespace) -> int:
    import json
    import math
    import os

    from groundlens_core.batch.outputs import check_target
    from groundlens_core.trace.sources.job import Filters, parse_time, run

    if isinstance(args.sample, float) and (math.isnan(args.sample) or not 0.0 <= args.sample <= 1.0):
        raise GroundlensInputError(f"--sample is the share of traces to score, in [0, 1]; got {args.sample}")
    if args.page_size < 1 or (args.limit is not None and args.limit < 1):
        raise GroundlensInputError("--page-size and --limit take a whole number of at least 1")
    if args.source == "otlp" and not args.files:
        raise GroundlensInputError("groundlens traces otlp needs the OTLP JSON files to read")
    if args.source != "otlp" and args.files:
        raise GroundlensInputError(f"groundlens traces {args.source} reads no files; files are for otlp")
    if args.source == "phoenix" and not args.project:
        args.project = os.environ.get("PHOENIX_PROJECT_NAME") or None
    now = None
    filters = Filters(
        kinds=tuple(dict.fromkeys(k.strip().upper() for k in (args.kind or ["LLM"]))),
        names=frozenset(args.name) if args.name else None,
        since=None if args.since is None else parse_time(args.since, now=now),
        until=None if args.until is None else parse_time(args.until, now=now),
        sample=float(args.sample),
    )
    if filters.since is not None and filters.until is not None and filters.until <= filters.since:
        raise GroundlensInputError("--until must come after --since")
    output = None if args.output is None else check_target(args.output, what="the output", inputs=args.files)
    state = None if args.state is None else check_target(args.state, what="the state file", inputs=args.files)

    if args.source == "otlp":
        from groundlens_core.trace.sources.otlp_files import OtlpFiles

        source: Any = OtlpFiles([Path(p) for p in args.files], page_size=args.page_size)
    else:
        source = _vendor(args.source).open_source(args)
    targets = args.write or ([] if args.source == "otlp" else [args.source])
    writers = [_vendor(t).open_writer(args, args.score_name) for t in dict.fromkeys(targets) if t != "none"]
    if not writers and output is None:
        raise GroundlensInputError("nothing would be written: give --output FILE or --write phoenix|langfuse")
    options: dict[str, Any] = {"long_context": args.long_context} if args.long_context else {}
    summary = run(
        source,
        filters,
        writers=writers,
        output=output,
        state=state,
        score_name=args.score_name,
        options=options,
        limit=args.limit,
    )
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2, sort_keys=True))
    else:
        for line in summary.text().splitlines():
            print(printable(line))
    return 1 if summary.stopped else 0
