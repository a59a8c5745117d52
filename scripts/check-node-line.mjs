#!/usr/bin/env node
import { readFileSync } from 'node:fs';
// `npm test`'s first step (pretest): the node running it must be a line package.json's engines allows, or the
// suite stops at once with one line naming the supported lines and how to get one, instead of failing tests one
// by one on a runtime nobody tests (issue 59: Node 20 on PATH, which `npm install` only warns about).
//   node scripts/check-node-line.mjs      exit 0 when process.version satisfies engines; else the line, exit 1
// TOLLGATE_NODE_VERSION_FOR_TEST stands in for process.version, for test/unit/node-line-check.test.ts only.
// Not in scripts/check-system.mjs: .ci/run runs that one on the machine's node, whatever its line, before it
// fetches the pinned lines (scripts/node-lines.mjs) and runs the suite on them; it never runs pretest.
import { PINS, satisfies } from './node-lines.mjs';

const engines = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).engines.node;

/** engines' lines as a reader says them: `^22.12.0 || ^24.0.0` → `22 (>= 22.12) or 24`. */
function linesOf(range) {
  const lines = range.split('||').map((part) => {
    const [major, minor, patch] = part.trim().replace(/^\^/, '').split('.');
    if (minor === '0' && patch === '0') return major;
    return `${major} (>= ${major}.${minor}${patch === '0' ? '' : `.${patch}`})`;
  });
  return lines.length > 1 ? `${lines.slice(0, -1).join(', ')} or ${lines[lines.length - 1]}` : lines[0];
}

/** The one line for a node engines does not allow: the lines, and the pinned release of the newest line. */
function refusal(version, range = engines) {
  const pinned = PINS[0].version;
  const major = pinned.split('.')[0];
  return (
    `tollgate: Node.js ${version} is not supported; use Node.js ${linesOf(range)} (engines in package.json): e.g. ` +
    `PATH="$(node scripts/node-lines.mjs bin ${pinned}):$PATH" npm test (fetches the pinned ${pinned}), or nvm install ${major}`
  );
}

const version = `v${(process.env.TOLLGATE_NODE_VERSION_FOR_TEST || process.version).replace(/^v/, '')}`;
if (!satisfies(version, engines)) {
  console.error(refusal(version));
  process.exit(1);
}
