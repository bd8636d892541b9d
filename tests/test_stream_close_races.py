"""Streams closed by one thread (or asyncio task) while another is reading them: a "stop" button
handled off the reading thread. The real ``openai`` SDK against the local server; the read in
progress is held at a gate (a wrapper around the SDK stream's own event iterator) so the close
always lands in the middle of it."""

from __future__ import annotations

import asyncio
import threading

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from fake_llm_server import Reply  # noqa: E402
from openai_wire import chat_chunks  # noqa: E402

from groundlens_core.providers.openai import OpenAIProvider  # noqa: E402

CONTEXT = "The Aurora-7 battery pack stores 12 kWh and charges fully in 4 hours from a 240 V outlet."
QUESTION = "How long does the Aurora-7 take to charge?"
PARTS = ["It charges ", "fully ", "in 4 hours."]


@pytest.fixture
def client(fake_llm_server):
    c = openai.OpenAI(base_url=fake_llm_server.url + "/v1", api_key="test-key", max_retries=0, timeout=60)
    yield c
    c.close()


def _held_after(events, n: int, blocked: threading.Event, gate: threading.Event):
    """The SDK's events, the read after the ``n``-th held until ``gate`` opens."""
    for i, event in enumerate(events):
        if i == n:
            blocked.set()
            gate.wait(60)
        yield event


def test_a_guard_stream_closed_on_another_thread_mid_read(client, fake_llm_server, dgi_calibration):
    fake_llm_server.add(Reply.sse(chat_chunks(PARTS)))
    guard = OpenAIProvider(model="m", client=client, calibration=dgi_calibration)
    stream = guard.stream(QUESTION, context=CONTEXT)
    blocked, gate = threading.Event(), threading.Event()
    stream.raw._iterator = _held_after(stream.raw._iterator, 2, blocked, gate)  # role chunk, first text
    got: list[str] = []
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            for text in stream:
                got.append(text)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - inspected below
            outcome.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    assert blocked.wait(60)  # the reader is inside its second read
    try:
        stream.close()  # raised "ValueError: generator already executing" into the closing thread
    finally:
        gate.set()
        reader.join(60)
    assert not reader.is_alive() and got == ["It charges "]
    # the reader sees what the SDK gives for a stream closed under it (an end or httpx's error), not ours
    assert outcome[0] is None or isinstance(outcome[0], (httpx.HTTPError, httpx.StreamError)), outcome
    assert stream.raw.response.is_closed
    steps = [s for t in guard.get_traces() for s in t.steps]
    assert len(steps) == 1, steps  # recorded once, by the close
    assert steps[0].metadata["stream_incomplete"] is True and steps[0].response == "It charges "
    assert stream.response is None


async def test_an_async_guard_stream_closed_by_another_task_mid_read(fake_llm_server, dgi_calibration):
    fake_llm_server.add(Reply.sse(chat_chunks(PARTS)))
    aclient = openai.AsyncOpenAI(base_url=fake_llm_server.url + "/v1", api_key="test-key", max_retries=0, timeout=60)
    guard = OpenAIProvider(model="m", client=aclient, calibration=dgi_calibration)
    stream = await guard.astream(QUESTION, context=CONTEXT)
    blocked, gate = asyncio.Event(), asyncio.Event()
    events = stream.raw._iterator

    async def held():
        i = 0
        async for event in events:
            if i == 2:
                blocked.set()
                await gate.wait()
            i += 1
            yield event

    stream.raw._iterator = held()
    got: list[str] = []

    async def read() -> BaseException | None:
        try:
            async for text in stream:
                got.append(text)
        except BaseException as exc:  # noqa: BLE001 - inspected below
            return exc
        return None

    reader = asyncio.create_task(read())
    await asyncio.wait_for(blocked.wait(), 60)
    try:
        await stream.aclose()  # raised "RuntimeError: aclose(): asynchronous generator is already running"
    finally:
        gate.set()
        outcome = await asyncio.wait_for(reader, 60)
    assert got == ["It charges "]
    assert outcome is None or isinstance(outcome, (httpx.HTTPError, httpx.StreamError)), outcome
    steps = [s for t in guard.get_traces() for s in t.steps]
    assert len(steps) == 1, steps
    assert steps[0].metadata["stream_incomplete"] is True and steps[0].response == "It charges "
    assert stream.response is None
    await aclient.close()


def test_an_instrumented_stream_closed_as_its_reader_ends_is_recorded_once(client, fake_llm_server, dgi_calibration):
    """The SDK stream's close() on one thread and the end of its iteration on another both end the
    call's step: whichever comes second must see the first. Forced: each of the two, once inside
    ``Call.claim`` and having read the call's end flag as False, waits (bounded) for the other to
    read it too, so a check-then-set without a lock lets both record."""
    import sys

    fake_llm_server.add(Reply.sse(chat_chunks(PARTS)))
    guard = OpenAIProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": QUESTION}], stream=True)
    call = stream._groundlens_tap.call  # the call our tap will end
    seen = threading.Condition()
    reads = [0]

    class Watched(type(call)):
        @property
        def _ended(self):
            value = self.__dict__["_ended"]
            if not value and sys._getframe(1).f_code.co_name == "claim":
                with seen:
                    reads[0] += 1
                    seen.notify_all()
                    seen.wait_for(lambda: reads[0] >= 2, 3)  # bounded: with a lock the other cannot come
            return value

        @_ended.setter
        def _ended(self, value):
            self.__dict__["_ended"] = value

    call.__class__ = Watched
    reader = threading.Thread(target=lambda: list(stream))
    reader.start()
    stream.close()
    reader.join(60)
    assert not reader.is_alive()
    steps = [s for t in guard.get_traces() for s in t.steps]
    assert len(steps) == 1, [(s.id, s.metadata) for s in steps]
