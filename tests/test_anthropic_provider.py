"""What only the Anthropic module does, through the real ``anthropic`` SDK against its wire server
(tests/anthropic_wire.py): ``max_tokens``, ``error`` events, documents and tool results as context,
the ``messages.stream`` helper, the ``beta`` namespace and ``parse``, raw-response helpers, request
reading. The contract every provider keeps is in tests/test_provider_contract.py.
"""

from __future__ import annotations

import pytest

anthropic = pytest.importorskip("anthropic")
httpx2 = pytest.importorskip("httpx2")

from anthropic_wire import error_body, error_event, message, message_events, model  # noqa: E402
from fake_llm_server import Reply  # noqa: E402
from provider_cases import BOT, CONTEXT, GROUNDED, QUESTION, WEATHER, WEATHER_QUESTION, sent, weather_step  # noqa: E402

from groundlens_core.providers.anthropic import (  # noqa: E402
    DEFAULT_MAX_TOKENS,
    AnthropicProvider,
    guard_of,
    instrument,
    uninstrument,
)

MANUAL = "Oslo station manual: readings are taken every hour at the harbour."


def says(text: str):
    return model(lambda body: message(text))


@pytest.fixture
def client(fake_llm_server):
    c = anthropic.Anthropic(base_url=fake_llm_server.url, api_key="test-key", max_retries=2, timeout=60)
    yield c
    c.close()


@pytest.fixture
def aclient(fake_llm_server):
    return anthropic.AsyncAnthropic(base_url=fake_llm_server.url, api_key="test-key", max_retries=2, timeout=60)


@pytest.fixture
def guard(client, dgi_calibration):
    return AnthropicProvider(model="claude-test", client=client, calibration=dgi_calibration)



def test_the_guard_request_keeps_the_callers_max_tokens_or_sends_the_default(guard, fake_llm_server):
    fake_llm_server.add(Reply.json(message("The capital of France is Paris.")), Reply.json(message(GROUNDED)))
    guard.complete("What is the capital of France?", max_tokens=50)
    body = sent(fake_llm_server)
    assert body["max_tokens"] == 50 and "system" not in body
    guard.complete(QUESTION, context=CONTEXT, system="Be brief.")
    body = sent(fake_llm_server)
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS and body["system"] == "Be brief."


def test_an_error_event_mid_stream_is_the_sdks_error_and_an_error_step(guard, client, fake_llm_server):
    events = message_events(message(GROUNDED), piece=20)
    fake_llm_server.add(Reply.sse(events[:5] + [error_event("overloaded_error", "Overloaded")]))
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        list(guard.stream(QUESTION, context=CONTEXT))
    guard.instrument(client)
    fake_llm_server.add(Reply.sse(events[:5] + [error_event("overloaded_error", "Overloaded")]))
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        list(client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": QUESTION}],
                                    stream=True))
    steps = [t.steps[0] for t in guard.get_traces()]
    assert [(s.method, s.metadata["sdk_error"]) for s in steps] == [("error", "APIStatusError")] * 2


def _tool_conversation() -> list[dict]:
    return [
        {"role": "user", "content": [
            {"type": "document", "title": "manual", "source": {"type": "text", "media_type": "text/plain", "data": MANUAL}},
            {"type": "text", "text": WEATHER_QUESTION}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": WEATHER}]}]},
    ]


def test_instrumented_create_is_unchanged_and_recorded(client, fake_llm_server, dgi_calibration):
    text = "In Oslo it is 4 degrees Celsius with light rain and a north wind of 20 km/h."
    fake_llm_server.add(Reply.json(message(text, input_tokens=50, output_tokens=20)))
    same = instrument(client, name=BOT, calibration=dgi_calibration)
    assert same is client and guard_of(client).framework == "anthropic"

    result = client.messages.create(model="claude-test", max_tokens=300, system="You are a weather assistant.",
                                    messages=_tool_conversation(), groundlens_context="Station report, 08:00.")
    assert isinstance(result, anthropic.types.Message) and result.content[0].text == text
    body = sent(fake_llm_server)
    assert "groundlens_context" not in body and body["messages"] == _tool_conversation()  # sent as it was

    step = weather_step(guard_of(client), framework="anthropic", node="anthropic.messages", response=text, context=[
        ("document:manual", MANUAL), ("tool:get_weather", WEATHER), ("attached", "Station report, 08:00.")])
    assert (step.usage.input_tokens, step.usage.output_tokens) == (50, 20) and step.provider == "anthropic"


def test_tool_use_only_turns_are_unscored_tool_call_steps(client, fake_llm_server):
    guard = AnthropicProvider(client=client)
    guard.instrument(client)
    turn = message(None, tool_uses=[("get_weather", {"city": "Oslo"})])
    fake_llm_server.default = model(lambda body: turn)
    asked = [{"role": "user", "content": "Weather in Oslo?"}]
    result = client.messages.create(model="m", max_tokens=100, messages=asked)
    assert result.content[0].type == "tool_use" and result.stop_reason == "tool_use"
    events = list(client.messages.create(model="m", max_tokens=100, messages=asked, stream=True))
    assert [e.type for e in events if e.type == "content_block_delta"]  # input_json_delta events went through
    with client.messages.stream(model="m", max_tokens=100, messages=asked) as stream:
        assert stream.get_final_message().content[0].input == {"city": "Oslo"}
    steps = [t.steps[0] for t in guard.get_traces()]
    assert [s.kind for s in steps] == ["tool_call"] * 3 and {s.method for s in steps} == {"skipped"}
    assert all(s.metadata["tool_calls"] == ["get_weather"] and s.metadata["finish_reason"] == "tool_use" for s in steps)


async def test_messages_stream_helper_left_early_is_recorded_on_exit(client, aclient, fake_llm_server,
                                                                    dgi_calibration):
    fake_llm_server.add(Reply.sse(message_events(message(GROUNDED), piece=12)),
                        Reply.sse(message_events(message(GROUNDED), piece=12)))
    kw = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": QUESTION}]}
    guard = AnthropicProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    with client.messages.stream(**kw) as helper:
        for _text in helper.text_stream:
            break
    aguard = AnthropicProvider(client=aclient, calibration=dgi_calibration)
    aguard.instrument(aclient)
    async with aclient.messages.stream(**kw) as ahelper:
        async for _text in ahelper.text_stream:
            break
    for g in (guard, aguard):
        steps = [t.steps for t in g.get_traces()]
        assert len(steps) == 1 and len(steps[0]) == 1, steps
        step = steps[0][0]
        assert step.node == "anthropic.messages.stream" and step.metadata["stream_incomplete"] is True
        assert step.response == GROUNDED[:12]
    await aclient.close()


async def test_astream_without_an_async_client_ends_its_trace(guard, fake_llm_server):
    with pytest.raises(TypeError, match="async client"):
        await guard.astream(QUESTION)
    traces = guard.get_traces()
    assert len(traces) == 1 and traces[0].ended_at is not None
    assert traces[0].steps[0].method == "error" and "async client" in traces[0].steps[0].error
    assert fake_llm_server.requests == []


def test_a_generator_of_messages_is_sent_as_without_instrumentation(client, fake_llm_server):
    fake_llm_server.default = says(GROUNDED)

    def conversation():
        yield {"role": "user", "content": iter([{"type": "text", "text": QUESTION}])}

    client.messages.create(model="m", max_tokens=100, messages=conversation())
    bare = sent(fake_llm_server)
    guard = AnthropicProvider(client=client)
    guard.instrument(client)
    client.messages.create(model="m", max_tokens=100, messages=conversation())
    assert sent(fake_llm_server) == bare and bare["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": QUESTION}]}]
    assert guard.get_trace().steps[0].question == QUESTION


def test_instrumented_messages_stream_helper(client, fake_llm_server, dgi_calibration):
    fake_llm_server.default = says(GROUNDED)
    guard = AnthropicProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    asked = [{"role": "user", "content": QUESTION}]
    with client.messages.stream(model="m", max_tokens=100, messages=asked, groundlens_context=CONTEXT) as stream:
        assert type(stream).__name__ == "MessageStream"
        assert "".join(stream.text_stream) == GROUNDED
        assert stream.get_final_message().usage.output_tokens == 9
    with client.messages.stream(model="m", max_tokens=100, messages=asked) as stream:
        assert stream.get_final_text() == GROUNDED
    first, second = [t.steps[0] for t in guard.get_traces()]
    assert first.node == "anthropic.messages.stream" and first.method == "sgi" and first.response == GROUNDED
    assert first.context[0].source == "attached" and first.usage.output_tokens == 9
    assert second.method == "dgi" and "groundlens_context" not in sent(fake_llm_server, 0)


async def test_beta_namespace_and_parse_are_instrumented(client, aclient, fake_llm_server, dgi_calibration):
    import pydantic

    class Charge(pydantic.BaseModel):
        hours: int

    guard = AnthropicProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    kw = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": QUESTION}]}
    fake_llm_server.default = says(GROUNDED)
    beta = client.beta.messages.create(**kw, betas=["some-beta-2026-01-01"], groundlens_context=CONTEXT)
    assert type(beta).__name__ == "BetaMessage" and "some-beta" in fake_llm_server.requests[-1].headers["anthropic-beta"]
    with client.beta.messages.stream(**kw) as stream:
        assert stream.get_final_text() == GROUNDED
    fake_llm_server.default = says('{"hours": 4}')
    parsed = client.messages.parse(**kw, output_format=Charge)
    assert parsed.parsed_output == Charge(hours=4)
    steps = [t.steps[0] for t in guard.get_traces()]
    assert [s.node for s in steps] == ["anthropic.beta.messages", "anthropic.beta.messages.stream",
                                       "anthropic.messages.parse"]
    assert steps[0].method == "sgi" and steps[1].metadata["streaming"] is True and steps[2].response == '{"hours": 4}'

    fake_llm_server.default = says(GROUNDED)
    async_guard = AnthropicProvider(client=aclient, calibration=dgi_calibration)
    async_guard.instrument(aclient)
    async with aclient.beta.messages.stream(**kw) as stream:
        assert await stream.get_final_text() == GROUNDED
    assert async_guard.get_trace().steps[0].node == "anthropic.beta.messages.stream"
    await aclient.close()


async def test_a_stream_helper_that_fails_as_it_is_entered_is_the_sdks_error(fake_llm_server):
    """The helper sends its request when entered: a 500 there (after the SDK's retries) is the SDK's
    own error, bare or instrumented, sync or async, and an error step of the helper's node."""
    kw = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}

    def enter(c):
        with c.messages.stream(**kw) as s:
            return s.get_final_text()

    def make():
        return anthropic.Anthropic(base_url=fake_llm_server.url, api_key="k", max_retries=1, timeout=120)

    bare, wrapped = make(), make()
    guard = AnthropicProvider(client=wrapped)
    guard.instrument(wrapped)
    fake_llm_server.add(*[Reply.json(error_body(), status=500)] * 4)
    with pytest.raises(anthropic.InternalServerError) as expected:
        enter(bare)
    with pytest.raises(anthropic.InternalServerError) as got:
        enter(wrapped)
    assert str(got.value) == str(expected.value)
    aclient = anthropic.AsyncAnthropic(base_url=fake_llm_server.url, api_key="k", max_retries=0, timeout=120)
    aguard = AnthropicProvider(client=aclient)
    aguard.instrument(aclient)
    fake_llm_server.add(Reply.json(error_body(), status=500))
    with pytest.raises(anthropic.InternalServerError):
        async with aclient.messages.stream(**kw):
            pass
    steps = [s for g in (guard, aguard) for t in g.get_traces() for s in t.steps]
    assert [(s.node, s.method) for s in steps] == [("anthropic.messages.stream", "error")] * 2
    assert all("InternalServerError" in s.error and s.metadata["streaming"] is True for s in steps)
    await aclient.close()


def test_raw_response_helpers_pass_through_unread(client, fake_llm_server):
    fake_llm_server.default = says(GROUNDED)
    guard = AnthropicProvider(client=client)
    guard.instrument(client)
    raw = client.messages.with_raw_response.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert raw.parse().content[0].text == GROUNDED and guard.get_traces() == []
    uninstrument(client)
    assert guard_of(client) is None and "create" not in vars(client.messages) and "stream" not in vars(client.messages)
    client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert guard.get_traces() == []


def test_request_reading_edge_cases():
    """Pure reading of requests: no text anywhere, string content, search results, a cut tool input."""
    from groundlens_core.plugins.providers.anthropic import MessageEventReader, request_context, request_question

    assert request_question([]) is None and request_context([]) == []
    only_results = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "42"}]}]
    assert request_question(only_results) is None
    assert [(p.source, p.text) for p in request_context(only_results)] == [("tool:tool", "42")]
    searched = [{"role": "user", "content": [
        {"type": "search_result", "source": "https://example.invalid/a", "title": "A",
         "content": [{"type": "text", "text": "Result text."}]},
        {"type": "text", "text": "Summarize."}]}]
    assert request_question(searched) == "Summarize."
    assert [p.source for p in request_context(searched)] == ["search_result:https://example.invalid/a"]
    reader = MessageEventReader()
    for event in [{"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "name": "f", "input": {}}},
                  {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"a": '}}]:
        reader.add(event)
    assert reader.completion().tool_calls == ("f",) and reader.completion().only_tool_calls


