"""``WmreplayChatMessageHistory``, a LangChain ``BaseChatMessageHistory``, with
``langchain-core``'s own messages and serialisation. Skipped without
``langchain-core`` unless ``WMREPLAY_REQUIRE_FRAMEWORKS`` is set (CI installs
it: there a missing package is a failure)."""

import asyncio
import json
import os

import pytest

if os.environ.get("WMREPLAY_REQUIRE_FRAMEWORKS"):
    import langchain_core
else:
    langchain_core = pytest.importorskip("langchain_core")

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_to_dict,
)

from wmreplay.sessions import SessionLog, WmreplayChatMessageHistory
from wmreplay.sessions.langchain import WmreplayChatMessageHistory as Direct


def conversation():
    return [
        SystemMessage("You answer about the weather."),
        HumanMessage("Weather in Paris?", id="h1"),
        AIMessage(
            "",
            id="a1",
            tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1", "type": "tool_call"}],
            usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
            response_metadata={"model_name": "m", "finish_reason": "tool_calls"},
        ),
        ToolMessage("sunny", tool_call_id="call_1", name="get_weather", artifact={"raw": [1, 2]}),
        AIMessage([{"type": "text", "text": "It is sunny in Paris."}], additional_kwargs={"k": {"n": 1.5}}),
    ]


def log_records(log):
    return [json.loads(l) for l in open(log, encoding="utf-8").read().splitlines()]


def test_messages_round_trip_with_tool_calls_and_tool_results(tmp_path):
    log = tmp_path / "wm.log"
    history = WmreplayChatMessageHistory("chat-1", log)
    assert isinstance(history, BaseChatMessageHistory)
    assert WmreplayChatMessageHistory is Direct
    msgs = conversation()
    history.add_messages(msgs[:3])
    history.add_message(msgs[3])
    history.add_messages(msgs[4:])
    # Read back through another object on the same log: equal messages.
    back = WmreplayChatMessageHistory("chat-1", log).messages
    assert back == msgs
    assert back[2].tool_calls == msgs[2].tool_calls and back[2].usage_metadata == msgs[2].usage_metadata
    assert (back[3].tool_call_id, back[3].artifact, back[3].name) == ("call_1", {"raw": [1, 2]}, "get_weather")
    assert [type(m) for m in back] == [type(m) for m in msgs]
    # One session_item record per message, its item message_to_dict's.
    recs = log_records(log)
    assert [r["type"] for r in recs] == ["session_item"] * 5
    assert [r["item"] for r in recs] == messages_to_dict(msgs)
    assert all(r["session_id"] == "chat-1" for r in recs)


def test_the_base_classs_helpers_and_clear(tmp_path):
    log = tmp_path / "wm.log"
    history = WmreplayChatMessageHistory("chat", log)
    history.add_user_message("hi")
    history.add_ai_message("hello")
    assert [(m.type, m.content) for m in history.messages] == [("human", "hi"), ("ai", "hello")]
    history.clear()
    assert history.messages == []
    history.add_user_message("again")
    assert [m.content for m in history.messages] == ["again"]
    recs = log_records(log)
    assert [r["type"] for r in recs] == ["session_item", "session_item", "session_clear", "session_item"]
    assert recs[2] == {"ts_ms": recs[2]["ts_ms"], "type": "session_clear", "session_id": "chat"}
    # The first two messages are still in the log, in their records.
    assert recs[0]["item"] == message_to_dict(HumanMessage("hi"))
    assert str(history) == "Human: again"


def test_async_variants(tmp_path):
    log = tmp_path / "wm.log"
    msgs = conversation()

    async def main():
        history = WmreplayChatMessageHistory("async", log)
        await history.aadd_messages(msgs)
        got = await history.aget_messages()
        await history.aclear()
        return got, await history.aget_messages()

    got, after = asyncio.run(main())
    assert got == msgs and after == []


def test_an_item_that_is_not_a_message_is_an_error_naming_the_log(tmp_path):
    log = tmp_path / "wm.log"
    SessionLog(log, "mixed").add([{"role": "user", "content": "an agents SDK item"}])
    with pytest.raises(ValueError, match=r"wm\.log: byte 0: the item of session 'mixed' is not a LangChain message"):
        WmreplayChatMessageHistory("mixed", log).messages
    history = WmreplayChatMessageHistory("bytes", log)
    before = log.read_bytes()
    with pytest.raises(ValueError, match=r"wm\.log: item 0 of session 'bytes' cannot be written as JSON"):
        history.add_messages([AIMessage("x", additional_kwargs={"raw": b"\x00"})])
    assert log.read_bytes() == before
