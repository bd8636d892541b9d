"""The trace package's ``groundlens`` commands: ``report`` renders saved trace JSON as HTML.

Registered in the ``groundlens_core.commands`` entry point group, so the core CLI offers them
without importing this package.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from groundlens_core.errors import GroundlensInputError


def add_commands(sub: Any) -> None:
    """Add ``report`` to the ``groundlens`` subparsers ``sub``."""
    s = sub.add_parser("report", help="render saved trace JSON file(s) as an HTML triage report")
    s.add_argument("traces", nargs="+")
    s.add_argument("--output", "-o", required=True)
    s.add_argument("--title", default=None)
    s.add_argument("--redact", action="store_true", help="show hashes and lengths instead of text")
    s.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from groundlens_core.outputs import check_html_target, check_target
    from groundlens_core.trace.html import write_html

    check_target(args.output, what="the report", inputs=args.traces)
    check_html_target(args.output, what="the report")
    traces = [t for p in args.traces for t in read_traces(Path(p))]
    write_html(traces, args.output, title=args.title, redact=args.redact)
    print(f"wrote {args.output} ({sum(len(t.steps) for t in traces)} steps from {len(traces)} trace(s))")
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
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise GroundlensInputError(f"{path} is not a groundlens trace: JSON nested too deeply") from None
    except ValueError as exc:  # not UTF-8, invalid JSON, or an integer too long to convert
        raise GroundlensInputError(f"{path} is not a JSON trace: {exc}") from None
    items = data if isinstance(data, list) else [data]
    try:
        return [Trace.from_dict(d) for d in items]
    except (KeyError, TypeError, ValueError) as exc:
        why = f"missing the field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise GroundlensInputError(f"{path} is not a groundlens trace: {why}") from None
