"""``WmreplaySession`` under the OpenAI Agents SDK's own ``Runner``, with the
SDK's scripted model (``agents.testing.ScriptedModel``): no network, tracing
off. Skipped without ``openai-agents`` unless ``WMREPLAY_REQUIRE_FRAMEWORKS``
is set (CI installs it: there a missing SDK is a failure)."""

import asyncio
import copy
import json
import os

import pytest

if os.environ.get("WMREPLAY_REQUIRE_FRAMEWORKS"):
    import agents
else:
    agents = pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, SessionSettings, function_tool, set_tracing_disabled
from agents.memory import Session
from agents.testing import ScriptedModel, assistant_message, function_call

import wmreplay
from wmreplay.sessions import WmreplaySession

set_tracing_disabled(True)


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


class Recorded(WmreplaySession):
    """The session, keeping a copy of every batch the runner adds."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.added = []

    async def add_items(self, items):
        self.added.append(copy.deepcopy(items))
        await super().add_items(items)


def log_records(log):
    return [json.loads(l) for l in open(log, encoding="utf-8").read().splitlines()]


def kind(item):
    return item.get("type", f"message:{item.get('role')}") if item.get("type") != "message" else f"message:{item['role']}"


def test_two_runs_share_the_history_kept_in_the_log(tmp_path):
    log = tmp_path / "wm.log"

    async def main():
        model = ScriptedModel([
            [function_call("get_weather", {"city": "Paris"}, call_id="call_1")],
            [assistant_message("It is sunny in Paris.", item_id="msg_1")],
            [assistant_message("You asked about Paris.", item_id="msg_2")],
        ])
        agent = Agent(name="weather", instructions="Be brief.", model=model, tools=[get_weather])
        session = Recorded("user-1", log)
        assert isinstance(session, Session), "the SDK's protocol"
        r1 = await Runner.run(agent, "Weather in Paris?", session=session)
        after_first = await session.get_items()
        # A new object on the same log: the history is the log's, not the object's.
        again = Recorded("user-1", log)
        r2 = await Runner.run(agent, "What city did I ask about?", session=again)
        model.assert_complete()
        return model, session, again, r1, r2, after_first

    model, session, again, r1, r2, after_first = asyncio.run(main())
    assert r1.final_output == "It is sunny in Paris."
    assert r2.final_output == "You asked about Paris."
    assert [kind(i) for i in after_first] == [
        "message:user", "function_call", "function_call_output", "message:assistant"]
    call, output = after_first[1], after_first[2]
    assert (call["name"], call["call_id"], json.loads(call["arguments"])) == ("get_weather", "call_1", {"city": "Paris"})
    assert (output["call_id"], output["output"]) == ("call_1", "sunny in Paris")

    # What the runner added is what comes back, item for item.
    added = [i for batch in session.added + again.added for i in batch]
    items = asyncio.run(WmreplaySession("user-1", log).get_items())
    assert items == added
    assert items[:4] == after_first
    # Each item is one session_item record holding it, in the order added.
    recs = log_records(log)
    assert [r["type"] for r in recs] == ["session_item"] * 6
    assert all(r["session_id"] == "user-1" and isinstance(r["ts_ms"], int) for r in recs)
    assert [r["item"] for r in recs] == added

    # The second run's model saw the first run's items, then the new question.
    third = model.calls[2].input
    assert isinstance(third, list)
    assert [kind(i) for i in third] == [
        "message:user", "function_call", "function_call_output", "message:assistant", "message:user"]
    assert third[0]["content"] == "Weather in Paris?"
    assert third[1]["call_id"] == third[2]["call_id"] == "call_1"
    assert third[2]["output"] == "sunny in Paris"
    assert third[4]["content"] == "What city did I ask about?"


def test_a_streamed_run_keeps_its_items_too(tmp_path):
    log = tmp_path / "wm.log"

    async def main():
        model = ScriptedModel([
            [function_call("get_weather", {"city": "Oslo"}, call_id="call_7")],
            [assistant_message("Sunny in Oslo.", item_id="msg_7")],
        ])
        agent = Agent(name="weather", model=model, tools=[get_weather])
        session = Recorded("streamed", log)
        run = Runner.run_streamed(agent, "Oslo?", session=session)
        async for _ in run.stream_events():
            pass
        return run, session

    run, session = asyncio.run(main())
    assert run.final_output == "Sunny in Oslo."
    items = asyncio.run(session.get_items())
    assert items == [i for batch in session.added for i in batch]
    assert [kind(i) for i in items] == ["message:user", "function_call", "function_call_output", "message:assistant"]


def test_pop_and_clear_are_records_and_the_next_run_sees_what_is_left(tmp_path):
    log = tmp_path / "wm.log"

    async def main():
        model = ScriptedModel([
            [assistant_message("first answer", item_id="m1")],
            [assistant_message("second answer", item_id="m2")],
            [assistant_message("after clear", item_id="m3")],
        ])
        agent = Agent(name="a", model=model)
        s = WmreplaySession("s", log)
        await Runner.run(agent, "one", session=s)
        popped = await s.pop_item()
        left = await s.get_items()
        await Runner.run(agent, "two", session=s)
        second_input = model.calls[1].input
        await s.clear_session()
        cleared = await s.get_items()
        await Runner.run(agent, "three", session=s)
        return model, popped, left, second_input, cleared, await s.get_items()

    model, popped, left, second_input, cleared, final = asyncio.run(main())
    assert popped["role"] == "assistant" and popped["content"][0]["text"] == "first answer"
    assert left == [{"content": "one", "role": "user"}]
    # The popped answer is not in the next run's history.
    assert [i.get("content") for i in second_input] == ["one", "two"]
    assert cleared == []
    assert [i.get("content") for i in model.calls[2].input] == ["three"]
    assert [kind(i) for i in final] == ["message:user", "message:assistant"]

    recs = log_records(log)
    types = [r["type"] for r in recs]
    assert types == ["session_item", "session_item", "session_pop", "session_item", "session_item",
                     "session_clear", "session_item", "session_item"]
    offsets = [0]
    for line in open(log, "rb").read().split(b"\n")[:-2]:
        offsets.append(offsets[-1] + len(line) + 1)
    assert recs[2]["popped"] == {"offset": offsets[1], "ts_ms": recs[1]["ts_ms"]}
    assert recs[2]["session_id"] == recs[5]["session_id"] == "s"
    # Nothing was deleted: the popped item is still in its record.
    assert recs[1]["item"] == popped


def test_limits_are_sqlite_sessions_and_the_runner_passes_them(tmp_path):
    log = tmp_path / "wm.log"

    async def main():
        s = WmreplaySession("s", log)
        items = [{"role": "user", "content": f"q{i}"} for i in range(5)]
        await s.add_items(items)
        got = {n: await s.get_items(limit=n) for n in (None, 0, 1, 3, 5, 9)}
        limited = WmreplaySession("s", log, session_settings=SessionSettings(limit=2))
        as_dict = WmreplaySession("s", log, session_settings={"limit": 4})
        model = ScriptedModel([[assistant_message("ok")], [assistant_message("ok")]])
        agent = Agent(name="a", model=model)
        await Runner.run(agent, "new", session=limited)
        await Runner.run(agent, "newer", session=WmreplaySession("s", log),
                         run_config=RunConfig(session_settings=SessionSettings(limit=1)))
        return items, got, await limited.get_items(), await as_dict.get_items(), model

    items, got, limited_items, dict_items, model = asyncio.run(main())
    assert got[None] == items and got[5] == items and got[9] == items
    assert got[0] == []
    assert got[1] == items[4:] and got[3] == items[2:]
    # The session's own limit applies to get_items() too: the latest 2.
    assert [i["role"] for i in limited_items] == ["user", "assistant"]
    assert limited_items[0]["content"] == "newer"
    # The session's own limit: the runner read the latest 2 items.
    assert [i.get("content") for i in model.calls[0].input] == ["q3", "q4", "new"]
    # RunConfig's limit wins over none: the latest 1.
    last_before = model.calls[1].input[0]
    assert last_before["role"] == "assistant" and model.calls[1].input[-1]["content"] == "newer"
    assert len(model.calls[1].input) == 2
    assert len(dict_items) == 4


def test_two_sessions_share_one_log_without_mixing(tmp_path):
    log = tmp_path / "wm.log"

    async def main():
        model = ScriptedModel([[assistant_message(f"answer {i}")] for i in range(4)])
        agent = Agent(name="a", model=model)
        a, b = WmreplaySession("alice", log), WmreplaySession("bob", log)
        await asyncio.gather(Runner.run(agent, "alice 1", session=a), Runner.run(agent, "bob 1", session=b))
        await Runner.run(agent, "alice 2", session=a)
        await Runner.run(agent, "bob 2", session=b)
        return model, await a.get_items(), await b.get_items()

    model, a, b = asyncio.run(main())
    users = lambda items: [i["content"] for i in items if i.get("role") == "user"]
    assert users(a) == ["alice 1", "alice 2"]
    assert users(b) == ["bob 1", "bob 2"]
    assert len(a) == len(b) == 4
    # Every record of the log is one of theirs, each with its session_id.
    recs = log_records(log)
    assert sorted({r["session_id"] for r in recs}) == ["alice", "bob"]
    assert len(wmreplay.records(log, kinds=["session_item"])) == 8
