"""The full results of the rows a run's HTML report may show, kept while the run scores them.

The report of ``evaluate --html`` shows the riskiest ``html_rows`` rows with their details (the
explanation, distances, fingerprint), which the written cells do not hold. Without these results
the report would score those rows a second time; kept, it scores only the rows no result was kept
for (scored by an earlier process of a resumed run, or by Ray workers, which send cells only).

At most ``html_rows`` results are held: after each chunk only the rows that are still among the
riskiest ``html_rows`` seen so far stay. The order is the one of
:func:`~groundlens_core.batch.final_output.risk_order` over the keys file: the band and normalized
score of a row come from :func:`~groundlens_core.batch.partial_output.row_keys`, the function that
makes its record in that file, and ties go to the earlier row, as the stable sort there has them.
Being a total order, the riskiest ``n`` of all rows are among the riskiest ``n`` kept from each
earlier chunk plus the next chunk, so every shown row this process scored has its result here.
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

import numpy as np

#: what is held per candidate row: the two fields of its record in the keys file, and its row number
_CANDIDATE = np.dtype([("band", "i1"), ("norm", "<f8"), ("row", "<i8")])


def item_digest(item: Mapping[str, Any]) -> bytes:
    """A digest of the texts a row was scored on: a kept result is used only for the very row the
    report reads back (a text the output cannot hold as it came, such as a lone surrogate, reads back
    otherwise, and the report then scores what it shows, as it always did)."""
    text = repr(sorted(item.items(), key=lambda kv: str(kv[0])))
    return hashlib.blake2b(text.encode("utf-8", "backslashreplace"), digest_size=16).digest()


class RiskiestKeeper:
    """The results of the riskiest ``limit`` rows scored so far, with the digest of each row's texts."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, int(limit))
        self._candidates = np.zeros(0, _CANDIDATE)
        self._kept: dict[int, tuple[bytes, Any]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def offer(self, first_row: int, keys: np.ndarray, items: Sequence[Any], results: Sequence[Any]) -> None:
        """Rows ``first_row`` on, by their keys records (:func:`~groundlens_core.batch.partial_output.row_keys`
        of the rows as written: what the keys file records), with the items they were scored on and
        their results; keeps those still among the riskiest."""
        if not self.limit or not len(keys):
            return
        new = np.zeros(len(keys), _CANDIDATE)
        new["band"], new["norm"] = keys["band"], keys["norm"]
        new["row"] = np.arange(first_row, first_row + len(keys))
        pool = np.concatenate([self._candidates, new])
        self._candidates = pool[np.lexsort((pool["row"], pool["norm"], pool["band"]))[: self.limit]]
        staying = set(self._candidates["row"].tolist())
        self._kept = {row: kept for row, kept in self._kept.items() if row in staying}
        for k, (item, res) in enumerate(zip(items, results)):
            row = first_row + k
            if row in staying and _full(res):
                self._kept[row] = (item_digest(item), res)

    def result_for(self, row: int, item: Mapping[str, Any]) -> Any | None:
        """The kept result of ``row`` when it was scored on ``item``; else None (score it)."""
        kept = self._kept.get(int(row))
        if kept is None or kept[0] != item_digest(item):
            return None
        return kept[1]


def _full(res: Any) -> bool:
    """A result object with its details; not a row of cells (Ray) nor an error (the report shows the
    error the output recorded)."""
    return res is not None and not isinstance(res, Mapping) and getattr(res, "method", "error") != "error"
