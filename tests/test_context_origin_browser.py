"""The report in headless Chromium: each evidence sentence's best passage names the context piece it
lies in and links the step that produced that piece, as text (see test_html_browser.py)."""

from __future__ import annotations

import pytest
from test_html_browser import PAYLOADS, Page, browser  # noqa: F401  (browser: the module's fixture)

from groundlens_core.trace import CallRecord, ContextPiece, Recorder
from groundlens_core.trace.html import write_html

pytestmark = pytest.mark.slow

EIFFEL = "The Eiffel Tower in Paris is 330 metres tall, including its antennas."
OPENED = "The tower was completed in 1889 for the World's Fair."


def test_a_passage_names_its_piece_and_links_the_step_that_produced_it(browser, tmp_path):  # noqa: F811
    rec = Recorder("test", name="origin")
    tool_id = rec.record(CallRecord("run", "search", kind="tool", question="eiffel", response='{"height_m": 330}'))
    context = [ContextPiece(EIFFEL, "tool:search", producer=tool_id), ContextPiece(OPENED, PAYLOADS[1])]
    answer = "The Eiffel Tower is 330 metres tall. It was completed in 1889."
    answer_id = rec.record(CallRecord("run", "answer", question="How tall is it?", context=context, response=answer))
    rec.end_trace("run")
    page = Page(browser, write_html(rec.get_trace("run"), tmp_path / "origin.html"))
    try:
        page.page.locator(f'#gl-rows tr.gl-row[data-id="{answer_id}"] .gl-toggle').click()
        page.page.locator("#gl-rows .gl-ev-details summary").click()
        pieces = page.page.locator("#gl-rows .gl-ev-piece")
        assert pieces.count() == 2
        assert pieces.nth(0).inner_text().startswith("in context piece 1 (tool:search)")
        assert pieces.nth(0).locator("button.gl-goto").count() == 1  # to the tool step
        # a source label that is markup is shown as text; its piece has no producer: no link
        assert pieces.nth(1).inner_text() == f"in context piece 2 ({PAYLOADS[1]})"
        assert pieces.nth(1).locator("button, img").count() == 0
        pieces.nth(0).locator("button.gl-goto").click()
        assert page.page.locator(f'#gl-rows tr.gl-row[data-id="{tool_id}"]').count() == 1
        page.assert_clean()
    finally:
        page.page.close()
