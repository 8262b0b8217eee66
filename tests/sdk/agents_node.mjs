// The OpenAI Agents SDK for TypeScript (@openai/agents, from npm) with its
// default model class (the Responses API) pointed at `wmreplay serve`, which
// calls the test's mock model. One step a process, as its users run it; the
// Rust test that runs this script (tests/service/real_agents.rs) checks the
// log and what the model was sent.
//
// Usage: node agents_node.mjs ROOT_URL plain|tool|recall|long
// Prints one JSON object: what the step saw.

import { Agent, run, tool, setDefaultOpenAIClient, setTracingDisabled } from '@openai/agents';
import OpenAI from 'openai';

const [root, step] = process.argv.slice(2);
const ASK = {
  plain: 'node plain question',
  tool: 'node weather please\nTOOLS: [[{"name":"get_weather","input":{"city":"Oslo"}}]]',
  recall: 'node: what did I ask before?',
};

setTracingDisabled(true);
setDefaultOpenAIClient(new OpenAI({ baseURL: `${root}/openai/v1`, apiKey: 'sk-client', maxRetries: 0 }));
const getWeather = tool({
  name: 'get_weather',
  description: 'The weather in a city.',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  },
  strict: true,
  execute: async ({ city }) => `Rainy in ${city}`,
});
const agent = new Agent({
  name: 'assistant',
  instructions: 'Answer briefly.',
  model: 'gpt-test',
  tools: [getWeather],
});
if (step === 'long') {
  // A 20-turn conversation, its whole history resent each turn.
  let history = [];
  let result;
  for (let i = 0; i < 20; i++) {
    const ask =
      i % 4 === 0
        ? `node long turn ${i}: weather\nTOOLS: [{"calls":[{"name":"get_weather","input":{"city":"Oslo"}}],"text":"Checking, turn ${i}."}]`
        : `node long turn ${i}`;
    result = await run(agent, [...history, { role: 'user', content: ask }]);
    history = result.history;
  }
  console.log(JSON.stringify({ final: result.finalOutput }));
} else {
  const result = await run(agent, ASK[step]);
  console.log(JSON.stringify({ final: result.finalOutput }));
}
