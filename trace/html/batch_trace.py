"""A batch of scored rows as a Trace, so a CSV gets the same HTML report as an agent run."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from groundlens_core.trace.model import ContextPiece, Step, Trace, new_id, utc_now


def trace_from_batch(
    rows: Sequence[Mapping[str, Any]],
    items: Sequence[Mapping[str, Any]],
    results: Sequence[Any],
    *,
    name: str = "batch",
) -> Trace:
    """One step per row (node = the row's ``node`` column, else ``row <n>``)."""
    now = utc_now()
    trace = Trace(id=new_id(), name=name, framework="batch", started_at=now, ended_at=now, metadata={"rows": len(rows)})
    for i, (row, item, res) in enumerate(zip(rows, items, results)):
        ctx = item.get("context")
        pieces = (ContextPiece(text=ctx, source="column:context"),) if isinstance(ctx, str) and ctx.strip() else ()
        is_error = res.method == "error"
        result = None if is_error else res
        trace.steps.append(
            Step(
                id=f"row-{i}",
                index=i,
                node=str(row.get("node") or f"row {i + 1}"),
                kind="llm",
                method=res.method,
                result=result,
                triage="error" if is_error else res.triage,
                question=item.get("question") if isinstance(item.get("question"), str) else None,
                context=pieces,
                response=item.get("response") if isinstance(item.get("response"), str) else None,
                error=res.error if is_error else None,
                metadata={"row": i},
            )
        )
        if result is not None and trace.fingerprint is None:
            trace.fingerprint = result.fingerprint
    return trace
