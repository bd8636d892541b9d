"""The contract every provider module keeps, run against each SDK's own client and its wire server.

Each test runs three times: the real ``openai``, ``anthropic`` and ``google-genai`` SDKs against
the local server (tests/fake_llm_server.py) speaking that SDK's wire format (tests/*_wire.py), with
the SDK's own transport, retries, SSE decoding and error mapping, and the real embedder. What only
one SDK has (its request shapes, its helpers) is tested in tests/test_<sdk>_provider.py.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import gc
import importlib
import inspect
import logging
import threading
import types as pytypes
from dataclasses import dataclass
from typing import Any, Callable

import pytest
from conftest import BrokenEmbedder
from fake_llm_server import Reply
from provider_cases import CONTEXT, FLAGGED, GROUNDED, QUESTION

from groundlens_core.providers import ProviderResponse
from groundlens_core.scoring.results import DGIResult, SGIResult


@dataclass
class Sdk:
    """One SDK as the contract sees it: how to make its clients, script its server and call it."""

    name: str
    api: Any  # groundlens_core.providers.<name>
    provider: type
    make: Callable[..., Any]  # make(server, retries=2) -> sync client
    amake: Callable[..., Any]  # amake(server) -> async client
    reply: Callable[..., Reply]  # reply(text, usage=(21, 9)) -> a whole answer
    chunks: Callable[..., Reply]  # chunks(text, piece=20, usage=(21, 9), cut_after=None) -> a streamed answer
    cut: int  # the cut_after that lets only the first text piece through
    says: Callable[[str], Any]  # a server default answering every request with a text
    tool_turn: Callable[[], Any]  # a server default answering with a call of get_weather only
    error: Callable[..., Reply]  # error(status, message, headers=None)
    call: Callable[..., Any]  # call(client, text, stream=False, **kw): the instrumented method
    event_text: Callable[[Any], str]  # the text an instrumented stream's event carries
    user_text: Callable[[dict], str]  # the user message of a guard request body
    timeout: Callable[[], dict]  # the keywords of a 0.5 s time-out for one call
    client_kwargs: Callable[[Any], dict]  # guard keywords that make a client for the server
    node: str
    stream_node: str
    model: str  # the model the wire answers with
    finish: str
    response_type: type
    stream_types: tuple[type, type]
    server_error: type
    cut_error: type
    acut_error: Any  # the same on the async client (google-genai reads with aiohttp when it is installed)
    import_name: str
    stainless: bool


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def _whole_and_cut(answer: Callable[[str, tuple[int, int]], dict], events: Callable[..., list]) -> dict[str, Any]:
    """``reply`` and ``chunks`` for a wire whose stream is its whole answer cut into events:
    ``answer(text, usage)`` is the answer's body, ``events(body, piece=n)`` that body streamed."""
    return {
        "reply": lambda text, usage=(21, 9): Reply.json(answer(text, usage)),
        "chunks": lambda text, piece=20, usage=(21, 9), cut_after=None: Reply.sse(
            events(answer(text, usage), piece=piece), cut_after=cut_after),
    }


def _openai() -> Sdk:
    openai = pytest.importorskip("openai")
    httpx = pytest.importorskip("httpx")
    from openai_wire import MODEL, chat_chunks, chat_completion, chat_reply, echo_chat

    from groundlens_core.providers import openai as api

    def tool_turn():
        def handle(request):
            if request.json.get("stream"):
                return Reply.sse(chat_chunks([], tool_call=("get_weather", {"city": "Oslo"})))
            return Reply.json(chat_completion(None, tool_calls=[("get_weather", {"city": "Oslo"})]))
        return handle

    def call(c, text, stream=False, **kw):
        return c.chat.completions.create(model="m", messages=[{"role": "user", "content": text}],
                                         **({"stream": True} if stream else {}), **kw)

    return Sdk(
        name="openai", api=api, provider=api.OpenAIProvider,
        make=lambda s, retries=2: openai.OpenAI(base_url=s.url + "/v1", api_key="k", max_retries=retries, timeout=120),
        amake=lambda s: openai.AsyncOpenAI(base_url=s.url + "/v1", api_key="k", max_retries=2, timeout=120),
        reply=lambda text, usage=(21, 9): chat_reply(text, usage=usage),
        chunks=lambda text, piece=20, usage=(21, 9), cut_after=None: Reply.sse(
            chat_chunks(_pieces(text, piece), usage=usage), cut_after=cut_after),
        cut=2, says=echo_chat, tool_turn=tool_turn,
        error=lambda status, message="scripted failure", headers=None: Reply.error(status, message, headers=headers),
        call=call,
        event_text=lambda e: (e.choices[0].delta.content or "") if e.choices else "",
        user_text=lambda body: body["messages"][-1]["content"],
        timeout=lambda: {"timeout": 0.5},
        client_kwargs=lambda s: {"base_url": s.url + "/v1", "api_key": "from-kwargs"},
        node="openai.chat", stream_node="openai.chat", model=MODEL, finish="stop",
        response_type=openai.types.chat.ChatCompletion, stream_types=(openai.Stream, openai.AsyncStream),
        server_error=openai.InternalServerError, cut_error=httpx.RemoteProtocolError, acut_error=httpx.RemoteProtocolError,
        import_name="openai", stainless=True,
    )


def _anthropic() -> Sdk:
    anthropic = pytest.importorskip("anthropic")
    httpx2 = pytest.importorskip("httpx2")
    from anthropic_wire import error_body, message, message_events, model

    from groundlens_core.providers import anthropic as api

    def call(c, text, stream=False, **kw):
        return c.messages.create(model="m", max_tokens=100, messages=[{"role": "user", "content": text}],
                                 **({"stream": True} if stream else {}), **kw)

    def error(status, message="scripted failure", headers=None):
        kind = {400: "invalid_request_error", 429: "rate_limit_error"}.get(status, "api_error")
        return Reply.json(error_body(kind, message), status=status, headers=headers)

    return Sdk(
        name="anthropic", api=api, provider=api.AnthropicProvider,
        make=lambda s, retries=2: anthropic.Anthropic(base_url=s.url, api_key="k", max_retries=retries, timeout=120),
        amake=lambda s: anthropic.AsyncAnthropic(base_url=s.url, api_key="k", max_retries=2, timeout=120),
        **_whole_and_cut(lambda text, usage: message(text, input_tokens=usage[0], output_tokens=usage[1]), message_events),
        cut=4, says=lambda text: model(lambda body: message(text)),
        tool_turn=lambda: model(lambda body: message(None, tool_uses=[("get_weather", {"city": "Oslo"})])),
        error=error, call=call,
        event_text=lambda e: e.delta.text if e.type == "content_block_delta" and e.delta.type == "text_delta" else "",
        user_text=lambda body: body["messages"][0]["content"],
        timeout=lambda: {"timeout": 0.5},
        client_kwargs=lambda s: {"base_url": s.url, "api_key": "from-kwargs", "max_retries": 0},
        node="anthropic.messages", stream_node="anthropic.messages", model="claude-test", finish="end_turn",
        response_type=anthropic.types.Message, stream_types=(anthropic.Stream, anthropic.AsyncStream),
        server_error=anthropic.InternalServerError, cut_error=httpx2.RemoteProtocolError,
        acut_error=httpx2.RemoteProtocolError,
        import_name="anthropic", stainless=True,
    )


def _google() -> Sdk:
    genai = pytest.importorskip("google.genai")
    httpx2 = pytest.importorskip("httpx2")
    from google.genai import errors, types
    from google_wire import error, model, response, stream_chunks

    from groundlens_core.providers import google as api

    def make(s, retries=2):
        retry = types.HttpRetryOptions(attempts=retries + 1, initial_delay=0.01, max_delay=0.02, jitter=0)
        return genai.Client(api_key="k", http_options=types.HttpOptions(
            base_url=s.url, timeout=120_000, **({"retry_options": retry} if retries else {})))

    def call(c, text, stream=False, **kw):
        method = c.models.generate_content_stream if stream else c.models.generate_content
        return method(model="m", contents=text, **kw)

    return Sdk(
        name="google", api=api, provider=api.GoogleProvider,
        make=make, amake=lambda s: _kept(make(s)).aio,
        **_whole_and_cut(lambda text, usage: response(text, prompt_tokens=usage[0], output_tokens=usage[1]), stream_chunks),
        cut=1, says=lambda text: model(lambda body: response(text)),
        tool_turn=lambda: model(lambda body: response(None, function_calls=[("get_weather", {"city": "Oslo"})])),
        error=error, call=call,
        event_text=lambda e: e.text or "",
        user_text=lambda body: body["contents"][0]["parts"][0]["text"],
        timeout=lambda: {"config": types.GenerateContentConfig(http_options=types.HttpOptions(timeout=500))},
        client_kwargs=lambda s: {"api_key": "from-kwargs", "http_options": {"base_url": s.url}},
        node="gcp.gemini.generate_content", stream_node="gcp.gemini.generate_content_stream", model="gemini-test",
        finish="STOP", response_type=types.GenerateContentResponse,
        stream_types=(pytypes.GeneratorType, pytypes.AsyncGeneratorType),
        server_error=errors.ServerError, cut_error=httpx2.RemoteProtocolError,
        acut_error=(httpx2.RemoteProtocolError, *_aiohttp_payload_error()),
        import_name="google.genai", stainless=False,
    )


def _aiohttp_payload_error() -> tuple[type, ...]:
    try:
        import aiohttp
    except ImportError:
        return ()
    return (aiohttp.ClientPayloadError,)


_KEPT: list[Any] = []


def _kept(client: Any) -> Any:
    """google-genai closes a client's transport when it is collected: keep the sync side of an ``aio``."""
    _KEPT.append(client)
    return client


SDKS = {"openai": _openai, "anthropic": _anthropic, "google": _google}


@pytest.fixture(params=list(SDKS))
def sdk(request) -> Sdk:
    return SDKS[request.param]()


@pytest.fixture(params=["openai", "anthropic"])
def stainless(request) -> Sdk:
    """The SDKs whose streams are objects with ``close()`` and ``with`` (the Stainless-made ones)."""
    return SDKS[request.param]()


@pytest.fixture
def client(sdk, fake_llm_server):
    return sdk.make(fake_llm_server)


@pytest.fixture
def guard(sdk, client, dgi_calibration):
    return sdk.provider(model="m", client=client, calibration=dgi_calibration)


async def _aclose(client: Any) -> None:
    for name in ("close", "aclose"):
        method = getattr(client, name, None)
        if method is not None:
            result = method()
            if inspect.isawaitable(result):
                await result
            return


def _steps(guard) -> list:
    return [s for t in guard.get_traces() for s in t.steps]


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # what a caller sees: the type and the message
        return (type(exc), str(exc))


# ---------------------------------------------------------------- guard calls


def test_complete_with_context_scores_sgi_and_returns_the_sdk_response(sdk, guard, fake_llm_server):
    fake_llm_server.add(sdk.reply(GROUNDED, usage=(40, 17)))
    answer = guard.complete(QUESTION, context=CONTEXT, system="Be brief.")

    assert isinstance(answer, ProviderResponse) and isinstance(answer.raw, sdk.response_type)
    assert answer.text == GROUNDED and answer.model == sdk.model and answer.finish_reason == sdk.finish
    assert (answer.usage.input_tokens, answer.usage.output_tokens, answer.usage.total_tokens) == (40, 17, 57)
    assert isinstance(answer.groundlens_result, SGIResult) and answer.triage == "trusted"
    assert not answer.flagged and answer.scoring_error is None
    with pytest.raises(Exception):  # frozen
        answer.text = "changed"  # type: ignore[misc]

    user = sdk.user_text(fake_llm_server.requests[-1].json)  # the one documented way the context is sent
    assert user.endswith(QUESTION) and f"<context>\n{CONTEXT}\n</context>" in user
    step = guard.get_trace().steps[0]  # the question scored is the prompt, not the prompt with its context
    assert step.question == QUESTION and step.method == "sgi" and step.provider == guard.provider
    assert [c.source for c in step.context] == ["context"] and step.model == sdk.model
    assert step.metadata["finish_reason"] == sdk.finish
    assert step.result.value == pytest.approx(answer.groundlens_result.value)


def test_complete_without_context_scores_dgi_on_the_question_given(sdk, guard, fake_llm_server):
    fake_llm_server.add(sdk.reply("The capital of France is Paris."))
    answer = guard.complete("Answer in one sentence: what is the capital of France?",
                            question="What is the capital of France?")
    assert isinstance(answer.groundlens_result, DGIResult)
    assert "<context>" not in sdk.user_text(fake_llm_server.requests[-1].json)
    step = guard.get_trace().steps[0]
    assert step.question == "What is the capital of France?" and step.metadata["question_source"] == "question"


def test_guard_modes(sdk, client, fake_llm_server, dgi_calibration):
    fake_llm_server.default = sdk.says(FLAGGED)
    annotate = sdk.provider(model="m", client=client, calibration=dgi_calibration)
    answer = annotate.complete(QUESTION, context=CONTEXT)
    assert answer.flagged and answer.triage == "flagged"

    seen = []
    callback = sdk.provider(model="m", client=client, calibration=dgi_calibration,
                            on_flagged=lambda inline, response: seen.append((inline.result, response)))
    flagged_answer = callback.complete(QUESTION, context=CONTEXT)
    assert len(seen) == 1 and seen[0][1] is flagged_answer and seen[0][0].flagged

    strict = sdk.provider(model="m", client=client, calibration=dgi_calibration, mode="raise")
    with pytest.raises(sdk.api.GroundlensFlaggedError) as caught:
        strict.complete(QUESTION, context=CONTEXT)
    assert caught.value.result.flagged and caught.value.response.text == FLAGGED
    trace = strict.get_trace()  # the step is recorded before the raise; the trace says it ended abnormally
    assert trace.steps[0].triage == "flagged" and trace.status == "error"
    fake_llm_server.default = sdk.says(GROUNDED)
    assert not strict.complete(QUESTION, context=CONTEXT).flagged  # a grounded answer passes


def test_a_scoring_failure_is_kept_on_the_response_and_never_raised(internal_errors_logged, sdk, client, fake_llm_server, caplog):
    fake_llm_server.add(sdk.reply(GROUNDED))
    guard = sdk.provider(model="m", client=client, embedder=BrokenEmbedder(), mode="raise")
    with caplog.at_level(logging.WARNING, logger="groundlens"):
        answer = guard.complete(QUESTION, context=CONTEXT)
    assert answer.text == GROUNDED and answer.groundlens_result is None
    assert "embedder exploded" in answer.scoring_error
    step = guard.get_trace().steps[0]
    assert step.method == "error" and "embedder exploded" in step.error
    assert any("embedder exploded" in r.getMessage() for r in caplog.records)


def test_bad_input_is_a_one_line_error_before_any_request(sdk, guard, fake_llm_server):
    with pytest.raises(TypeError, match="prompt must be non-blank text"):
        guard.complete("   ")
    with pytest.raises(TypeError, match="needs a model"):
        sdk.provider(client=guard.client).complete("hi")
    with pytest.raises(ValueError, match="mode must be one of"):
        sdk.provider(model="m", client=guard.client, mode="shout")
    with pytest.raises(TypeError, match=r"no stream=True; use \.stream\(\)"):
        guard.complete("hi", stream=True)
    with pytest.raises(TypeError, match="context must be text"):
        guard.complete("hi", context=[42])
    assert fake_llm_server.requests == []


def test_http_errors_are_the_sdks_own_and_a_retried_429_is_recorded_once(sdk, fake_llm_server, dgi_calibration):
    once = sdk.provider(model="m", client=sdk.make(fake_llm_server, retries=0), calibration=dgi_calibration)
    fake_llm_server.add(sdk.error(500, "the server fell over"))
    with pytest.raises(sdk.server_error):
        once.complete(QUESTION, context=CONTEXT)
    trace = once.get_trace()
    assert trace.steps[0].method == "error" and sdk.server_error.__name__ in trace.steps[0].error
    assert trace.status == "error" and trace.steps[0].metadata["sdk_error"] == sdk.server_error.__name__

    retrying = sdk.provider(model="m", client=sdk.make(fake_llm_server), calibration=dgi_calibration)
    fake_llm_server.add(sdk.error(429, "slow down", headers={"retry-after-ms": "10", "retry-after": "0"}),
                        sdk.reply(GROUNDED))
    assert retrying.complete(QUESTION, context=CONTEXT).text == GROUNDED
    assert len(fake_llm_server.requests) == 3 and [s.method for s in retrying.get_trace().steps] == ["sgi"]


def test_client_kwargs_make_the_client(sdk, fake_llm_server, dgi_calibration):
    fake_llm_server.add(sdk.reply(GROUNDED))
    guard = sdk.provider(model="m", calibration=dgi_calibration, **sdk.client_kwargs(fake_llm_server))
    assert guard.complete(QUESTION).text == GROUNDED
    assert any("from-kwargs" in v for v in fake_llm_server.requests[-1].headers.values())


# ---------------------------------------------------------------- guard streams


def test_stream_yields_chunks_then_the_scored_response(sdk, guard, fake_llm_server):
    fake_llm_server.add(sdk.chunks(GROUNDED, usage=(30, 11)))
    stream = guard.stream(QUESTION, context=CONTEXT)
    assert stream.response is None
    chunks = list(stream)
    assert len(chunks) > 1 and "".join(chunks) == GROUNDED and stream.text == GROUNDED
    answer = stream.response
    assert answer.text == GROUNDED and isinstance(stream.groundlens_result, SGIResult)
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (30, 11) and answer.finish_reason == sdk.finish
    assert isinstance(stream.raw, sdk.stream_types[0])
    step = guard.get_trace().steps[0]
    assert step.method == "sgi" and step.metadata["streaming"] is True


def test_the_responses_older_groundlens_score_name_still_works_and_warns():
    result = object()
    answer = ProviderResponse(text="t", model=None, usage=None, groundlens_result=result, finish_reason=None, raw=None)
    with pytest.warns(DeprecationWarning, match=r"use \.groundlens_result"):
        assert answer.groundlens_score is result


def test_the_streams_older_groundlens_score_name_still_works_and_warns(sdk, guard, fake_llm_server):
    fake_llm_server.add(sdk.chunks(GROUNDED))
    stream = guard.stream(QUESTION, context=CONTEXT)
    list(stream)
    with pytest.warns(DeprecationWarning, match=r"use \.groundlens_result"):
        assert stream.groundlens_score is stream.groundlens_result is not None


def test_stream_cut_midway_raises_the_sdks_error_and_records_it(sdk, guard, fake_llm_server):
    fake_llm_server.add(sdk.chunks(GROUNDED, cut_after=sdk.cut))
    stream = guard.stream(QUESTION, context=CONTEXT)
    got = []
    with pytest.raises(sdk.cut_error):
        for text in stream:
            got.append(text)
    assert got == [GROUNDED[:20]] and stream.response is None
    step = guard.get_trace().steps[0]
    assert step.method == "error" and "RemoteProtocolError" in step.error and step.response == GROUNDED[:20]
    assert step.metadata["sdk_error"] == "RemoteProtocolError"


def test_a_guard_stream_left_early_records_what_came_once(sdk, guard, fake_llm_server):
    fake_llm_server.add(sdk.chunks(GROUNDED))
    with guard.stream(QUESTION, context=CONTEXT) as stream:
        first = next(iter(stream))
    assert first == GROUNDED[:20] and stream.response is None
    stream.close()  # a second close records nothing more
    fake_llm_server.add(sdk.chunks("unread"))
    guard.stream(QUESTION).close()  # closed before the first chunk
    first_step, second_step = [t.steps for t in guard.get_traces()]
    assert len(first_step) == 1 and len(second_step) == 1
    assert first_step[0].metadata["stream_incomplete"] is True and first_step[0].response == GROUNDED[:20]
    assert first_step[0].method == "sgi"  # scored by the recorder, in the background
    assert second_step[0].metadata["stream_incomplete"] is True and second_step[0].method == "skipped"


def test_stream_in_raise_mode_raises_after_the_last_chunk(sdk, client, fake_llm_server, dgi_calibration):
    fake_llm_server.add(sdk.chunks(FLAGGED, piece=200))
    guard = sdk.provider(model="m", client=client, calibration=dgi_calibration, mode="raise")
    got = []
    with pytest.raises(sdk.api.GroundlensFlaggedError):
        for text in guard.stream(QUESTION, context=CONTEXT):
            got.append(text)
    assert got == [FLAGGED] and guard.get_trace().steps[0].triage == "flagged"


async def test_acomplete_and_astream_with_the_async_client(sdk, fake_llm_server, dgi_calibration):
    fake_llm_server.default = sdk.says(GROUNDED)
    aclient = sdk.amake(fake_llm_server)
    guard = sdk.provider(model="m", client=aclient, calibration=dgi_calibration)
    answer = await guard.acomplete(QUESTION, context=CONTEXT)
    assert answer.text == GROUNDED and isinstance(answer.raw, sdk.response_type) and answer.triage == "trusted"

    stream = await guard.astream(QUESTION, context=CONTEXT)
    assert "".join([c async for c in stream]) == GROUNDED and stream.response.triage == "trusted"
    assert isinstance(stream.raw, sdk.stream_types[1])
    with pytest.raises(TypeError, match="async client"):
        guard.complete(QUESTION)

    fake_llm_server.add(sdk.chunks(GROUNDED, cut_after=sdk.cut))
    with pytest.raises(sdk.acut_error) as cut:
        async for _ in await guard.astream(QUESTION, context=CONTEXT):
            pass
    async with await guard.astream(QUESTION, context=CONTEXT) as left:
        async for _ in left:
            break
    fake_llm_server.add(*[sdk.error(400, "bad request")])
    with pytest.raises(Exception) as caught:
        await guard.acomplete(QUESTION)
    assert "400" in str(caught.value) or "bad request" in str(caught.value)
    steps = [t.steps for t in guard.get_traces()]
    assert all(len(s) == 1 for s in steps)
    assert [s[0].method for s in steps] == ["sgi", "sgi", "error", "error", "sgi", "error"]
    assert "given an async client" in steps[2][0].error  # no sync client: an error step, nothing sent
    assert steps[3][0].metadata["sdk_error"] == type(cut.value).__name__
    assert steps[4][0].metadata["stream_incomplete"] is True
    await _aclose(aclient)


async def test_acomplete_with_only_a_sync_client(sdk, guard, fake_llm_server):
    fake_llm_server.add(sdk.reply(GROUNDED))
    answer = await guard.acomplete(QUESTION, context=CONTEXT)
    assert answer.text == GROUNDED and answer.triage == "trusted"


def test_asyncio_run_of_acomplete_does_not_block_the_loop(sdk, client, fake_llm_server, dgi_calibration):
    """Scoring runs in a worker thread: the embedder waits (bounded) for a tick of the loop while it
    encodes, which comes at once off the loop and never on the loop's own thread."""
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

        def encode_spans(self, texts, spans):  # the evidence's path: whole texts and their sentences
            ticked.clear()
            seen.append(ticked.wait(60))
            return self._inner.encode_spans(texts, spans)

        def __getattr__(self, name):
            return getattr(self._inner, name)

    fake_llm_server.add(sdk.reply(GROUNDED))
    guard = sdk.provider(model="m", client=client, calibration=dgi_calibration, embedder=WaitsForATick(get_embedder()))

    async def main():
        done = asyncio.Event()

        async def ticker():
            while not done.is_set():
                ticked.set()
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        answer = await guard.acomplete(QUESTION, context=CONTEXT)
        done.set()
        await task
        return answer

    assert asyncio.run(main()).groundlens_result is not None and seen and all(seen)


# ---------------------------------------------------------------- instrumented clients


def test_instrumented_call_is_sent_unchanged_and_recorded(sdk, client, fake_llm_server, dgi_calibration):
    fake_llm_server.add(sdk.reply(GROUNDED, usage=(50, 20)), sdk.reply(GROUNDED, usage=(50, 20)))
    bare = sdk.make(fake_llm_server)
    sdk.call(bare, QUESTION)
    same = sdk.api.instrument(client, name="support-bot", calibration=dgi_calibration)
    assert same is client and sdk.api.guard_of(client).framework == sdk.name

    result = sdk.call(client, QUESTION, groundlens_context=CONTEXT)
    assert isinstance(result, sdk.response_type)
    assert fake_llm_server.requests[-1].json == fake_llm_server.requests[-2].json  # sent exactly as without us
    trace = sdk.api.guard_of(client).get_trace()
    assert trace.name == "support-bot" and trace.framework == sdk.name
    step = trace.steps[0]
    assert step.kind == "llm" and step.method == "sgi" and step.node == sdk.node and step.response == GROUNDED
    assert step.question == QUESTION and [(c.source, c.text) for c in step.context] == [("attached", CONTEXT)]
    assert (step.usage.input_tokens, step.usage.output_tokens) == (50, 20) and step.model == sdk.model


def test_a_tool_call_only_turn_is_an_unscored_tool_call_step(sdk, client, fake_llm_server):
    fake_llm_server.default = sdk.tool_turn()
    guard = sdk.provider(client=client)
    guard.instrument(client)
    sdk.call(client, "Weather in Oslo?")
    list(sdk.call(client, "Weather in Oslo?", stream=True))
    steps = [t.steps[0] for t in guard.get_traces()]
    assert [s.kind for s in steps] == ["tool_call"] * 2 and {s.method for s in steps} == {"skipped"}
    assert all(s.metadata["tool_calls"] == ["get_weather"] for s in steps)


def test_trace_block_groups_calls_and_using_context_attaches_without_sending(sdk, client, fake_llm_server,
                                                                             dgi_calibration):
    fake_llm_server.default = sdk.says(GROUNDED)
    guard = sdk.provider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    with guard.trace("rag-session"), sdk.api.using_context(CONTEXT):
        sdk.call(client, QUESTION, groundlens_node="answer")
        sdk.call(client, "Say it again.", groundlens_question=QUESTION)
    sdk.call(client, "Outside the block")
    traces = guard.get_traces()
    assert traces[-2].name == "rag-session" and len(traces[-2].steps) == 2
    first, second = traces[-2].steps
    assert first.node == "answer" and first.method == "sgi" and first.context[0].source == "attached"
    assert second.question == QUESTION and second.metadata["question_source"] == "groundlens_question"
    assert traces[-1].steps[0].method == "dgi" and traces[-1].steps[0].context == ()  # the block's context ended
    assert all(CONTEXT not in r.body.decode() for r in fake_llm_server.requests)


def test_concurrent_threads_keep_their_own_context(sdk, client, fake_llm_server, dgi_calibration):
    fake_llm_server.default = sdk.says(GROUNDED)
    guard = sdk.provider(client=client, calibration=dgi_calibration)
    guard.instrument(client)

    def worker(i: int) -> None:
        with sdk.api.using_context(f"document {i}"):
            sdk.call(client, f"question {i}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    pairs = sorted((t.steps[0].question, t.steps[0].context[0].text) for t in guard.get_traces())
    assert pairs == [(f"question {i}", f"document {i}") for i in range(4)]


def test_an_instrumented_stream_is_the_sdks_and_recorded_when_it_ends(sdk, client, fake_llm_server, dgi_calibration):
    fake_llm_server.add(sdk.chunks(GROUNDED, usage=(12, 6)))
    guard = sdk.provider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    stream = sdk.call(client, QUESTION, stream=True, groundlens_context=CONTEXT)
    assert isinstance(stream, sdk.stream_types[0])
    assert "".join(sdk.event_text(e) for e in stream) == GROUNDED
    step = guard.get_trace().steps[0]
    assert step.method == "sgi" and step.response == GROUNDED and step.usage.output_tokens == 6
    assert step.node == sdk.stream_node and step.metadata["streaming"] is True and step.metadata["stream"] is True


def test_an_instrumented_stream_left_early_is_recorded_once_when_closed(sdk, client, fake_llm_server,
                                                                        dgi_calibration):
    fake_llm_server.add(sdk.chunks(GROUNDED), sdk.chunks("never read"))
    guard = sdk.provider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    stream = sdk.call(client, QUESTION, stream=True)
    for event in stream:
        if sdk.event_text(event):
            break  # the caller stops reading after the first text
    stream.close()  # the SDK stream's own close()
    # opened and closed unread: a Stainless SDK has sent the request (a step); google-genai sends
    # it only when the stream is first read (nothing to record)
    sdk.call(client, QUESTION, stream=True).close()
    traces = guard.get_traces()
    assert [len(t.steps) for t in traces] == ([1, 1] if sdk.stainless else [1, 0])
    assert all(t.ended_at is not None for t in traces if t.steps)
    left = traces[0].steps[0]
    assert left.metadata["stream_incomplete"] is True and left.response == GROUNDED[:20]
    if sdk.stainless:
        never = traces[1].steps[0]
        assert never.metadata["stream_incomplete"] is True and never.response is None
    with contextlib.suppress(Exception):  # read after close: the SDK's business; never a second step
        list(stream)
    del stream, event
    gc.collect()
    assert [len(t.steps) for t in guard.get_traces()] == ([1, 1] if sdk.stainless else [1, 0])


def test_an_instrumented_stream_left_in_a_with_block_is_recorded_on_exit(stainless, fake_llm_server,
                                                                         dgi_calibration):
    """``with`` calls the SDK stream's ``close()``: the step lands then, not when Python collects
    the stream (the caller still holds it here, and no gc runs)."""
    sdk = stainless
    client = sdk.make(fake_llm_server)
    fake_llm_server.add(sdk.chunks(GROUNDED))
    guard = sdk.provider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    with sdk.call(client, QUESTION, stream=True) as stream:
        assert isinstance(stream, sdk.stream_types[0])
        for event in stream:
            if sdk.event_text(event):
                break
    assert stream.response.is_closed  # the SDK's own close still ran
    [step] = guard.get_trace().steps
    assert step.metadata["stream_incomplete"] is True and step.response == GROUNDED[:20]


async def test_an_async_instrumented_stream_left_early_is_recorded_on_exit(sdk, fake_llm_server, dgi_calibration):
    fake_llm_server.add(sdk.chunks(GROUNDED))
    aclient = sdk.amake(fake_llm_server)
    guard = sdk.provider(client=aclient, calibration=dgi_calibration)
    guard.instrument(aclient)
    stream = await sdk.call(aclient, QUESTION, stream=True)
    assert isinstance(stream, sdk.stream_types[1])
    if sdk.stainless:  # the tapped stream's close() is a coroutine function, as the SDK's own is
        assert inspect.iscoroutinefunction(stream.close)
    async with contextlib.aclosing(stream) if not sdk.stainless else stream:
        async for event in stream:
            if sdk.event_text(event):
                break
    [step] = guard.get_trace().steps
    assert step.metadata["stream_incomplete"] is True and step.response == GROUNDED[:20]
    await _aclose(aclient)


async def test_guard_calls_through_a_client_the_guard_instrumented_are_recorded_once(sdk, client, fake_llm_server,
                                                                                    dgi_calibration):
    """``guard.instrument()`` instruments the guard's own client: its guard calls stay one step each,
    not gaining a second step that scores the prompt-with-context as the question."""
    fake_llm_server.default = sdk.says(GROUNDED)
    aclient = sdk.amake(fake_llm_server)
    guard = sdk.provider(model="m", client=client, async_client=aclient, calibration=dgi_calibration)
    guard.instrument()
    guard.instrument(aclient)
    guard.complete(QUESTION, context=CONTEXT)
    list(guard.stream(QUESTION, context=CONTEXT))
    await guard.acomplete(QUESTION, context=CONTEXT)
    async for _ in await guard.astream(QUESTION, context=CONTEXT):
        pass
    sdk.call(client, QUESTION)  # the client's own calls are still recorded
    steps = _steps(guard)
    assert [s.method for s in steps] == ["sgi", "sgi", "sgi", "sgi", "dgi"]
    assert all(s.question == QUESTION for s in steps)
    await _aclose(aclient)


async def test_an_instrumented_async_client(sdk, fake_llm_server, dgi_calibration):
    fake_llm_server.default = sdk.says(GROUNDED)
    aclient = sdk.amake(fake_llm_server)
    guard = sdk.provider(client=aclient, calibration=dgi_calibration)
    assert guard.instrument() is aclient
    result = await sdk.call(aclient, QUESTION, groundlens_context=CONTEXT)
    assert isinstance(result, sdk.response_type)
    stream = await sdk.call(aclient, QUESTION, stream=True)
    assert "".join([sdk.event_text(e) async for e in stream]) == GROUNDED
    fake_llm_server.add(sdk.chunks(GROUNDED, cut_after=sdk.cut))
    with pytest.raises(sdk.acut_error):
        async for _ in await sdk.call(aclient, QUESTION, stream=True):
            pass
    fake_llm_server.add(sdk.error(400, "bad request"))
    with pytest.raises(Exception):
        await sdk.call(aclient, QUESTION)
    steps = [t.steps[0] for t in guard.get_traces()]
    assert [s.method for s in steps] == ["sgi", "dgi", "error", "error"]
    assert steps[2].response == GROUNDED[:20] and steps[2].node == sdk.stream_node
    await _aclose(aclient)


def test_errors_are_exactly_the_sdks_with_and_without_instrumentation(sdk, fake_llm_server):
    """A 500 after the SDK's retries, a 400, a time-out and a cut stream: the same exception, bare or
    instrumented, and one error step each. Only the time-out scenario has a short time-out (per
    call, 0.5 s against a reply held 10 s), so a slow reply on a loaded machine is no time-out."""
    def scenarios(c):
        yield [sdk.error(500, "boom")] * 2, lambda: sdk.call(c, "hi")
        yield [sdk.error(400, "bad request")], lambda: sdk.call(c, "hi")
        late = dataclasses.replace(sdk.reply("late"), delay=10)
        yield [late] * 2, lambda: sdk.call(c, "hi", **sdk.timeout())
        yield [sdk.chunks("a b c d e f g h", piece=2, cut_after=sdk.cut)], lambda: [
            sdk.event_text(e) for e in sdk.call(c, "hi", stream=True)]

    bare, wrapped = sdk.make(fake_llm_server, retries=1), sdk.make(fake_llm_server, retries=1)
    guard = sdk.provider(client=wrapped)
    guard.instrument(wrapped)
    for (replies, call_bare), (_, call_wrapped) in zip(scenarios(bare), scenarios(wrapped)):
        fake_llm_server.add(*replies)
        expected = _outcome(call_bare)
        fake_llm_server.add(*replies)
        got = _outcome(call_wrapped)
        assert expected[0] != "ok" and got == expected
    steps = _steps(guard)
    assert [s.method for s in steps] == ["error"] * 4 and all(s.metadata.get("sdk_error") for s in steps)


def test_scoring_of_instrumented_calls_runs_off_the_callers_thread(sdk, client, fake_llm_server):
    from groundlens_core import get_embedder

    threads: list[str] = []

    class SpyEmbedder:
        def __init__(self, inner):
            self._inner = inner

        def encode(self, texts):
            threads.append(threading.current_thread().name)
            return self._inner.encode(texts)

        def encode_spans(self, texts, spans):
            threads.append(threading.current_thread().name)
            return self._inner.encode_spans(texts, spans)

        def __getattr__(self, name):
            return getattr(self._inner, name)

    fake_llm_server.default = sdk.says(GROUNDED)
    guard = sdk.provider(client=client, embedder=SpyEmbedder(get_embedder()))
    guard.instrument(client)
    sdk.call(client, QUESTION)
    list(sdk.call(client, QUESTION, stream=True))
    assert [t.steps[0].method for t in guard.get_traces()] == ["dgi", "dgi"]
    assert threads and threading.current_thread().name not in threads  # the recorder's worker embedded


def test_our_failure_never_breaks_an_instrumented_call(internal_errors_logged, sdk, client, fake_llm_server, caplog):
    fake_llm_server.default = sdk.says(GROUNDED)
    guard = sdk.provider(client=client)
    guard.instrument(client)

    def broken(*args, **kwargs):
        raise RuntimeError("reader bug")

    guard._read_request = broken  # our own code fails (not the SDK's)
    with caplog.at_level(logging.WARNING, logger="groundlens"):
        result = sdk.call(client, "hi", groundlens_context="never sent")
    assert isinstance(result, sdk.response_type) and "never sent" not in fake_llm_server.requests[-1].body.decode()
    del guard._read_request
    guard._stream_reader = broken  # fails as the stream is handed over
    with caplog.at_level(logging.WARNING, logger="groundlens"):
        assert "".join(sdk.event_text(e) for e in sdk.call(client, "hi", stream=True)) == GROUNDED
    assert any("reader bug" in r.getMessage() for r in caplog.records)
    assert [s.method for s in _steps(guard)] == ["error", "error"] and "reader bug" in _steps(guard)[0].error


def test_a_scoring_failure_of_an_instrumented_call_is_an_error_step(sdk, client, fake_llm_server, caplog):
    fake_llm_server.add(sdk.reply(GROUNDED))
    guard = sdk.provider(client=client, embedder=BrokenEmbedder())
    guard.instrument(client)
    with caplog.at_level(logging.WARNING, logger="groundlens"):
        result = sdk.call(client, QUESTION)
        step = guard.get_trace().steps[0]
    assert isinstance(result, sdk.response_type)
    assert step.method == "error" and "embedder exploded" in step.error and step.response == GROUNDED


def test_uninstrument_puts_the_sdk_methods_back(sdk, client, fake_llm_server):
    fake_llm_server.default = sdk.says(GROUNDED)
    guard = sdk.provider(client=client)
    assert guard.instrument(guard.instrument(client)) is client and sdk.api.guard_of(client) is guard
    assert sdk.provider(client=client).instrument(client) is client and sdk.api.guard_of(client) is guard
    targets = guard._targets(client)
    assert all(t.attr in vars(t.owner) for t in targets)
    sdk.api.uninstrument(client)
    assert sdk.api.guard_of(client) is None
    assert not any(t.attr in vars(t.owner) for t in targets) and "request" not in vars(client)
    sdk.call(client, "hi")
    list(sdk.call(client, "hi", stream=True))
    assert guard.get_traces() == []


def test_otel_spans_carry_the_provider_and_the_evaluation(sdk, client, fake_llm_server, dgi_calibration):
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    fake_llm_server.add(sdk.reply(GROUNDED))
    sdk.api.instrument(client, tracer_provider=provider, calibration=dgi_calibration)
    sdk.call(client, QUESTION, groundlens_context=CONTEXT)
    sdk.api.guard_of(client).flush()
    chat = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert len(chat) == 1
    attrs = chat[0].attributes
    assert attrs["gen_ai.provider.name"] == sdk.api.guard_of(client).provider
    assert attrs["gen_ai.request.model"] == sdk.model and attrs["gen_ai.usage.input_tokens"] == 21
    assert attrs["gen_ai.evaluation.score.label"] == "trusted"
    provider.shutdown()


def test_missing_sdk_names_the_extra(sdk, monkeypatch):
    real_import = builtins.__import__

    def without_sdk(name, *args, **kwargs):
        if name == sdk.import_name or name.startswith(sdk.import_name + "."):
            raise ImportError(f"No module named '{sdk.import_name}'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_sdk)
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: without_sdk(name))
    with pytest.raises(ImportError, match=rf'pip install "groundlens-core\[{sdk.name}\]"'):
        sdk.provider(model="m")
