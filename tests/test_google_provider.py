"""What only the Gemini module does, through the real ``google-genai`` SDK against its wire server
(tests/google_wire.py): the system instruction merged into the caller's config, function responses as
context, automatic function calling, chat sessions, Vertex AI, the ``aio`` side, and how ``contents``
are read. The contract every provider keeps is in tests/test_provider_contract.py.
"""

from __future__ import annotations

import pytest

genai = pytest.importorskip("google.genai")
httpx2 = pytest.importorskip("httpx2")

from fake_llm_server import Reply  # noqa: E402
from google.genai import errors as genai_errors  # noqa: E402
from google.genai import types  # noqa: E402
from google_wire import error, model, response, stream_chunks  # noqa: E402
from provider_cases import BOT, CONTEXT, GROUNDED, QUESTION, WEATHER, WEATHER_QUESTION, sent, weather_step  # noqa: E402

from groundlens_core.providers import ProviderResponse  # noqa: E402
from groundlens_core.providers.google import (  # noqa: E402
    GoogleProvider,
    guard_of,
    instrument,
    using_context,
)
from groundlens_core.scoring.results import DGIResult, SGIResult  # noqa: E402

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



def test_complete_with_context_scores_sgi_and_returns_the_sdk_response(guard, fake_llm_server):
    fake_llm_server.add(Reply.json(response(GROUNDED, prompt_tokens=40, output_tokens=17)))
    got = guard.complete(QUESTION, context=CONTEXT, system="Be brief.",
                         config=types.GenerateContentConfig(max_output_tokens=200))

    assert isinstance(got, ProviderResponse) and isinstance(got.raw, types.GenerateContentResponse)
    assert got.text == GROUNDED and got.model == "gemini-test" and got.finish_reason == "STOP"
    assert (got.usage.input_tokens, got.usage.output_tokens, got.usage.total_tokens) == (40, 17, 57)
    assert isinstance(got.groundlens_result, SGIResult) and got.triage == "trusted"

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
    assert isinstance(got.groundlens_result, DGIResult)
    body = sent(fake_llm_server)
    assert body["generationConfig"]["temperature"] == 0 and body["systemInstruction"]["parts"][0]["text"] == "Be brief."
    assert guard.get_trace().steps[0].question == "What is the capital of France?"


async def test_acomplete_and_astream_use_the_clients_aio_side(client, fake_llm_server, dgi_calibration):
    fake_llm_server.default = says(GROUNDED)
    guard = GoogleProvider(model="m", client=client, calibration=dgi_calibration)
    assert (await guard.acomplete(QUESTION, context=CONTEXT)).triage == "trusted"
    assert guard._async_client is client.aio  # the caller's own client, not a second one
    stream = await guard.astream(QUESTION, context=CONTEXT)
    assert "".join([c async for c in stream]) == GROUNDED and stream.response.triage == "trusted"


def _tool_conversation() -> list:
    return [
        types.Content(role="user", parts=[types.Part.from_text(text=WEATHER_QUESTION)]),
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
    same = instrument(client, name=BOT, calibration=dgi_calibration)
    assert same is client and guard_of(client).framework == "google"

    result = client.models.generate_content(model="gemini-test", contents=_tool_conversation(),
                                            groundlens_context="Station report, 08:00.")
    assert isinstance(result, types.GenerateContentResponse) and result.text == text
    assert sent(fake_llm_server) == sent(fake_llm_server, -2)  # sent exactly as without us

    step = weather_step(guard_of(client), framework="google", node="gcp.gemini.generate_content", response=text, context=[
        ("tool:get_weather", WEATHER), ("attached", "Station report, 08:00.")])
    assert (step.usage.input_tokens, step.usage.output_tokens, step.usage.total_tokens) == (50, 20, 70)
    assert step.provider == "gcp.gemini" and step.model == "gemini-test"


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


def test_contents_are_read_the_way_the_sdk_reads_them():
    """Strings, loose parts, dicts in REST spelling, thought parts: question and context as the model sees them."""
    from groundlens_core.plugins.providers.google import ChunkReader, request_context, request_question

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

