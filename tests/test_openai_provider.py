"""The OpenAI guard and instrumented client, through the real ``openai`` SDK against a local server.

The server (tests/fake_llm_server.py) speaks the OpenAI wire format (tests/openai_wire.py); the
client is the SDK's own, with its own transport, retries, SSE decoder and error mapping. Scores come
from the real embedder.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from conftest import BrokenEmbedder  # noqa: E402
from fake_llm_server import Reply  # noqa: E402
from openai_wire import (  # noqa: E402
    MODEL,
    chat_chunks,
    chat_completion,
    chat_reply,
    echo_chat,
    response_events,
    response_json,
)

from groundlens_core.providers import ProviderResponse  # noqa: E402
from groundlens_core.providers.openai import (  # noqa: E402
    GroundlensFlaggedError,
    OpenAIProvider,
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


@pytest.fixture
def client(fake_llm_server):
    c = openai.OpenAI(base_url=fake_llm_server.url + "/v1", api_key="test-key", max_retries=2, timeout=60)
    yield c
    c.close()


@pytest.fixture
def aclient(fake_llm_server):
    return openai.AsyncOpenAI(base_url=fake_llm_server.url + "/v1", api_key="test-key", max_retries=2, timeout=60)


@pytest.fixture
def guard(client, dgi_calibration):
    return OpenAIProvider(model="gpt-4o-mini", client=client, calibration=dgi_calibration)


def _sent(server, i: int = -1) -> dict:
    return server.requests[i].json


# ---------------------------------------------------------------- the guard call


def test_complete_with_context_scores_sgi_and_returns_the_sdk_response(guard, fake_llm_server):
    fake_llm_server.add(chat_reply(GROUNDED, usage=(40, 17)))
    answer = guard.complete(QUESTION, context=CONTEXT, system="Be brief.", temperature=0)

    assert isinstance(answer, ProviderResponse)
    assert answer.text == GROUNDED and answer.model == MODEL and answer.finish_reason == "stop"
    assert (answer.usage.input_tokens, answer.usage.output_tokens, answer.usage.total_tokens) == (40, 17, 57)
    assert isinstance(answer.raw, openai.types.chat.ChatCompletion)
    assert isinstance(answer.groundlens_score, SGIResult) and answer.groundlens_score.triage == "trusted"
    assert not answer.flagged and answer.scoring_error is None
    with pytest.raises(Exception):  # frozen
        answer.text = "changed"  # type: ignore[misc]

    body = _sent(fake_llm_server)  # the one documented way the context goes into the request
    assert body["model"] == "gpt-4o-mini" and body["temperature"] == 0
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    user = body["messages"][1]
    assert user["role"] == "user" and user["content"].endswith(QUESTION)
    assert f"<context>\n{CONTEXT}\n</context>" in user["content"]

    step = guard.get_trace().steps[0]  # the question scored is the prompt, not the prompt with its context
    assert step.question == QUESTION and step.method == "sgi" and step.provider == "openai"
    assert [c.source for c in step.context] == ["context"] and step.model == MODEL
    assert step.score.value == pytest.approx(answer.groundlens_score.value)


def test_complete_without_context_scores_dgi_on_the_question_given(guard, fake_llm_server):
    fake_llm_server.add(chat_reply("The capital of France is Paris."))
    answer = guard.complete("Answer in one sentence: what is the capital of France?",
                            question="What is the capital of France?")
    assert isinstance(answer.groundlens_score, DGIResult)
    assert "<context>" not in _sent(fake_llm_server)["messages"][-1]["content"]
    assert guard.get_trace().steps[0].question == "What is the capital of France?"


def test_guard_modes(client, fake_llm_server, dgi_calibration):
    fake_llm_server.default = echo_chat(FLAGGED)
    annotate = OpenAIProvider(model="m", client=client, calibration=dgi_calibration)
    answer = annotate.complete(QUESTION, context=CONTEXT)
    assert answer.flagged and answer.groundlens_score.triage == "flagged"

    seen = []
    callback = OpenAIProvider(model="m", client=client, calibration=dgi_calibration,
                              on_flagged=lambda inline, response: seen.append((inline.score, response)))
    flagged_answer = callback.complete(QUESTION, context=CONTEXT)
    assert len(seen) == 1 and seen[0][1] is flagged_answer and seen[0][0].flagged

    strict = OpenAIProvider(model="m", client=client, calibration=dgi_calibration, mode="raise")
    with pytest.raises(GroundlensFlaggedError) as caught:
        strict.complete(QUESTION, context=CONTEXT)
    assert caught.value.score.flagged and caught.value.response.text == FLAGGED
    trace = strict.get_trace()  # the step is recorded before the raise; the trace says it ended abnormally
    assert trace.steps[0].triage == "flagged" and trace.status == "error"

    fake_llm_server.default = echo_chat(GROUNDED)
    assert not strict.complete(QUESTION, context=CONTEXT).flagged  # a grounded answer passes


def test_a_scoring_failure_is_kept_on_the_response_and_never_raised(client, fake_llm_server, caplog):
    fake_llm_server.add(chat_reply(GROUNDED))
    guard = OpenAIProvider(model="m", client=client, embedder=BrokenEmbedder(), mode="raise")
    with caplog.at_level(logging.WARNING, logger="groundlens"):
        answer = guard.complete(QUESTION, context=CONTEXT)
    assert answer.text == GROUNDED and answer.groundlens_score is None
    assert "embedder exploded" in answer.scoring_error
    step = guard.get_trace().steps[0]
    assert step.method == "error" and "embedder exploded" in step.error
    assert any("embedder exploded" in r.getMessage() for r in caplog.records)


def test_bad_input_is_a_one_line_error_before_any_request(guard, fake_llm_server):
    with pytest.raises(TypeError, match="prompt must be non-blank text"):
        guard.complete("   ")
    with pytest.raises(TypeError, match="needs a model"):
        OpenAIProvider(client=guard.client).complete("hi")
    with pytest.raises(ValueError, match="mode must be one of"):
        OpenAIProvider(model="m", client=guard.client, mode="shout")
    with pytest.raises(TypeError, match=r"no stream=True; use \.stream\(\)"):
        guard.complete("hi", stream=True)  # was an unread SDK stream as .raw and text "", no error
    assert fake_llm_server.requests == []


def test_http_500_is_the_sdks_own_error_and_an_error_step(guard, fake_llm_server):
    fake_llm_server.add(*[Reply.error(500, "the server fell over")] * 3)  # max_retries=2: three tries
    with pytest.raises(openai.InternalServerError) as caught:
        guard.complete(QUESTION, context=CONTEXT)
    assert caught.value.status_code == 500 and len(fake_llm_server.requests) == 3
    trace = guard.get_trace()
    assert trace.steps[0].method == "error" and "InternalServerError" in trace.steps[0].error
    assert trace.status == "error"


def test_a_429_is_retried_by_the_sdk_and_recorded_once(guard, fake_llm_server):
    fake_llm_server.add(Reply.error(429, "slow down", headers={"retry-after-ms": "10"}), chat_reply(GROUNDED))
    answer = guard.complete(QUESTION, context=CONTEXT)
    assert answer.text == GROUNDED and len(fake_llm_server.requests) == 2
    assert [s.method for s in guard.get_trace().steps] == ["sgi"]


def test_stream_yields_chunks_then_the_scored_response(guard, fake_llm_server):
    fake_llm_server.add(Reply.sse(chat_chunks(["It charges fully in 4 hours ", "from a 240 V outlet."], usage=(30, 11))))
    stream = guard.stream(QUESTION, context=CONTEXT)
    assert stream.response is None
    chunks = list(stream)
    assert chunks == ["It charges fully in 4 hours ", "from a 240 V outlet."]
    assert stream.response.text == "".join(chunks) and isinstance(stream.groundlens_score, SGIResult)
    assert stream.response.usage.output_tokens == 11 and stream.response.finish_reason == "stop"
    assert isinstance(stream.raw, openai.Stream)
    body = _sent(fake_llm_server)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    step = guard.get_trace().steps[0]
    assert step.method == "sgi" and step.metadata["streaming"] is True


def test_stream_cut_midway_raises_the_sdks_error_and_records_it(guard, fake_llm_server):
    fake_llm_server.add(Reply.sse(chat_chunks(["It charges ", "fully ", "in 4 hours."]), cut_after=2))
    stream = guard.stream(QUESTION, context=CONTEXT)
    got = []
    with pytest.raises(httpx.RemoteProtocolError):
        for text in stream:
            got.append(text)
    assert got == ["It charges "]
    step = guard.get_trace().steps[0]
    assert step.method == "error" and "RemoteProtocolError" in step.error and step.response == "It charges "


def test_a_guard_stream_closed_early_records_what_came(guard, fake_llm_server):
    fake_llm_server.add(Reply.sse(chat_chunks(["It charges ", "fully ", "in 4 hours."])))
    with guard.stream(QUESTION, context=CONTEXT) as stream:
        first = next(iter(stream))
    assert first == "It charges " and stream.response is None
    fake_llm_server.add(Reply.sse(chat_chunks(["unread"])))
    guard.stream(QUESTION).close()  # closed before the first chunk
    first_step, second_step = [t.steps[0] for t in guard.get_traces()]
    assert first_step.metadata["stream_incomplete"] is True and first_step.response == "It charges "
    assert first_step.method == "sgi"  # scored by the recorder, in the background
    assert second_step.metadata["stream_incomplete"] is True and second_step.method == "skipped"


def test_stream_in_raise_mode_raises_after_the_last_chunk(client, fake_llm_server, dgi_calibration):
    fake_llm_server.add(Reply.sse(chat_chunks([FLAGGED])))
    guard = OpenAIProvider(model="m", client=client, calibration=dgi_calibration, mode="raise")
    got = []
    with pytest.raises(GroundlensFlaggedError):
        for text in guard.stream(QUESTION, context=CONTEXT):
            got.append(text)
    assert got == [FLAGGED]


async def test_acomplete_and_astream_with_the_async_client(aclient, fake_llm_server, dgi_calibration):
    fake_llm_server.default = echo_chat(GROUNDED)
    guard = OpenAIProvider(model="m", client=aclient, calibration=dgi_calibration)
    answer = await guard.acomplete(QUESTION, context=CONTEXT)
    assert answer.text == GROUNDED and isinstance(answer.groundlens_score, SGIResult)
    assert isinstance(answer.raw, openai.types.chat.ChatCompletion)

    stream = await guard.astream(QUESTION, context=CONTEXT)
    chunks = [c async for c in stream]
    assert "".join(chunks) == GROUNDED and stream.response.groundlens_score.triage == "trusted"
    assert isinstance(stream.raw, openai.AsyncStream)
    with pytest.raises(TypeError, match="async client"):
        guard.complete(QUESTION)
    await aclient.close()


async def test_acomplete_with_only_a_sync_client_runs_it_in_a_thread(guard, fake_llm_server):
    fake_llm_server.add(chat_reply(GROUNDED))
    answer = await guard.acomplete(QUESTION, context=CONTEXT)
    assert answer.text == GROUNDED


async def test_async_http_500_is_the_sdks_own_error(aclient, fake_llm_server, dgi_calibration):
    fake_llm_server.add(*[Reply.error(500)] * 3)
    guard = OpenAIProvider(model="m", client=aclient, calibration=dgi_calibration)
    with pytest.raises(openai.InternalServerError):
        await guard.acomplete(QUESTION)
    assert guard.get_trace().steps[0].method == "error"
    await aclient.close()


def test_client_kwargs_make_the_client(fake_llm_server, dgi_calibration):
    fake_llm_server.add(chat_reply(GROUNDED))
    guard = OpenAIProvider(model="m", base_url=fake_llm_server.url + "/v1", api_key="from-kwargs",
                           calibration=dgi_calibration)
    assert guard.complete(QUESTION).text == GROUNDED
    assert fake_llm_server.requests[-1].headers["authorization"] == "Bearer from-kwargs"


# ---------------------------------------------------------------- instrumented clients


def _tool_conversation() -> list[dict]:
    return [
        {"role": "system", "content": "You are a weather assistant."},
        {"role": "user", "content": "What is the weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": WEATHER},
    ]


def test_instrumented_chat_call_is_unchanged_and_recorded(client, fake_llm_server, dgi_calibration):
    answer_text = "In Oslo it is 4 degrees Celsius with light rain and a north wind of 20 km/h."
    fake_llm_server.add(Reply.json(chat_completion(answer_text, usage=(50, 20))))
    same = instrument(client, name="weather-bot", calibration=dgi_calibration)
    assert same is client and isinstance(same, openai.OpenAI)

    result = client.chat.completions.create(model="gpt-4o-mini", messages=_tool_conversation(),
                                            groundlens_context="Oslo weather station report, 08:00.")
    assert isinstance(result, openai.types.chat.ChatCompletion) and result.choices[0].message.content == answer_text
    body = _sent(fake_llm_server)
    assert "groundlens_context" not in body and body["messages"] == _tool_conversation()  # sent as it was

    trace = guard_of(client).get_trace()
    assert trace.name == "weather-bot" and trace.framework == "openai"
    step = trace.steps[0]
    assert step.kind == "llm" and step.method == "sgi" and step.node == "openai.chat"
    assert step.question == "What is the weather in Oslo?" and step.response == answer_text
    assert [(c.source, c.text) for c in step.context] == [("tool:get_weather", WEATHER),
                                                           ("attached", "Oslo weather station report, 08:00.")]
    assert step.usage.input_tokens == 50 and step.provider == "openai" and step.model == MODEL


def test_tool_call_only_turn_is_an_unscored_tool_call_step(client, fake_llm_server):
    fake_llm_server.add(Reply.json(chat_completion(None, tool_calls=[("get_weather", {"city": "Oslo"})])))
    guard = OpenAIProvider(client=client)
    guard.instrument(client)
    result = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Weather in Oslo?"}],
                                            tools=[{"type": "function", "function": {"name": "get_weather",
                                                                                     "parameters": {"type": "object"}}}])
    assert result.choices[0].message.tool_calls[0].function.name == "get_weather"
    step = guard.get_trace().steps[0]
    assert step.kind == "tool_call" and step.method == "skipped" and step.metadata["tool_calls"] == ["get_weather"]


def test_trace_block_groups_calls_and_using_context_attaches_without_sending(client, fake_llm_server, dgi_calibration):
    fake_llm_server.default = echo_chat(GROUNDED)
    guard = OpenAIProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    with guard.trace("rag-session"), using_context(CONTEXT):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}],
                                       groundlens_node="answer")
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Say it again."}],
                                       groundlens_question=QUESTION)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Outside the block"}])
    traces = guard.get_traces()
    assert [t.name for t in traces][-2] == "rag-session" and len(traces[-2].steps) == 2
    first, second = traces[-2].steps
    assert first.node == "answer" and first.method == "sgi" and first.context[0].source == "attached"
    assert second.question == QUESTION and second.metadata["question_source"] == "groundlens_question"
    assert traces[-1].steps[0].method == "dgi" and traces[-1].steps[0].context == ()  # the block's context ended
    assert all(CONTEXT not in r.body.decode() for r in fake_llm_server.requests)


def test_instrumented_stream_is_the_sdks_stream_and_recorded_when_it_ends(client, fake_llm_server, dgi_calibration):
    fake_llm_server.add(Reply.sse(chat_chunks(["It charges fully ", "in 4 hours."], usage=(12, 6))))
    guard = OpenAIProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}], stream=True,
                                            stream_options={"include_usage": True}, groundlens_context=CONTEXT)
    assert isinstance(stream, openai.Stream)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "It charges fully in 4 hours."
    assert chunks[-1].usage.completion_tokens == 6
    step = guard.get_trace().steps[0]
    assert step.method == "sgi" and step.response == "It charges fully in 4 hours." and step.usage.output_tokens == 6


def test_instrumented_stream_left_early_is_recorded_when_closed(client, fake_llm_server, dgi_calibration):
    fake_llm_server.add(Reply.sse(chat_chunks(["It charges ", "fully ", "in 4 hours."])))
    guard = OpenAIProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}], stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break  # the caller stops reading after the first text
    stream.close()  # the SDK's own close(); our tap sees the generator closed with the stream
    del stream, chunk
    gc.collect()
    step = guard.get_trace().steps[0]
    assert step.metadata["stream_incomplete"] is True and step.response == "It charges "


def test_instrumented_stream_left_in_a_with_block_is_recorded_on_exit(client, fake_llm_server, dgi_calibration):
    """The SDK's ``with`` calls ``Stream.close()``; the step must land then, not when Python
    happens to collect the stream (the caller still holds it here, and no gc runs)."""
    fake_llm_server.add(Reply.sse(chat_chunks(["It charges ", "fully ", "in 4 hours."])),
                        Reply.sse(chat_chunks(["never read"])))
    guard = OpenAIProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    msgs = [{"role": "user", "content": QUESTION}]
    with client.chat.completions.create(model="m", messages=msgs, stream=True) as stream:
        assert isinstance(stream, openai.Stream)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                break
    assert stream.response.is_closed  # the SDK's own close still ran
    unread = client.chat.completions.create(model="m", messages=msgs, stream=True)
    unread.close()  # opened, never read
    traces = guard.get_traces()
    assert [len(t.steps) for t in traces] == [1, 1]
    left, never = traces[0].steps[0], traces[1].steps[0]
    assert left.metadata["stream_incomplete"] is True and left.response == "It charges "
    assert never.metadata["stream_incomplete"] is True and never.response is None
    assert traces[0].ended_at is not None and traces[1].ended_at is not None
    # Read after close: what the SDK does then is httpx's business (an empty read, or a ReadError on
    # the closed socket, depending on timing); either way our tap must not record a second step.
    with contextlib.suppress(httpx.HTTPError, httpx.StreamError):
        list(stream)
    assert [len(t.steps) for t in guard.get_traces()] == [1, 1]


async def test_async_instrumented_stream_left_in_an_async_with_block_is_recorded_on_exit(aclient, fake_llm_server,
                                                                                         dgi_calibration):
    fake_llm_server.add(Reply.sse(chat_chunks(["It charges ", "fully ", "in 4 hours."])))
    guard = OpenAIProvider(client=aclient, calibration=dgi_calibration)
    guard.instrument(aclient)
    msgs = [{"role": "user", "content": QUESTION}]
    async with await aclient.chat.completions.create(model="m", messages=msgs, stream=True) as stream:
        assert isinstance(stream, openai.AsyncStream)
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                break
    assert stream.response.is_closed
    steps = [t.steps for t in guard.get_traces()]
    assert len(steps) == 1 and len(steps[0]) == 1
    assert steps[0][0].metadata["stream_incomplete"] is True and steps[0][0].response == "It charges "
    await aclient.close()


def test_a_generator_of_messages_is_sent_as_without_instrumentation(client, fake_llm_server):
    """The SDK takes any iterable of messages (and of content parts); reading the request must not
    use up a generator the SDK then finds empty."""
    fake_llm_server.default = echo_chat(GROUNDED)

    def conversation():
        yield {"role": "system", "content": "Be brief."}
        yield {"role": "user", "content": iter([{"type": "text", "text": QUESTION}])}

    client.chat.completions.create(model="m", messages=conversation())
    bare = _sent(fake_llm_server)
    guard = OpenAIProvider(client=client)
    guard.instrument(client)
    client.chat.completions.create(model="m", messages=conversation())
    assert _sent(fake_llm_server) == bare and len(bare["messages"]) == 2
    assert bare["messages"][1]["content"] == [{"type": "text", "text": QUESTION}]
    assert guard.get_trace().steps[0].question == QUESTION


async def test_guard_calls_through_a_client_the_guard_instrumented_are_recorded_once(client, aclient, fake_llm_server,
                                                                                    dgi_calibration):
    """``guard.instrument()`` instruments the guard's own client: its guard calls must stay one
    step each, not gain a second step that scores the prompt-with-context as the question."""
    fake_llm_server.default = echo_chat(GROUNDED)
    guard = OpenAIProvider(model="m", client=client, async_client=aclient, calibration=dgi_calibration)
    guard.instrument()
    guard.instrument(aclient)
    guard.complete(QUESTION, context=CONTEXT)
    list(guard.stream(QUESTION, context=CONTEXT))
    await guard.acomplete(QUESTION, context=CONTEXT)
    async for _ in await guard.astream(QUESTION, context=CONTEXT):
        pass
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])  # still recorded
    steps = [s for t in guard.get_traces() for s in t.steps]
    assert [s.method for s in steps] == ["sgi", "sgi", "sgi", "sgi", "dgi"]
    assert all(s.question == QUESTION for s in steps)
    await aclient.close()


def test_instrumented_stream_tool_call(client, fake_llm_server):
    fake_llm_server.add(Reply.sse(chat_chunks([], tool_call=("get_weather", {"city": "Oslo"}))))
    guard = OpenAIProvider(client=client)
    guard.instrument(client)
    list(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Oslo?"}], stream=True))
    step = guard.get_trace().steps[0]
    assert step.kind == "tool_call" and step.metadata["tool_calls"] == ["get_weather"]


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # the exception a caller sees: type and message
        return (type(exc), str(exc))


def test_errors_are_exactly_the_sdks_with_and_without_instrumentation(fake_llm_server):
    """HTTP 500 after retries, a 400, a time-out and a cut stream: the same exception, bare or instrumented.

    Only the time-out scenario has a short time-out (per request, 0.5 s against a reply held 10 s):
    a client-wide 0.5 s turned a slow 500 on a loaded machine into a time-out on one side only."""
    def make():
        return openai.OpenAI(base_url=fake_llm_server.url + "/v1", api_key="k", max_retries=1, timeout=120)

    def scenarios(c):
        msgs = [{"role": "user", "content": "hi"}]
        yield [Reply.error(500, "boom")] * 2, lambda: c.chat.completions.create(model="m", messages=msgs)
        yield [Reply.error(400, "bad request")], lambda: c.chat.completions.create(model="m", messages=msgs)
        yield [Reply.json(chat_completion("late"), delay=10)] * 2, lambda: c.chat.completions.create(
            model="m", messages=msgs, timeout=0.5)
        yield [Reply.sse(chat_chunks(["a", "b", "c"]), cut_after=2)], lambda: [
            x for x in c.chat.completions.create(model="m", messages=msgs, stream=True)]
        yield [Reply.error(500, "boom")] * 2, lambda: c.responses.create(model="m", input="hi")

    bare, wrapped = make(), make()
    guard = OpenAIProvider(client=wrapped)
    guard.instrument(wrapped)
    for (replies, call_bare), (_, call_wrapped) in zip(scenarios(bare), scenarios(wrapped)):
        fake_llm_server.add(*replies)
        expected = _outcome(call_bare)
        fake_llm_server.add(*replies)
        got = _outcome(call_wrapped)
        assert expected[0] != "ok" and got == expected
    methods = [s.method for t in guard.get_traces() for s in t.steps]
    assert methods == ["error"] * 5


def test_instrumented_responses_api(client, fake_llm_server, dgi_calibration):
    guard = OpenAIProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    fake_llm_server.add(Reply.json(response_json(GROUNDED)))
    result = client.responses.create(model="m", input=QUESTION, instructions="Be brief.", groundlens_context=CONTEXT)
    assert result.output_text == GROUNDED and "groundlens_context" not in _sent(fake_llm_server)

    fake_llm_server.add(Reply.json(response_json(None, function_call=("get_weather", {"city": "Oslo"}))))
    client.responses.create(model="m", input=[{"role": "user", "content": "Weather in Oslo?"}])

    answer = "It is 4 degrees Celsius and raining lightly in Oslo."
    fake_llm_server.add(Reply.json(response_json(answer)))
    client.responses.create(model="m", input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Oslo?"}]},
        {"type": "function_call", "call_id": "call_9", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_9", "output": WEATHER},
    ])
    fake_llm_server.add(Reply.sse(response_events(["It charges fully ", "in 4 hours."])))
    events = list(client.responses.create(model="m", input=QUESTION, stream=True, groundlens_context=CONTEXT))
    assert events[-1].type == "response.completed"

    steps = [t.steps[0] for t in guard.get_traces()]
    assert [s.node for s in steps] == ["openai.responses"] * 4
    assert steps[0].method == "sgi" and steps[0].question == QUESTION and steps[0].usage.input_tokens == 30
    assert steps[1].kind == "tool_call" and steps[1].metadata["tool_calls"] == ["get_weather"]
    assert steps[2].question == "Weather in Oslo?" and [c.source for c in steps[2].context] == ["tool:get_weather"]
    assert steps[2].method == "sgi" and steps[2].metadata["finish_reason"] == "completed"
    assert steps[3].response == "It charges fully in 4 hours." and steps[3].metadata["streaming"] is True
    assert steps[3].usage.output_tokens == 12


async def test_instrumented_async_client(aclient, fake_llm_server, dgi_calibration):
    fake_llm_server.default = echo_chat(GROUNDED)
    guard = OpenAIProvider(client=aclient, calibration=dgi_calibration)
    assert guard.instrument() is aclient
    msgs = [{"role": "user", "content": QUESTION}]
    result = await aclient.chat.completions.create(model="m", messages=msgs, groundlens_context=CONTEXT)
    assert result.choices[0].message.content == GROUNDED
    stream = await aclient.chat.completions.create(model="m", messages=msgs, stream=True)
    assert isinstance(stream, openai.AsyncStream)
    assert [c async for c in stream]
    response = await aclient.responses.create(model="m", input=QUESTION)
    assert response.output_text == GROUNDED
    fake_llm_server.add(Reply.sse(chat_chunks(["a", "b", "c"]), cut_after=2))
    with pytest.raises(httpx.RemoteProtocolError):
        async for _ in await aclient.chat.completions.create(model="m", messages=msgs, stream=True):
            pass
    steps = [t.steps[0] for t in guard.get_traces()]
    assert [s.method for s in steps] == ["sgi", "dgi", "dgi", "error"]
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

    fake_llm_server.default = echo_chat(GROUNDED)
    guard = OpenAIProvider(client=client, embedder=SpyEmbedder(get_embedder()))
    guard.instrument(client)
    for _ in range(3):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
    assert all(t.steps[0].method == "dgi" for t in guard.get_traces())
    assert threads and threading.current_thread().name not in threads  # the recorder's worker embedded


def test_our_failure_never_breaks_an_instrumented_call(client, fake_llm_server, caplog):
    fake_llm_server.default = echo_chat(GROUNDED)
    guard = OpenAIProvider(client=client)
    guard.instrument(client)

    def broken(*args, **kwargs):
        raise RuntimeError("reader bug")

    guard._read_request = broken  # our own code fails (not the SDK's)
    with caplog.at_level(logging.WARNING, logger="groundlens"):
        result = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                groundlens_context="never sent")
    assert result.choices[0].message.content == GROUNDED and "groundlens_context" not in _sent(fake_llm_server)
    assert any("reader bug" in r.getMessage() for r in caplog.records)
    errors = [s for t in guard.get_traces() for s in t.steps if s.method == "error"]
    assert errors and "reader bug" in errors[0].error


def test_a_scoring_failure_of_an_instrumented_call_is_an_error_step(client, fake_llm_server, caplog):
    fake_llm_server.add(chat_reply(GROUNDED))
    guard = OpenAIProvider(client=client, embedder=BrokenEmbedder())
    guard.instrument(client)
    with caplog.at_level(logging.WARNING, logger="groundlens"):
        result = client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}])
        step = guard.get_trace().steps[0]
    assert result.choices[0].message.content == GROUNDED
    assert step.method == "error" and "embedder exploded" in step.error and step.response == GROUNDED


def test_uninstrument_and_raw_response_helpers_pass_through(client, fake_llm_server):
    fake_llm_server.default = echo_chat(GROUNDED)
    guard = OpenAIProvider(client=client)
    instrument_twice = guard.instrument(guard.instrument(client))
    assert instrument_twice is client and guard_of(client) is guard
    raw = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert raw.parse().choices[0].message.content == GROUNDED
    assert guard.get_traces() == []  # read nothing from the raw helper
    uninstrument(client)
    assert guard_of(client) is None and "create" not in vars(client.chat.completions)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert guard.get_traces() == []


def test_otel_spans_carry_the_provider_and_the_evaluation(client, fake_llm_server, dgi_calibration):
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    fake_llm_server.add(chat_reply(GROUNDED))
    instrument(client, tracer_provider=provider, calibration=dgi_calibration)
    client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": QUESTION}],
                                   groundlens_context=CONTEXT)
    guard_of(client).flush()
    chat = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert len(chat) == 1
    attrs = chat[0].attributes
    assert attrs["gen_ai.provider.name"] == "openai" and attrs["gen_ai.request.model"] == MODEL
    assert attrs["gen_ai.evaluation.score.label"] == "trusted" and attrs["gen_ai.usage.input_tokens"] == 21
    provider.shutdown()


def test_concurrent_threads_keep_their_own_context(client, fake_llm_server, dgi_calibration):
    fake_llm_server.default = echo_chat(GROUNDED)
    guard = OpenAIProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)

    def worker(i: int) -> None:
        with using_context(f"document {i}"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"question {i}"}])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    pairs = sorted((t.steps[0].question, t.steps[0].context[0].text) for t in guard.get_traces())
    assert pairs == [(f"question {i}", f"document {i}") for i in range(4)]


def test_missing_sdk_names_the_extra(monkeypatch):
    import builtins
    import importlib

    real_import = builtins.__import__

    def no_openai(name, *args, **kwargs):
        if name == "openai" or name.startswith("openai."):
            raise ImportError("No module named 'openai'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_openai)
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: no_openai(name))
    with pytest.raises(ImportError, match=r'pip install "groundlens-core\[openai\]"'):
        OpenAIProvider(model="m")


def test_asyncio_run_of_acomplete_does_not_block_the_loop(client, fake_llm_server, dgi_calibration):
    """Scoring runs in a worker thread: another task keeps ticking meanwhile.

    The embedder waits (up to 60 s) for a tick of the loop while it encodes: off the loop the tick
    comes at once; on the loop's own thread it never can. A count of ticks alone depended on the
    loop's thread getting the CPU during a scoring of a few milliseconds on a loaded machine."""
    from groundlens_core import get_embedder

    ticked = threading.Event()
    seen: list[bool] = []

    class WaitsForATick:
        def __init__(self, inner):
            self._inner = inner

        def encode(self, texts):
            ticked.clear()
            seen.append(ticked.wait(60))
            return self._inner.encode(texts)

        def __getattr__(self, name):
            return getattr(self._inner, name)

    fake_llm_server.add(chat_reply(GROUNDED))
    guard = OpenAIProvider(model="m", client=client, calibration=dgi_calibration,
                           embedder=WaitsForATick(get_embedder()))

    async def main():
        ticks = 0
        done = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                ticked.set()
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        answer = await guard.acomplete(QUESTION, context=CONTEXT)
        done.set()
        await task
        return answer, ticks

    answer, ticks = asyncio.run(main())
    assert answer.groundlens_score is not None and seen and all(seen) and ticks > 1
