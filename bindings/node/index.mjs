// wmreplay for Node.js as an ES module: the same package as `require('wmreplay')`
// (index.js, which loads the native engine), with named exports.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const wmreplay = require('./index.js');

export const {
  replayWorkingMemoryLog,
  buildRequestBody,
  LiveReplay,
  append,
  records,
  search,
  SearchIndex,
  buildCurrentUserRequestMessage,
  SYSTEM_RULE,
} = wmreplay;
export default wmreplay;
