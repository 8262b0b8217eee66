// The ES module's types: the same declarations as index.d.ts (the CommonJS
// entry), with the package as the default export too.
import * as wmreplay from './index.js';

export * from './index.js';
export default wmreplay;
