#!/usr/bin/env node
// The oracle for `--record js` lines (src/js.rs): reads a file as Node reads a
// log (UTF-8, invalid sequences replaced), splits it on "\n" and writes one
// line per input line: `B` when the line is blank after String.prototype.trim,
// `E` when JSON.parse throws, `X<error name>` when JSON.stringify throws, and
// `V<JSON.stringify(JSON.parse(line.trim()))>` otherwise.
//
// Usage: node js_stringify.js INPUT OUTPUT
// OUTPUT gets the lines joined with "\n" (no trailing newline), in UTF-8.
'use strict';
const fs = require('fs');

const [input, output] = process.argv.slice(2);
const results = fs.readFileSync(input, 'utf8').split('\n').map((line) => {
  const trimmed = line.trim();
  if (trimmed === '') return 'B';
  let value;
  try {
    value = JSON.parse(trimmed);
  } catch (e) {
    return 'E';
  }
  try {
    return 'V' + JSON.stringify(value);
  } catch (e) {
    return 'X' + e.name;
  }
});
fs.writeFileSync(output, results.join('\n'), 'utf8');
