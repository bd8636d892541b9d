"""The Gemini guard and instrumented client, through the real ``google-genai`` SDK against a local server.

The server (tests/fake_llm_server.py) speaks the Gemini API (tests/google_wire.py):
``:generateContent`` JSON and ``:streamGenerateContent?alt=sse`` chunks. The client is the SDK's
own ``genai.Client`` pointed at it with ``http_options=HttpOptions(base_url=...)``, with its own
transport, retries (tenacity, when ``retry_options`` asks for them), SSE reading and error mapping.
"""

from __future__ import annotations

import threading
import types as pytypes

import pytest

genai = pytest.importorskip("google.genai")
httpx2 = pytest.importorskip("httpx2")

from fake_llm_server import Reply  # noqa: E402
from google.genai import errors as genai_errors  # noqa: E402
from google.genai import types  # noqa: E402
from google_wire import error, model, response, stream_chunks  # noqa: E402

from groundlens_core.providers import ProviderResponse  # noqa: E402
from groundlens_core.providers.google import (  # noqa: E402
    GoogleProvider,
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
FAST_RETRY = types.HttpRetryOptions(attempts=3, initial_delay=0.01, max_delay=0.02, jitter=0)


def says(text: str):
    return model(lambda body: response(text))


def make_client(server, **http) -> genai.Client:
    return genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=server.url, **http))


@pytest.fixture
def client(fake_llm_server):
    c = make_client(fake_llm_server, retry_options=FAST_RETRY)
    yield c
    c.close()


@pytest.fixture
def guard(client, dgi_calibration):
    return GoogleProvider(model="gemini-test", client=client, calibration=dgi_calibration)


def _sent(server, i: int = -1) -> dict:
    return server.requests[i].json


# ---------------------------------------------------------------- the guard call


def test_complete_with_context_scores_sgi_and_returns_the_sdk_response(guard, fake_llm_server):
    fake_llm_server.add(Reply.json(response(GROUNDED, prompt_tokens=40, output_tokens=17)))
    got = guard.complete(QUESTION, context=CONTEXT, system="Be brief.",
                         config=types.GenerateContentConfig(max_output_tokens=200))

    assert isinstance(got, ProviderResponse) and isinstance(got.raw, types.GenerateContentResponse)
    assert got.text == GROUNDED and got.model == "gemini-test" and got.finish_reason == "STOP"
    assert (got.usage.input_tokens, got.usage.output_tokens, got.usage.total_tokens) == (40, 17, 57)
    assert isinstance(got.groundlens_score, SGIResult) and got.triage == "trusted"

    request = fake_llm_server.requests[-1]
    assert request.path.endswith("/models/gemini-test:generateContent")
    body = request.json  # the documented request: one user turn, context in <context> tags
    [turn] = body["contents"]
    assert turn["role"] == "user" and turn["parts"][0]["text"].endswith(QUESTION)
    assert f"<context>\n{CONTEXT}\n</context>" in turn["parts"][0]["text"]
    assert body["systemInstruction"]["parts"][0]["text"] == "Be brief."
    assert body["generationConfig"]["maxOutputTokens"] == 200  # the caller's config kept

    step = guard.get_trace().steps[0]
    assert step.question == QUESTION and step.method == "sgi" and step.provider == "gcp.gemini"
    assert step.node == "gcp.gemini.generate_content" and step.metadata["finish_reason"] == "STOP"


def test_complete_without_context_scores_dgi_with_a_dict_config(guard, fake_llm_server):
    fake_llm_server.add(Reply.json(response("The capital of France is Paris.")))
    got = guard.complete("Answer in one sentence: what is the capital of France?",
                         question="What is the capital of France?", system="Be brief.",
                         config={"temperature": 0})
    assert isinstance(got.groundlens_score, DGIResult)
    body = _sent(fake_llm_server)
    assert body["generationConfig"]["temperature"] == 0 and body["systemInstruction"]["parts"][0]["text"] == "Be brief."
    assert guard.get_trace().steps[0].question == "What is the capital of France?"


def test_guard_in_raise_mode(client, fake_llm_server, dgi_calibration):
    fake_llm_server.default = says(FLAGGED)
    strict = GoogleProvider(model="m", client=client, calibration=dgi_calibration, mode="raise")
    with pytest.raises(GroundlensFlaggedError) as caught:
        strict.complete(QUESTION, context=CONTEXT)
    assert caught.value.response.text == FLAGGED and strict.get_trace().steps[0].triage == "flagged"
    fake_llm_server.default = says(GROUNDED)
    assert not strict.complete(QUESTION, context=CONTEXT).flagged


def test_http_500_is_the_sdks_own_error_and_a_429_is_retried(fake_llm_server, dgi_calibration):
    no_retries = GoogleProvider(model="m", client=make_client(fake_llm_server), calibration=dgi_calibration)
    fake_llm_server.add(error(500, "the server fell over"))
    with pytest.raises(genai_errors.ServerError) as caught:
        no_retries.complete(QUESTION, context=CONTEXT)
    assert caught.value.code == 500 and len(fake_llm_server.requests) == 1  # google-genai retries only if asked
    step = no_retries.get_trace().steps[0]
    assert step.method == "error" and "ServerError" in step.error

    retrying = GoogleProvider(model="m", client=make_client(fake_llm_server, retry_options=FAST_RETRY),
                              calibration=dgi_calibration)
    fake_llm_server.add(error(429, "slow down"), Reply.json(response(GROUNDED)))
    assert retrying.complete(QUESTION, context=CONTEXT).text == GROUNDED
    assert len(fake_llm_server.requests) == 3 and [s.method for s in retrying.get_trace().steps] == ["sgi"]


def test_stream_yields_chunks_then_the_scored_response(guard, fake_llm_server):
    fake_llm_server.add(Reply.sse(stream_chunks(response(GROUNDED, prompt_tokens=30, output_tokens=11), piece=20)))
    stream = guard.stream(QUESTION, context=CONTEXT)
    chunks = list(stream)
    assert len(chunks) > 1 and "".join(chunks) == GROUNDED and isinstance(stream.raw, pytypes.GeneratorType)
    got = stream.response
    assert isinstance(got.groundlens_score, SGIResult) and got.finish_reason == "STOP"
    assert (got.usage.input_tokens, got.usage.output_tokens) == (30, 11)
    assert fake_llm_server.requests[-1].path.endswith(":streamGenerateContent?alt=sse")


def test_stream_cut_midway_raises_the_sdks_error_and_records_it(guard, fake_llm_server):
    fake_llm_server.add(Reply.sse(stream_chunks(response(GROUNDED), piece=20), cut_after=1))
    got = []
    with pytest.raises(httpx2.RemoteProtocolError):
        for text in guard.stream(QUESTION, context=CONTEXT):
            got.append(text)
    assert got == [GROUNDED[:20]]
    step = guard.get_trace().steps[0]
    assert step.method == "error" and "RemoteProtocolError" in step.error and step.response == GROUNDED[:20]


async def test_acomplete_and_astream_use_the_clients_aio_side(client, fake_llm_server, dgi_calibration):
    fake_llm_server.default = says(GROUNDED)
    guard = GoogleProvider(model="m", client=client, calibration=dgi_calibration)
    got = await guard.acomplete(QUESTION, context=CONTEXT)
    assert got.text == GROUNDED and isinstance(got.raw, types.GenerateContentResponse) and got.triage == "trusted"
    stream = await guard.astream(QUESTION, context=CONTEXT)
    assert "".join([c async for c in stream]) == GROUNDED and stream.response.triage == "trusted"
    assert guard._async_client is client.aio  # the caller's own client, not a second one
    only_async = GoogleProvider(model="m", client=client.aio, calibration=dgi_calibration)
    assert (await only_async.acomplete(QUESTION)).text == GROUNDED
    fake_llm_server.add(error(400, "bad request"))
    with pytest.raises(genai_errors.ClientError):
        await only_async.acomplete(QUESTION)
    assert [t.steps[0].method for t in only_async.get_traces()] == ["dgi", "error"]


# ---------------------------------------------------------------- instrumented clients


def test_guard_calls_through_a_client_the_guard_instrumented_are_recorded_once(guard, fake_llm_server):
    fake_llm_server.default = says(GROUNDED)
    guard.instrument()
    guard.complete(QUESTION, context=CONTEXT)
    list(guard.stream(QUESTION, context=CONTEXT))
    steps = [s for t in guard.get_traces() for s in t.steps]
    assert [(s.method, s.question) for s in steps] == [("sgi", QUESTION), ("sgi", QUESTION)]


def _tool_conversation() -> list:
    return [
        types.Content(role="user", parts=[types.Part.from_text(text="What is the weather in Oslo?")]),
        types.Content(role="model", parts=[types.Part.from_function_call(name="get_weather", args={"city": "Oslo"})]),
        types.Content(role="user", parts=[types.Part.from_function_response(name="get_weather",
                                                                            response={"output": WEATHER})]),
    ]


def test_instrumented_generate_content_is_unchanged_and_recorded(client, fake_llm_server, dgi_calibration):
    text = "In Oslo it is 4 degrees Celsius with light rain and a north wind of 20 km/h."
    fake_llm_server.add(Reply.json(response(text, prompt_tokens=50, output_tokens=20)))
    bare = make_client(fake_llm_server)
    fake_llm_server.add(Reply.json(response(text, prompt_tokens=50, output_tokens=20)))
    bare.models.generate_content(model="gemini-test", contents=_tool_conversation())
    same = instrument(client, name="weather-bot", calibration=dgi_calibration)
    assert same is client and guard_of(client).framework == "google"

    result = client.models.generate_content(model="gemini-test", contents=_tool_conversation(),
                                            groundlens_context="Station report, 08:00.")
    assert isinstance(result, types.GenerateContentResponse) and result.text == text
    assert _sent(fake_llm_server) == _sent(fake_llm_server, -2)  # sent exactly as without us

    trace = guard_of(client).get_trace()
    assert trace.name == "weather-bot" and trace.framework == "google"
    step = trace.steps[0]
    assert step.kind == "llm" and step.method == "sgi" and step.node == "gcp.gemini.generate_content"
    assert step.question == "What is the weather in Oslo?" and step.response == text
    assert [(c.source, c.text) for c in step.context] == [("tool:get_weather", WEATHER),
                                                           ("attached", "Station report, 08:00.")]
    assert (step.usage.input_tokens, step.usage.output_tokens, step.usage.total_tokens) == (50, 20, 70)
    assert step.provider == "gcp.gemini" and step.model == "gemini-test"


def test_function_call_only_turns_are_unscored_tool_call_steps(client, fake_llm_server):
    guard = GoogleProvider(client=client)
    guard.instrument(client)
    fake_llm_server.default = model(lambda body: response(None, function_calls=[("get_weather", {"city": "Oslo"})]))
    tool = types.Tool(function_declarations=[types.FunctionDeclaration(name="get_weather", description="weather")])
    config = types.GenerateContentConfig(tools=[tool])
    result = client.models.generate_content(model="m", contents="Weather in Oslo?", config=config)
    assert result.function_calls[0].name == "get_weather"
    chunks = list(client.models.generate_content_stream(model="m", contents="Weather in Oslo?", config=config))
    assert chunks[0].function_calls[0].args == {"city": "Oslo"}
    steps = [t.steps[0] for t in guard.get_traces()]
    assert [s.kind for s in steps] == ["tool_call"] * 2 and {s.method for s in steps} == {"skipped"}
    assert all(s.metadata["tool_calls"] == ["get_weather"] for s in steps)


def test_automatic_function_calling_is_one_step_with_the_function_results_as_context(client, fake_llm_server,
                                                                                     dgi_calibration):
    def check_stock(city: str) -> str:
        """Stock of the Aurora-7 in a city's store."""
        return f"{city} store: Aurora-7 in stock, 3 units, ready for pickup today."

    def script(body):
        answered = any("functionResponse" in p for c in body["contents"] for p in c["parts"])
        if not answered:
            return response(None, function_calls=[("check_stock", {"city": "Oslo"})])
        return response("Yes: the Oslo store has 3 Aurora-7 packs in stock, ready for pickup today.")

    fake_llm_server.default = model(script)
    guard = GoogleProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    result = client.models.generate_content(model="m", contents="Is the Aurora-7 in stock in Oslo?",
                                            config=types.GenerateContentConfig(tools=[check_stock]))
    assert result.text.startswith("Yes") and len(fake_llm_server.requests) == 2  # the SDK ran the tool itself
    [step] = guard.get_trace().steps
    assert step.method == "sgi" and step.question == "Is the Aurora-7 in stock in Oslo?"
    assert [(c.source, c.text) for c in step.context] == [
        ("tool:check_stock", "Oslo store: Aurora-7 in stock, 3 units, ready for pickup today.")]


def test_instrumented_stream_yields_the_sdks_chunks(client, fake_llm_server, dgi_calibration):
    fake_llm_server.add(Reply.sse(stream_chunks(response(GROUNDED, prompt_tokens=12, output_tokens=6))))
    guard = GoogleProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    chunks = list(client.models.generate_content_stream(model="m", contents=QUESTION, groundlens_context=CONTEXT))
    assert all(isinstance(c, types.GenerateContentResponse) for c in chunks)
    assert "".join(c.text for c in chunks) == GROUNDED and chunks[-1].usage_metadata.total_token_count == 18
    step = guard.get_trace().steps[0]
    assert step.method == "sgi" and step.response == GROUNDED and step.usage.output_tokens == 6
    assert step.node == "gcp.gemini.generate_content_stream" and step.metadata["streaming"] is True


def test_chat_sessions_go_through_the_instrumented_methods(client, fake_llm_server, dgi_calibration):
    fake_llm_server.default = says(GROUNDED)
    guard = GoogleProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    chat = client.chats.create(model="m")
    with guard.trace("chat"), using_context(CONTEXT):
        chat.send_message("Hello")
        chat.send_message(QUESTION)
    first, second = guard.get_trace().steps
    assert (first.question, second.question) == ("Hello", QUESTION)  # the last user turn of the history
    assert second.method == "sgi" and second.context[0].source == "attached"


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # what a caller sees: the type and the message
        return (type(exc), str(exc))


def test_errors_are_exactly_the_sdks_with_and_without_instrumentation(fake_llm_server):
    """HTTP 500 after retries, a 400, a time-out and a cut stream: the same exception, bare or instrumented.

    Only the time-out scenario has a short time-out (per request, 500 ms against a reply held 10 s):
    a client-wide 500 ms turned a slow reply on a loaded machine into a time-out on one side only."""
    def make():
        return make_client(fake_llm_server, timeout=120_000,
                           retry_options=types.HttpRetryOptions(attempts=2, initial_delay=0.01, max_delay=0.02,
                                                                jitter=0))

    def scenarios(c):
        kw = {"model": "m", "contents": "hi"}
        short = types.GenerateContentConfig(http_options=types.HttpOptions(timeout=500))
        yield [error(500, "boom")] * 2, lambda: c.models.generate_content(**kw)
        yield [error(400, "bad")], lambda: c.models.generate_content(**kw)
        yield [Reply.json(response("late"), delay=10)] * 2, lambda: c.models.generate_content(**kw, config=short)
        yield [Reply.sse(stream_chunks(response("a b c d e f"), piece=2), cut_after=1)], lambda: [
            x.text for x in c.models.generate_content_stream(**kw)]

    bare, wrapped = make(), make()
    guard = GoogleProvider(client=wrapped)
    guard.instrument(wrapped)
    for (replies, call_bare), (_, call_wrapped) in zip(scenarios(bare), scenarios(wrapped)):
        fake_llm_server.add(*replies)
        expected = _outcome(call_bare)
        fake_llm_server.add(*replies)
        got = _outcome(call_wrapped)
        assert expected[0] != "ok" and got == expected
    assert [s.method for t in guard.get_traces() for s in t.steps] == ["error"] * 4


async def test_instrumented_aio_side(client, fake_llm_server, dgi_calibration):
    fake_llm_server.default = says(GROUNDED)
    guard = GoogleProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)  # a sync Client: its aio side is instrumented too
    result = await client.aio.models.generate_content(model="m", contents=QUESTION, groundlens_context=CONTEXT)
    assert result.text == GROUNDED
    chunks = [c async for c in await client.aio.models.generate_content_stream(model="m", contents=QUESTION)]
    assert "".join(c.text for c in chunks) == GROUNDED

    async def read_cut_stream(aio):  # the aio side reads with aiohttp when it is installed, else httpx
        fake_llm_server.add(Reply.sse(stream_chunks(response(GROUNDED), piece=20), cut_after=1))
        try:
            async for _ in await aio.models.generate_content_stream(model="m", contents=QUESTION):
                pass
        except Exception as exc:
            return type(exc), str(exc)
        return None

    expected = await read_cut_stream(make_client(fake_llm_server).aio)
    assert expected is not None and await read_cut_stream(client.aio) == expected
    fake_llm_server.add(error(404, "no such model"))
    with pytest.raises(genai_errors.ClientError):
        await client.aio.models.generate_content(model="m", contents=QUESTION)
    steps = [t.steps[0] for t in guard.get_traces()]
    assert [s.method for s in steps] == ["sgi", "dgi", "error", "error"]

    aio_only = make_client(fake_llm_server).aio
    second = GoogleProvider(client=aio_only)
    assert second.instrument() is aio_only
    await aio_only.models.generate_content(model="m", contents=QUESTION)
    assert second.get_trace().steps[0].method == "dgi"


def test_vertex_ai_mode_is_read_the_same(fake_llm_server, dgi_calibration):
    """``vertexai=True`` (express mode, an API key) talks Vertex's paths and response converters."""
    fake_llm_server.default = says(GROUNDED)
    vertex = genai.Client(vertexai=True, api_key="test-key", http_options=types.HttpOptions(base_url=fake_llm_server.url))
    guard = GoogleProvider(client=vertex, calibration=dgi_calibration)
    guard.instrument(vertex)
    assert vertex.models.generate_content(model="gemini-test", contents=QUESTION, groundlens_context=CONTEXT).text == GROUNDED
    assert "".join(c.text for c in vertex.models.generate_content_stream(model="gemini-test", contents=QUESTION)) == GROUNDED
    assert fake_llm_server.requests[0].path.endswith("/publishers/google/models/gemini-test:generateContent")
    steps = [t.steps[0] for t in guard.get_traces()]
    assert [s.method for s in steps] == ["sgi", "dgi"] and steps[0].usage.total_tokens == 25


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
    guard = GoogleProvider(client=client, embedder=SpyEmbedder(get_embedder()))
    guard.instrument(client)
    client.models.generate_content(model="m", contents=QUESTION)
    list(client.models.generate_content_stream(model="m", contents=QUESTION))
    assert [t.steps[0].method for t in guard.get_traces()] == ["dgi", "dgi"]
    assert threads and threading.current_thread().name not in threads


def test_uninstrument_puts_the_sdk_methods_back(client, fake_llm_server):
    fake_llm_server.default = says(GROUNDED)
    guard = GoogleProvider(client=client)
    guard.instrument(client)
    uninstrument(client)
    assert guard_of(client) is None
    assert "generate_content" not in vars(client.models) and "generate_content" not in vars(client.aio.models)
    client.models.generate_content(model="m", contents="hi")
    assert guard.get_traces() == []


def test_otel_spans_carry_the_provider_and_the_evaluation(client, fake_llm_server, dgi_calibration):
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    fake_llm_server.add(Reply.json(response(GROUNDED)))
    instrument(client, tracer_provider=provider, calibration=dgi_calibration)
    client.models.generate_content(model="gemini-test", contents=QUESTION, groundlens_context=CONTEXT)
    guard_of(client).flush()
    chat = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert len(chat) == 1
    attrs = chat[0].attributes
    assert attrs["gen_ai.provider.name"] == "gcp.gemini" and attrs["gen_ai.request.model"] == "gemini-test"
    assert attrs["gen_ai.evaluation.score.label"] == "trusted" and attrs["gen_ai.usage.input_tokens"] == 17
    provider.shutdown()


def test_missing_sdk_names_the_extra(monkeypatch):
    import builtins
    import importlib

    real_import = builtins.__import__

    def no_genai(name, *args, **kwargs):
        if name == "google.genai" or name.startswith("google.genai."):
            raise ImportError("No module named 'google.genai'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_genai)
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: no_genai(name))
    with pytest.raises(ImportError, match=r'pip install "groundlens-core\[google\]"'):
        GoogleProvider(model="m")


def test_contents_are_read_the_way_the_sdk_reads_them():
    """Strings, loose parts, dicts in REST spelling, thought parts: question and context as the model sees them."""
    from groundlens_core.plugins.google import ChunkReader, request_context, request_question

    assert request_question("plain question") == "plain question" and request_context("plain question") == []
    assert request_question(["first part", "second part"]) == "first part\n\nsecond part"
    assert request_question(None) is None and request_question([]) is None
    rest = [{"role": "user", "parts": [{"text": "Q?"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"rows": [1, 2]}}}]}]
    assert request_question(rest) == "Q?"
    assert [(p.source, p.text) for p in request_context(rest)] == [("tool:f", '{"rows": [1, 2]}')]
    reader = ChunkReader()
    reader.add({"candidates": [{"content": {"parts": [{"text": "thinking...", "thought": True}, {"text": "Answer."}]}}]})
    assert reader.completion().text == "Answer."
    blocked = ChunkReader()
    blocked.add({"candidates": [], "prompt_feedback": {"block_reason": "SAFETY"}})
    assert blocked.completion().finish_reason == "BLOCKED:SAFETY" and blocked.completion().text is None
