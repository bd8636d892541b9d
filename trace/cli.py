"""The trace package's ``groundlens`` commands: ``report`` renders saved trace JSON as HTML.

Registered in the ``groundlens_core.commands`` entry point group, so the core CLI offers them
without importing this package.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from groundlens_core.errors import GroundlensInputError, printable
from groundlens_core.json_input import loads


def add_commands(sub: Any) -> None:
    """Add ``report`` to the ``groundlens`` subparsers ``sub``."""
    s = sub.add_parser("report", help="render saved trace JSON file(s) as an HTML triage report")
    s.add_argument("traces", nargs="+", help="saved trace JSON files (trace.save(), one trace or a list each)")
    s.add_argument("--output", "-o", required=True, help="the HTML file to write (a new file or an HTML report)")
    s.add_argument(
        "--title", default=None, help='the report\'s title (default: "groundlens triage: <trace>" or "<n> traces")'
    )
    s.add_argument("--redact", action="store_true", help="show hashes and lengths instead of text")
    s.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from groundlens_core.outputs import check_html_target, check_target
    from groundlens_core.trace.html import write_html

    check_target(args.output, what="the report", inputs=args.traces)
    check_html_target(args.output, what="the report")
    traces = [t for p in args.traces for t in read_traces(Path(p))]
    write_html(traces, args.output, title=args.title, redact=args.redact)
    print(printable(f"wrote {args.output} ({sum(len(t.steps) for t in traces)} steps from {len(traces)} trace(s))"))
    return 0


def read_traces(path: Path) -> list[Any]:
    """The traces of one saved JSON file (one trace or a list), or a one-line error naming the file."""
    from groundlens_core.outputs import special_kind
    from groundlens_core.trace.model import Trace

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
