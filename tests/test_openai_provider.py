"""What only the OpenAI module does, through the real ``openai`` SDK against its wire server
(tests/openai_wire.py): the guard request's shape, tool messages as context, the Responses API, a
generator of messages, the raw-response helpers. The contract every provider keeps is in
tests/test_provider_contract.py.
"""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai")

from fake_llm_server import Reply  # noqa: E402
from openai_wire import MODEL, chat_completion, chat_reply, echo_chat, response_events, response_json  # noqa: E402
from provider_cases import BOT, CONTEXT, GROUNDED, QUESTION, WEATHER, WEATHER_QUESTION, sent, weather_step  # noqa: E402

from groundlens_core.providers.openai import OpenAIProvider, guard_of, instrument, uninstrument  # noqa: E402


@pytest.fixture
def client(fake_llm_server):
    c = openai.OpenAI(base_url=fake_llm_server.url + "/v1", api_key="test-key", max_retries=2, timeout=60)
    yield c
    c.close()


@pytest.fixture
def aclient(fake_llm_server):
    return openai.AsyncOpenAI(base_url=fake_llm_server.url + "/v1", api_key="test-key", max_retries=2, timeout=60)


def test_the_guard_request_carries_the_system_prompt_and_kwargs_and_a_stream_asks_for_usage(client, fake_llm_server,
                                                                                            dgi_calibration):
    guard = OpenAIProvider(model="gpt-4o-mini", client=client, calibration=dgi_calibration)
    fake_llm_server.add(chat_reply(GROUNDED))
    guard.complete(QUESTION, context=CONTEXT, system="Be brief.", temperature=0)
    body = sent(fake_llm_server)
    assert body["model"] == "gpt-4o-mini" and body["temperature"] == 0 and "stream" not in body
    assert body["messages"][0] == {"role": "system", "content": "Be brief."} and body["messages"][1]["role"] == "user"
    fake_llm_server.default = echo_chat(GROUNDED)
    list(guard.stream(QUESTION))
    assert sent(fake_llm_server)["stream"] is True
    assert sent(fake_llm_server)["stream_options"] == {"include_usage": True}
    list(guard.stream(QUESTION, stream_options={"include_usage": False}))  # the caller's own wins
    assert sent(fake_llm_server)["stream_options"] == {"include_usage": False}


def _tool_conversation() -> list[dict]:
    return [
        {"role": "system", "content": "You are a weather assistant."},
        {"role": "user", "content": WEATHER_QUESTION},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": WEATHER},
    ]


def test_instrumented_chat_call_is_unchanged_and_recorded(client, fake_llm_server, dgi_calibration):
    answer_text = "In Oslo it is 4 degrees Celsius with light rain and a north wind of 20 km/h."
    fake_llm_server.add(Reply.json(chat_completion(answer_text, usage=(50, 20))))
    same = instrument(client, name=BOT, calibration=dgi_calibration)
    assert same is client and isinstance(same, openai.OpenAI)

    result = client.chat.completions.create(model="gpt-4o-mini", messages=_tool_conversation(),
                                            groundlens_context="Oslo weather station report, 08:00.")
    assert isinstance(result, openai.types.chat.ChatCompletion) and result.choices[0].message.content == answer_text
    body = sent(fake_llm_server)
    assert "groundlens_context" not in body and body["messages"] == _tool_conversation()  # sent as it was

    step = weather_step(guard_of(client), framework="openai", node="openai.chat", response=answer_text, context=[
        ("tool:get_weather", WEATHER), ("attached", "Oslo weather station report, 08:00.")])
    assert step.usage.input_tokens == 50 and step.provider == "openai" and step.model == MODEL


def test_a_generator_of_messages_is_sent_as_without_instrumentation(client, fake_llm_server):
    """The SDK takes any iterable of messages (and of content parts); reading the request must not
    use up a generator the SDK then finds empty."""
    fake_llm_server.default = echo_chat(GROUNDED)

    def conversation():
        yield {"role": "system", "content": "Be brief."}
        yield {"role": "user", "content": iter([{"type": "text", "text": QUESTION}])}

    client.chat.completions.create(model="m", messages=conversation())
    bare = sent(fake_llm_server)
    guard = OpenAIProvider(client=client)
    guard.instrument(client)
    client.chat.completions.create(model="m", messages=conversation())
    assert sent(fake_llm_server) == bare and len(bare["messages"]) == 2
    assert bare["messages"][1]["content"] == [{"type": "text", "text": QUESTION}]
    assert guard.get_trace().steps[0].question == QUESTION


def test_instrumented_responses_api(client, fake_llm_server, dgi_calibration):
    guard = OpenAIProvider(client=client, calibration=dgi_calibration)
    guard.instrument(client)
    fake_llm_server.add(Reply.json(response_json(GROUNDED)))
    result = client.responses.create(model="m", input=QUESTION, instructions="Be brief.", groundlens_context=CONTEXT)
    assert result.output_text == GROUNDED and "groundlens_context" not in sent(fake_llm_server)

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


async def test_the_async_responses_api_and_its_errors(aclient, fake_llm_server, dgi_calibration):
    fake_llm_server.default = echo_chat(GROUNDED)
    guard = OpenAIProvider(client=aclient, calibration=dgi_calibration)
    guard.instrument()
    assert (await aclient.responses.create(model="m", input=QUESTION, groundlens_context=CONTEXT)).output_text == GROUNDED
    fake_llm_server.add(*[Reply.error(500, "boom")] * 3)
    with pytest.raises(openai.InternalServerError):
        await aclient.responses.create(model="m", input=QUESTION)
    steps = [t.steps[0] for t in guard.get_traces()]
    assert [(s.node, s.method) for s in steps] == [("openai.responses", "sgi"), ("openai.responses", "error")]
    await aclient.close()


def test_raw_response_helpers_pass_through_unread(client, fake_llm_server):
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
