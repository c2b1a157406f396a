'use strict';
// index.d.ts and compat.d.ts: the uses in usage.ts type-check under `strict` (TypeScript is a
// dev dependency; `npm install` brings it).
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const tsc = path.join(__dirname, '..', 'node_modules', 'typescript', 'bin', 'tsc');

test('the type declarations compile against real uses', { skip: !fs.existsSync(tsc) && 'run npm install first' }, () => {
  const run = spawnSync(process.execPath, [tsc, '--noEmit', '--strict', '--target', 'es2022',
    '--module', 'node16', '--moduleResolution', 'node16', '--types', 'node',
    path.join(__dirname, 'usage.ts')], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stdout + run.stderr);
});
