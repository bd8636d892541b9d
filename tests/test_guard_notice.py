"""A provider guard against a service notice: an answer that tells the user to go ahead with what the
notice calls off is flagged, through the real ``openai`` SDK against its wire server."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai")

from openai_wire import chat_reply  # noqa: E402

from groundlens_core.providers.openai import OpenAIProvider  # noqa: E402

FERRY_NOTICE = (
    "Service notice, Saturday 14 March: because of the storm warning, all crossings between Kirkwall and "
    "Stromness are suspended until 14:00. The 07:40, 09:15 and 11:30 departures will not run. Services "
    "resume with the 14:30 departure. Tickets for cancelled crossings are refunded in full."
)
QUESTION = "I take the 07:40 ferry from Kirkwall to Stromness every Saturday. Anything I should know for 14 March?"


@pytest.mark.parametrize(
    "wrong",
    [
        "No changes: take the 07:40 ferry as usual on Saturday 14 March.",
        "Take the 07:40 ferry as usual.",
    ],
)
def test_a_guard_flags_an_answer_that_goes_ahead_with_a_cancelled_departure(fake_llm_server, wrong):
    client = openai.OpenAI(base_url=fake_llm_server.url + "/v1", api_key="test-key", max_retries=0, timeout=60)
    guard = OpenAIProvider(model="gpt-4o-mini", client=client)
    fake_llm_server.add(chat_reply(wrong))
    flagged = guard.complete(QUESTION, context=FERRY_NOTICE)
    fake_llm_server.add(chat_reply("The 07:40 crossing will not run that day; the first ferry leaves at 14:30."))
    right = guard.complete(QUESTION, context=FERRY_NOTICE)
    client.close()
    assert flagged.groundlens_result.triage == "flagged", flagged.groundlens_result.explanation
    assert "07:40" in flagged.groundlens_result.decision.reason
    assert right.groundlens_result.triage != "flagged", right.groundlens_result.explanation
