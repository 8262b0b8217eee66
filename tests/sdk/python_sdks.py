"""The official Python SDKs (`anthropic`, `openai`, from PyPI) pointed at
`wmreplay serve`, which calls the test's mock model: each step uses the SDK
as its users do and checks what the SDK gives back; the Rust test that runs
this script (tests/service/sdk_clients.rs) then checks the log and what the model
was sent.

Usage: python python_sdks.py anthropic|openai ROOT_URL
Prints one JSON object: what each step saw.
"""

import json
import sys
import time

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
TOOL_TEXT = 'What is the weather?\nTOOLS: [[{"name":"get_weather","input":{"city":"Paris"}}]]'


def not_found(retrieve, error):
    """An unknown model's path is the SDK's own 404 exception."""
    try:
        retrieve("no-such-model")
    except error as e:
        assert e.status_code == 404, e
        return
    raise AssertionError("a 404 was expected")


def anthropic_steps(root):
    import anthropic

    seen = {}
    c = anthropic.Anthropic(base_url=root + "/anthropic", api_key="sk-client", max_retries=0)
    model = "claude-test"

    # A plain turn.
    m = c.messages.create(
        model=model,
        max_tokens=100,
        system="Answer briefly.",
        messages=[{"role": "user", "content": "first question"}],
    )
    assert m.type == "message" and m.role == "assistant", m
    assert m.content[0].type == "text", m
    assert m.model == model, m.model
    assert m.usage.output_tokens > 0, m.usage
    assert m._request_id, "a request id in the request-id header"
    seen["plain"] = m.content[0].text

    # A streamed turn that resends the history: the SDK's stream helper.
    history = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": m.content[0].text},
        {"role": "user", "content": "second question"},
    ]
    with c.messages.stream(model=model, max_tokens=100, messages=history) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    assert final.content[0].text == streamed, (final, streamed)
    assert final.stop_reason == "end_turn", final.stop_reason
    seen["streamed"] = streamed

    # A tool the client runs: the model calls it, the client answers.
    tools = [{"name": "get_weather", "description": "The weather in a city.", "input_schema": WEATHER}]
    msgs = [{"role": "user", "content": TOOL_TEXT}]
    r1 = c.messages.create(model=model, max_tokens=100, tools=tools, messages=msgs)
    assert r1.stop_reason == "tool_use", r1
    call = next(b for b in r1.content if b.type == "tool_use")
    assert call.name == "get_weather" and call.input == {"city": "Paris"}, call
    msgs += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r1.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny in Paris"}]},
    ]
    with c.messages.stream(model=model, max_tokens=100, tools=tools, messages=msgs) as s:
        r2 = s.get_final_message()
    text = "".join(b.text for b in r2.content if b.type == "text")
    assert "Sunny in Paris" in text, text
    seen["tool_call_id"] = call.id
    seen["tool_answer"] = text

    # The SDK's own tool runner (it offers a message thread first; the
    # server refuses it and the runner goes on with the whole history).
    @anthropic.beta_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"Rainy in {city}"

    runner = c.beta.messages.tool_runner(
        model=model,
        max_tokens=100,
        tools=[get_weather],
        messages=[{"role": "user", "content": 'Runner asks.\nTOOLS: [[{"name":"get_weather","input":{"city":"Oslo"}}]]'}],
    )
    last = None
    for message in runner:
        last = message
    runner_text = "".join(b.text for b in last.content if b.type == "text")
    assert "Rainy in Oslo" in runner_text, runner_text
    seen["runner"] = runner_text

    # A request the provider refuses: the SDK's BadRequestError, nothing
    # written.
    try:
        c.messages.create(
            model=model, max_tokens=100, messages=[{"role": "user", "content": "never sent"}], extra_body={"top_k": "many"}
        )
        raise AssertionError("a 400 was expected")
    except anthropic.BadRequestError as e:
        assert e.status_code == 400, e
        assert e.type == "invalid_request_error", e.body
        seen["bad_request"] = e.body

    # A rate limit: the SDK's RateLimitError.
    try:
        c.messages.create(
            model=model, max_tokens=100, messages=[{"role": "user", "content": "limited\nMOCK_STATUS: 429"}]
        )
        raise AssertionError("a 429 was expected")
    except anthropic.RateLimitError as e:
        assert e.status_code == 429, e
        assert e.type == "rate_limit_error", e.body
        seen["rate_limited"] = e.body

    # The SDK's own retries give one turn: a 503 retried, and a timeout
    # retried while the first attempt still runs.
    retrying = anthropic.Anthropic(base_url=root + "/anthropic", api_key="sk-client", max_retries=2)
    m = retrying.messages.create(
        model=model, max_tokens=100, messages=[{"role": "user", "content": "retried\nMOCK_FAIL_ONCE: 503"}]
    )
    seen["retried_503"] = m.content[0].text
    m = retrying.with_options(timeout=1.0).messages.create(
        model=model, max_tokens=100, messages=[{"role": "user", "content": "slow\nMOCK_SLOW: 1800"}]
    )
    seen["retried_timeout"] = m.content[0].text

    # Another session, starting afresh, is answered with the first one's
    # turns in its replay (the Rust test checks what the model was sent).
    other = anthropic.Anthropic(base_url=root + "/anthropic", api_key="sk-client", max_retries=0)
    m = other.messages.create(
        model=model, max_tokens=100, messages=[{"role": "user", "content": "what did I ask before?"}]
    )
    seen["second_session"] = m.content[0].text

    # Beside the messages: the upstream's models, a count of the tokens the
    # server would send, and an unknown path raised as the SDK's own 404.
    models = [m.id for m in other.models.list()]
    assert models == ["test-model"], models
    counted = other.messages.count_tokens(model=model, messages=[{"role": "user", "content": "count me"}])
    assert counted.input_tokens > 0, counted
    not_found(other.models.retrieve, anthropic.NotFoundError)
    seen["models"] = models
    seen["counted"] = counted.input_tokens
    return seen


def openai_steps(root):
    import openai

    seen = {}
    c = openai.OpenAI(base_url=root + "/openai/v1", api_key="sk-client", max_retries=0)
    model = "gpt-test"

    r = c.chat.completions.create(
        model=model,
        messages=[
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "first question"},
        ],
    )
    assert r.object == "chat.completion", r
    msg = r.choices[0].message
    assert msg.role == "assistant" and msg.content, r
    assert r.choices[0].finish_reason == "stop", r
    assert r._request_id, "a request id in the x-request-id header"
    seen["plain"] = msg.content

    history = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": msg.content},
        {"role": "user", "content": "second question"},
    ]
    with c.chat.completions.stream(model=model, messages=history) as s:
        for _ in s:
            pass
        final = s.get_final_completion()
    streamed = final.choices[0].message.content
    raw = "".join(
        ch.choices[0].delta.content or ""
        for ch in c.chat.completions.create(model=model, messages=history[:1] + [{"role": "user", "content": "raw stream"}], stream=True)
        if ch.choices
    )
    assert raw, "a raw stream has text"
    seen["streamed"] = streamed

    tools = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": WEATHER}}]
    msgs = [{"role": "user", "content": TOOL_TEXT}]
    r1 = c.chat.completions.create(model=model, tools=tools, messages=msgs)
    assert r1.choices[0].finish_reason == "tool_calls", r1
    call = r1.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather", call
    assert json.loads(call.function.arguments) == {"city": "Paris"}, call
    msgs += [
        r1.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny in Paris"},
    ]
    with c.chat.completions.stream(model=model, tools=tools, messages=msgs) as s:
        r2 = s.get_final_completion()
    text = r2.choices[0].message.content
    assert "Sunny in Paris" in text, text
    seen["tool_call_id"] = call.id
    seen["tool_answer"] = text

    try:
        c.chat.completions.create(
            model=model, temperature="hot", messages=[{"role": "user", "content": "never sent"}]
        )
        raise AssertionError("a 400 was expected")
    except openai.BadRequestError as e:
        assert e.status_code == 400, e
        assert e.type == "invalid_request_error", e.body
        seen["bad_request"] = e.body

    try:
        c.chat.completions.create(model=model, messages=[{"role": "user", "content": "limited\nMOCK_STATUS: 429"}])
        raise AssertionError("a 429 was expected")
    except openai.RateLimitError as e:
        assert e.status_code == 429, e
        seen["rate_limited"] = e.body

    retrying = openai.OpenAI(base_url=root + "/openai/v1", api_key="sk-client", max_retries=2)
    r = retrying.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "retried\nMOCK_FAIL_ONCE: 503"}]
    )
    seen["retried_503"] = r.choices[0].message.content
    r = retrying.with_options(timeout=1.0).chat.completions.create(
        model=model, messages=[{"role": "user", "content": "slow\nMOCK_SLOW: 1800"}]
    )
    seen["retried_timeout"] = r.choices[0].message.content

    other = openai.OpenAI(base_url=root + "/openai/v1", api_key="sk-client", max_retries=0)
    r = other.chat.completions.create(model=model, messages=[{"role": "user", "content": "what did I ask before?"}])
    seen["second_session"] = r.choices[0].message.content

    models = [m.id for m in other.models.list()]
    assert models == ["test-model"], models
    not_found(other.models.retrieve, openai.NotFoundError)
    seen["models"] = models
    return seen


if __name__ == "__main__":
    provider, root = sys.argv[1], sys.argv[2].rstrip("/")
    started = time.time()
    steps = anthropic_steps if provider == "anthropic" else openai_steps
    seen = steps(root)
    seen["seconds"] = round(time.time() - started, 2)
    print(json.dumps(seen))
