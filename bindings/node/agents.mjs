// `wmreplay/agents` as an ES module: the same module as `require('wmreplay/agents')`.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const agents = require('./agents.js');

export const { WmreplaySession, SESSION_ITEM, SESSION_POP, SESSION_CLEAR, SESSION_RECORD_TYPES } = agents;
export default agents;
