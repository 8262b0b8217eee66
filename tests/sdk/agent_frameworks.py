"""The agent frameworks people build on (from PyPI) pointed at `wmreplay
serve`, which calls the test's mock model: the OpenAI Agents SDK with its
default model class (the Responses API) and LangChain's `ChatAnthropic` and
`ChatOpenAI` (in Responses mode) with `base_url`. Each run is one step, in a
process of its own, as its users run them; the Rust test that runs this
script (tests/service/real_agents.rs) checks the log and what the model was
sent.

Usage: python agent_frameworks.py agents|langchain-anthropic|langchain-openai ROOT_URL STEP
STEP: plain (a turn), tool (a round of a function tool), recall (a new
process asks about the first), long (a 20-turn conversation in one process,
its whole history resent each turn, a tool round every fourth). Prints one
JSON object: what the step saw.
"""

import json
import sys

TOOL = 'weather please\nTOOLS: [[{"name":"get_weather","input":{"city":"Oslo"}}]]'
ASK = {"plain": "plain question", "tool": TOOL, "recall": "what did I ask before?"}


def long_asks():
    """The 20 turns of the long step: a tool round every fourth."""
    for i in range(20):
        if i % 4 == 0:
            call = '{"name":"get_weather","input":{"city":"Oslo"}}'
            yield f'long turn {i}: weather\nTOOLS: [{{"calls":[{call}],"text":"Checking, turn {i}."}}]'
        else:
            yield f"long turn {i}"


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Rainy in {city}"


def agents(root, step):
    from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    set_default_openai_client(AsyncOpenAI(base_url=root + "/openai/v1", api_key="sk-client", max_retries=0))
    agent = Agent(
        name="assistant",
        instructions="Answer briefly.",
        model="gpt-test",
        tools=[function_tool(get_weather)],
    )
    if step == "long":
        items = []
        for ask in long_asks():
            result = Runner.run_sync(agent, items + [{"role": "user", "content": ask}])
            items = result.to_input_list()
        return {"final": result.final_output, "items": len(items)}
    result = Runner.run_sync(agent, ASK[step])
    return {"final": result.final_output}


def langchain(root, step, provider):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    if provider == "anthropic":
        from langchain_anthropic import ChatAnthropic

        llm = ChatAnthropic(model="claude-test", base_url=root + "/anthropic", api_key="sk-client",
                            max_tokens=200, max_retries=0)
    else:
        from langchain_openai import ChatOpenAI

        llm = ChatOpenAI(model="gpt-test", base_url=root + "/openai/v1", api_key="sk-client",
                         use_responses_api=True, max_retries=0)
    weather = tool(get_weather)
    llm = llm.bind_tools([weather])

    def turn(messages):
        ai = llm.invoke(messages)
        rounds = 0
        while ai.tool_calls and rounds < 4:
            messages.append(ai)
            for call in ai.tool_calls:
                messages.append(ToolMessage(weather.invoke(call["args"]), tool_call_id=call["id"]))
            ai = llm.invoke(messages)
            rounds += 1
        messages.append(ai)
        return ai

    messages = []
    for ask in long_asks() if step == "long" else [ASK[step]]:
        messages.append(HumanMessage(ask))
        ai = turn(messages)
    text = ai.text  # a property (a method before langchain-core 1.0)
    return {"final": str(text) if isinstance(text, str) else text()}


def main():
    which, root, step = sys.argv[1], sys.argv[2], sys.argv[3]
    if which == "agents":
        seen = agents(root, step)
    else:
        seen = langchain(root, step, which.split("-", 1)[1])
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
