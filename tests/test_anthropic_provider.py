"""The Anthropic guard and instrumented client, through the real ``anthropic`` SDK against a local server.

The server (tests/fake_llm_server.py) speaks the Messages API (tests/anthropic_wire.py): JSON
messages and named SSE events. The client is the SDK's own, with its own transport, retries, SSE
decoder and error mapping. Scores come from the real embedder.
"""

from __future__ import annotations

import logging
import threading

import pytest

anthropic = pytest.importorskip("anthropic")
httpx2 = pytest.importorskip("httpx2")

from anthropic_wire import error_body, error_event, message, message_events, model  # noqa: E402
from fake_llm_server import Reply  # noqa: E402

from groundlens_core.providers import ProviderResponse  # noqa: E402
from groundlens_core.providers.anthropic import (  # noqa: E402
    DEFAULT_MAX_TOKENS,
    AnthropicProvider,
    GroundlensFlaggedError,
    guard_of,
    instrument,
    uninstrument,
    using_context,
)
from groundlens_core.results import DGIResult, SGIResult  # noqa: E402

CONTEXT = ("The Aurora-7 battery pack stores 12 kWh and charges fully in 4 hours from a 240 V outlet. "
           "It carries a 10-year warranty.")
QUESTION = "How long does the Aurora-7 take to charge?"
GROUNDED = "It charges fully in 4 hours from a 240 V outlet; the 12 kWh pack has a 10-year warranty."
FLAGGED = "The Aurora-7 takes about 30 minutes to charge with the included solar panel."
WEATHER = "Weather in Oslo: 4 degrees Celsius, light rain, wind 20 km/h from the north."
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


def _sent(server, i: int = -1) -> dict:
    return server.requests[i].json


# ---------------------------------------------------------------- the guard call


def test_complete_with_context_scores_sgi_and_returns_the_sdk_message(guard, fake_llm_server):
    fake_llm_server.add(Reply.json(message(GROUNDED, input_tokens=40, output_tokens=17)))
    got = guard.complete(QUESTION, context=CONTEXT, system="Be brief.", stop_sequences=["END"])

    assert isinstance(got, ProviderResponse) and isinstance(got.raw, anthropic.types.Message)
    assert got.text == GROUNDED and got.model == "claude-test" and got.finish_reason == "end_turn"
    assert (got.usage.input_tokens, got.usage.output_tokens, got.usage.total_tokens) == (40, 17, 57)
    assert isinstance(got.groundlens_score, SGIResult) and got.triage == "trusted" and got.scoring_error is None

    body = _sent(fake_llm_server)  # the documented request: system top-level, context in <context> tags
    assert fake_llm_server.requests[-1].path == "/v1/messages"
    assert body["model"] == "claude-test" and body["system"] == "Be brief." and body["stop_sequences"] == ["END"]
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS and "stream" not in body
    [user] = body["messages"]
    assert user["role"] == "user" and user["content"].endswith(QUESTION)
    assert f"<context>\n{CONTEXT}\n</context>" in user["content"]

    step = guard.get_trace().steps[0]
    assert step.question == QUESTION and step.method == "sgi" and step.provider == "anthropic"
    assert step.node == "anthropic.messages" and step.metadata["finish_reason"] == "end_turn"
    assert step.score.value == pytest.approx(got.groundlens_score.value)


def test_complete_without_context_scores_dgi_and_keeps_the_callers_max_tokens(guard, fake_llm_server):
    fake_llm_server.add(Reply.json(message("The capital of France is Paris.")))
    got = guard.complete("Answer in one sentence: what is the capital of France?",
                         question="What is the capital of France?", max_tokens=50)
    assert isinstance(got.groundlens_score, DGIResult)
    body = _sent(fake_llm_server)
    assert body["max_tokens"] == 50 and "<context>" not in body["messages"][0]["content"] and "system" not in body
    assert guard.get_trace().steps[0].question == "What is the capital of France?"


def test_guard_modes(client, fake_llm_server, dgi_calibration):
    fake_llm_server.default = says(FLAGGED)
    seen = []
    callback = AnthropicProvider(model="m", client=client, calibration=dgi_calibration,
                                 on_flagged=lambda inline, response: seen.append(response))
    flagged = callback.complete(QUESTION, context=CONTEXT)
    assert flagged.flagged and seen == [flagged]

    strict = AnthropicProvider(model="m", client=client, calibration=dgi_calibration, mode="raise")
    with pytest.raises(GroundlensFlaggedError) as caught:
        strict.complete(QUESTION, context=CONTEXT)
    assert caught.value.score.flagged and caught.value.response.text == FLAGGED
    assert strict.get_trace().steps[0].triage == "flagged" and strict.get_trace().status == "error"
    fake_llm_server.default = says(GROUNDED)
    assert not strict.complete(QUESTION, context=CONTEXT).flagged


def test_http_500_is_the_sdks_own_error_and_an_error_step(guard, fake_llm_server):
    fake_llm_server.add(*[Reply.json(error_body("api_error", "the server fell over"), status=500)] * 3)
    with pytest.raises(anthropic.InternalServerError) as caught:
        guard.complete(QUESTION, context=CONTEXT)
    assert caught.value.status_code == 500 and len(fake_llm_server.requests) == 3  # max_retries=2
    step = guard.get_trace().steps[0]
    assert step.method == "error" and "InternalServerError" in step.error and guard.get_trace().status == "error"


def test_a_429_is_retried_by_the_sdk_and_recorded_once(guard, fake_llm_server):
    fake_llm_server.add(Reply.json(error_body("rate_limit_error", "slow down"), status=429,
                                   headers={"retry-after-ms": "10"}),
                        Reply.json(message(GROUNDED)))
    assert guard.complete(QUESTION, context=CONTEXT).text == GROUNDED
    assert len(fake_llm_server.requests) == 2 and [s.method for s in guard.get_trace().steps] == ["sgi"]


def test_stream_yields_chunks_then_the_scored_response(guard, fake_llm_server):
    fake_llm_server.add(Reply.sse(message_events(message(GROUNDED, input_tokens=30, output_tokens=11), piece=20)))
    stream = guard.stream(QUESTION, context=CONTEXT)
    chunks = list(stream)
    assert len(chunks) > 1 and "".join(chunks) == GROUNDED and isinstance(stream.raw, anthropic.Stream)
    got = stream.response
    assert isinstance(got.groundlens_score, SGIResult) and got.finish_reason == "end_turn"
    assert (got.usage.input_tokens, got.usage.output_tokens) == (30, 11)  # message_start, then message_delta
    assert _sent(fake_llm_server)["stream"] is True
    assert guard.get_trace().steps[0].metadata["streaming"] is True


def test_stream_cut_midway_or_an_error_event_raise_the_sdks_error(guard, fake_llm_server):
    fake_llm_server.add(Reply.sse(message_events(message(GROUNDED), piece=20), cut_after=4))
    got = []
    with pytest.raises(httpx2.RemoteProtocolError):
        for text in guard.stream(QUESTION, context=CONTEXT):
            got.append(text)
    assert got == [GROUNDED[:20]]
    step = guard.get_trace().steps[0]
    assert step.method == "error" and "RemoteProtocolError" in step.error and step.response == GROUNDED[:20]

    events = message_events(message(GROUNDED), piece=20)
    fake_llm_server.add(Reply.sse(events[:5] + [error_event("overloaded_error", "Overloaded")]))
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        list(guard.stream(QUESTION, context=CONTEXT))
    assert guard.get_traces()[-1].steps[0].metadata["sdk_error"] == "APIStatusError"


async def test_acomplete_and_astream_with_the_async_client(aclient, fake_llm_server, dgi_calibration):
    fake_llm_server.default = says(GROUNDED)
    guard = AnthropicProvider(model="m", client=aclient, calibration=dgi_calibration)
    got = await guard.acomplete(QUESTION, context=CONTEXT)
    assert got.text == GROUNDED and isinstance(got.raw, anthropic.types.Message) and got.triage == "trusted"
    stream = await guard.astream(QUESTION, context=CONTEXT)
    assert "".join([c async for c in stream]) == GROUNDED and isinstance(stream.raw, anthropic.AsyncStream)
    assert stream.response.triage == "trusted"
    fake_llm_server.add(*[Reply.json(error_body(), status=500)] * 3)
    with pytest.raises(anthropic.InternalServerError):
        await guard.acomplete(QUESTION)
    assert [t.steps[0].method for t in guard.get_traces()] == ["sgi", "sgi", "error"]
    await aclient.close()


def test_client_kwargs_make_the_client(fake_llm_server, dgi_calibration):
    fake_llm_server.add(Reply.json(message(GROUNDED)))
    guard = AnthropicProvider(model="m", base_url=fake_llm_server.url, api_key="from-kwargs", max_retries=0,
                              calibration=dgi_calibration)
    assert guard.complete(QUESTION).text == GROUNDED
    assert "from-kwargs" in fake_llm_server.requests[-1].headers["authorization"]


# ---------------------------------------------------------------- instrumented clients


def _tool_conversation() -> list[dict]:
    return [
        {"role": "user", "content": [
            {"type": "document", "title": "manual", "source": {"type": "text", "media_type": "text/plain", "data": MANUAL}},
            {"type": "text", "text": "What is the weather in Oslo?"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": WEATHER}]}]},
    ]


def test_instrumented_create_is_unchanged_and_recorded(client, fake_llm_server, dgi_calibration):
    text = "In Oslo it is 4 degrees Celsius with light rain and a north wind of 20 km/h."
    fake_llm_server.add(Reply.json(message(text, input_tokens=50, output_tokens=20)))
    same = instrument(client, name="weather-bot", calibration=dgi_calibration)
    assert same is client and guard_of(client).framework == "anthropic"

    result = client.messages.create(model="claude-test", max_tokens=300, system="You are a weather assistant.",
                                    messages=_tool_conversation(), groundlens_context="Station report, 08:00.")
    assert isinstance(result, anthropic.types.Message) and result.content[0].text == text
    body = _sent(fake_llm_server)
    assert "groundlens_context" not in body and body["messages"] == _tool_conversation()  # sent as it was

    trace = guard_of(client).get_trace()
    assert trace.name == "weather-bot" and trace.framework == "anthropic"
    step = trace.steps[0]
    assert step.kind == "llm" and step.method == "sgi" and step.node == "anthropic.messages"
    assert step.question == "What is the weather in Oslo?" and step.response == text
    assert [(c.source, c.text) for c in step.context] == [
        ("document:manual", MANUAL), ("tool:get_weather", WEATHER), ("attached", "Station report, 08:00.")]
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


def test_instrumented_create_stream_is_the_sdks_stream(client, fake_llm_server, dgi_calibration):
    fake_llm_server.add(Reply.sse(message_events(message(GROUNDED, input_tokens=12, output_tokens=6))))
    guard = AnthropicProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    stream = client.messages.create(model="m", max_tokens=100, messages=[{"role": "user", "content": QUESTION}],
                                    stream=True, groundlens_context=CONTEXT)
    assert isinstance(stream, anthropic.Stream)
    events = list(stream)
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == GROUNDED
    step = guard.get_trace().steps[0]
    assert step.method == "sgi" and step.response == GROUNDED and step.usage.output_tokens == 6
    assert step.metadata["stream"] is True and step.metadata["finish_reason"] == "end_turn"


def test_instrumented_create_stream_left_in_a_with_block_is_recorded_on_exit(client, fake_llm_server,
                                                                            dgi_calibration):
    fake_llm_server.add(Reply.sse(message_events(message(GROUNDED), piece=12)))
    guard = AnthropicProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    with client.messages.create(model="m", max_tokens=100, messages=[{"role": "user", "content": QUESTION}],
                                stream=True) as stream:
        for event in stream:
            if event.type == "content_block_delta":
                break
    assert stream.response.is_closed
    steps = [t.steps for t in guard.get_traces()]
    assert len(steps) == 1 and len(steps[0]) == 1
    assert steps[0][0].metadata["stream_incomplete"] is True and steps[0][0].response == GROUNDED[:12]


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
    bare = _sent(fake_llm_server)
    guard = AnthropicProvider(client=client)
    guard.instrument(client)
    client.messages.create(model="m", max_tokens=100, messages=conversation())
    assert _sent(fake_llm_server) == bare and bare["messages"] == [
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
    assert second.method == "dgi" and "groundlens_context" not in _sent(fake_llm_server, 0)


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


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # what a caller sees: the type and the message
        return (type(exc), str(exc))


def test_errors_are_exactly_the_sdks_with_and_without_instrumentation(fake_llm_server):
    """HTTP 500 after retries, a 400, a time-out, a cut stream, an error event, a failing
    ``messages.stream``: the same exception, bare or instrumented, and one error step each. Only the
    time-out scenario has a short time-out (per request, 0.5 s against a reply held 10 s): a
    client-wide 0.5 s turned a slow reply on a loaded machine into a time-out on one side only."""
    def make():
        return anthropic.Anthropic(base_url=fake_llm_server.url, api_key="k", max_retries=1, timeout=120)

    def scenarios(c):
        kw = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
        events = message_events(message("a b c d e f g h"), piece=2)
        yield [Reply.json(error_body(), status=500)] * 2, lambda: c.messages.create(**kw)
        yield [Reply.json(error_body("invalid_request_error", "bad"), status=400)], lambda: c.messages.create(**kw)
        yield [Reply.json(message("late"), delay=10)] * 2, lambda: c.messages.create(**kw, timeout=0.5)
        yield [Reply.sse(events, cut_after=4)], lambda: list(c.messages.create(**kw, stream=True))
        yield [Reply.sse(events[:4] + [error_event()])], lambda: list(c.messages.create(**kw, stream=True))

        def helper():
            with c.messages.stream(**kw) as s:
                return s.get_final_text()

        yield [Reply.json(error_body(), status=500)] * 2, helper

    bare, wrapped = make(), make()
    guard = AnthropicProvider(client=wrapped)
    guard.instrument(wrapped)
    for (replies, call_bare), (_, call_wrapped) in zip(scenarios(bare), scenarios(wrapped)):
        fake_llm_server.add(*replies)
        expected = _outcome(call_bare)
        fake_llm_server.add(*replies)
        got = _outcome(call_wrapped)
        assert expected[0] != "ok" and got == expected
    steps = [s for t in guard.get_traces() for s in t.steps]
    assert [s.method for s in steps] == ["error"] * 6
    assert steps[-1].node == "anthropic.messages.stream" and "InternalServerError" in steps[-1].error


async def test_instrumented_async_client(aclient, fake_llm_server, dgi_calibration):
    fake_llm_server.default = says(GROUNDED)
    guard = AnthropicProvider(client=aclient, calibration=dgi_calibration)
    assert guard.instrument() is aclient
    kw = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": QUESTION}]}
    result = await aclient.messages.create(**kw, groundlens_context=CONTEXT)
    assert result.content[0].text == GROUNDED
    stream = await aclient.messages.create(**kw, stream=True)
    assert isinstance(stream, anthropic.AsyncStream) and [e async for e in stream]
    async with aclient.messages.stream(**kw) as helper:
        assert await helper.get_final_text() == GROUNDED
    fake_llm_server.add(Reply.sse(message_events(message(GROUNDED)), cut_after=4))
    with pytest.raises(httpx2.RemoteProtocolError):
        async for _ in await aclient.messages.create(**kw, stream=True):
            pass
    fake_llm_server.add(*[Reply.json(error_body(), status=500)] * 3)
    with pytest.raises(anthropic.InternalServerError):
        async with aclient.messages.stream(**kw) as helper:
            pass
    steps = [t.steps[0] for t in guard.get_traces()]
    assert [s.method for s in steps] == ["sgi", "dgi", "dgi", "error", "error"]
    assert [s.node for s in steps][2:] == ["anthropic.messages.stream", "anthropic.messages",
                                           "anthropic.messages.stream"]
    await aclient.close()


def test_scoring_of_instrumented_calls_runs_off_the_callers_thread(client, fake_llm_server):
    from groundlens_core import get_embedder

    threads: list[str] = []

    class SpyEmbedder:
        def __init__(self, inner):
            self._inner = inner

        def encode(self, texts):
            threads.append(threading.current_thread().name)
            return self._inner.encode(texts)

        def __getattr__(self, name):
            return getattr(self._inner, name)

    fake_llm_server.default = says(GROUNDED)
    guard = AnthropicProvider(client=client, embedder=SpyEmbedder(get_embedder()))
    guard.instrument(client)
    client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": QUESTION}])
    with client.messages.stream(model="m", max_tokens=10, messages=[{"role": "user", "content": QUESTION}]) as s:
        s.until_done()
    assert [t.steps[0].method for t in guard.get_traces()] == ["dgi", "dgi"]
    assert threads and threading.current_thread().name not in threads


def test_our_failure_never_breaks_an_instrumented_call(client, fake_llm_server, caplog):
    fake_llm_server.default = says(GROUNDED)
    guard = AnthropicProvider(client=client)
    guard.instrument(client)

    def broken(*args, **kwargs):
        raise RuntimeError("reader bug")

    guard._stream_reader = broken  # our own code fails while the stream is handed over
    with caplog.at_level(logging.WARNING, logger="groundlens"):
        with client.messages.stream(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as s:
            assert s.get_final_text() == GROUNDED
    assert any("reader bug" in r.getMessage() for r in caplog.records)
    assert [s.method for t in guard.get_traces() for s in t.steps] == ["error"]


def test_uninstrument_and_raw_response_helpers_pass_through(client, fake_llm_server):
    fake_llm_server.default = says(GROUNDED)
    guard = AnthropicProvider(client=client)
    guard.instrument(client)
    raw = client.messages.with_raw_response.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert raw.parse().content[0].text == GROUNDED and guard.get_traces() == []
    uninstrument(client)
    assert guard_of(client) is None and "create" not in vars(client.messages) and "stream" not in vars(client.messages)
    client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert guard.get_traces() == []


def test_otel_spans_carry_the_provider_and_the_evaluation(client, fake_llm_server, dgi_calibration):
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    fake_llm_server.add(Reply.json(message(GROUNDED)))
    instrument(client, tracer_provider=provider, calibration=dgi_calibration)
    with using_context(CONTEXT):
        client.messages.create(model="claude-test", max_tokens=10, messages=[{"role": "user", "content": QUESTION}])
    guard_of(client).flush()
    chat = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert len(chat) == 1
    attrs = chat[0].attributes
    assert attrs["gen_ai.provider.name"] == "anthropic" and attrs["gen_ai.request.model"] == "claude-test"
    assert attrs["gen_ai.evaluation.score.label"] == "trusted" and attrs["gen_ai.usage.input_tokens"] == 21
    provider.shutdown()


def test_missing_sdk_names_the_extra(monkeypatch):
    import builtins
    import importlib

    real_import = builtins.__import__

    def no_anthropic(name, *args, **kwargs):
        if name == "anthropic" or name.startswith("anthropic."):
            raise ImportError("No module named 'anthropic'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_anthropic)
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: no_anthropic(name))
    with pytest.raises(ImportError, match=r'pip install "groundlens-core\[anthropic\]"'):
        AnthropicProvider(model="m")


def test_request_reading_edge_cases():
    """Pure reading of requests: no text anywhere, string content, search results, a cut tool input."""
    from groundlens_core.plugins.anthropic import MessageEventReader, request_context, request_question

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
    assert reader.tool_arguments() == [("f", None)] and reader.completion().only_tool_calls

