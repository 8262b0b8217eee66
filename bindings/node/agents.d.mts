// The ES module's types: the same declarations as agents.d.ts.
import * as agents from './agents.js';

export * from './agents.js';
export default agents;
