#!/usr/bin/env node
// Builds the native addon (crate agentwire-node) with cargo and copies it next to index.js
// as agentwire.node. `--release` for an optimised build (what `npm run build` does).
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const release = process.argv.includes('--release');
const here = path.resolve(__dirname, '..');
const cargo = process.env.CARGO || 'cargo';
const args = ['build', '-p', 'agentwire-node', '--locked'];
if (release) args.push('--release');
execFileSync(cargo, args, { cwd: here, stdio: 'inherit' });

const metadata = JSON.parse(
  execFileSync(cargo, ['metadata', '--format-version', '1', '--no-deps'], {
    cwd: here,
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  }),
);
const names = {
  linux: 'libagentwire_node.so',
  darwin: 'libagentwire_node.dylib',
  win32: 'agentwire_node.dll',
};
const file = names[process.platform];
if (!file) throw new Error(`agentwire: no build recipe for platform ${process.platform}`);
const built = path.join(metadata.target_directory, release ? 'release' : 'debug', file);
const target = path.join(here, 'agentwire.node');
// Copy to a temporary name and rename, so a running process never loads a half-written file.
fs.copyFileSync(built, `${target}.tmp`);
fs.renameSync(`${target}.tmp`, target);
console.log(`agentwire: built ${path.relative(process.cwd(), target)} (${release ? 'release' : 'debug'})`);
