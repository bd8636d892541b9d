"""What the trace package adds to the core, found through entry points so the core never imports it.

The core (scoring, the file job, the CLI) sits below ``groundlens_core.trace``; the trace package
registers its CLI commands (``groundlens report``) and the writer of ``evaluate --html`` in the
entry point groups below (see pyproject.toml and docs/architecture.md).
"""

from __future__ import annotations

from functools import cache
from typing import Any, Callable

from groundlens_core.errors import GroundlensInputError

#: each entry is ``add(subparsers)``: it adds its commands to the ``groundlens`` parser
COMMANDS_GROUP = "groundlens_core.commands"
#: one entry: ``write(job, info, out_kind, paths, keys, schema, *, emb, calibration, kept=None) -> rows
#: shown``; ``kept``: the results the run kept for its riskiest rows, so they are not scored again
BATCH_HTML_GROUP = "groundlens_core.batch_html"


@cache
def command_adders() -> tuple[Callable[[Any], None], ...]:
    """The installed command adders, in the order of their entry point names."""
    from importlib.metadata import entry_points  # on use: importing the core stays cheap

    return tuple(ep.load() for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name))


def batch_html_writer() -> Callable[..., int]:
    """The installed writer of a batch's HTML report, or a one-line error if there is none."""
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=BATCH_HTML_GROUP), key=lambda ep: ep.name)
    if not found:
        raise GroundlensInputError(
            "no HTML report writer is installed (groundlens_core.trace registers one): reinstall groundlens-core"
        )
    return found[0].load()
