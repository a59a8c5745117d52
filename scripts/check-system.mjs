#!/usr/bin/env node
// Checks that the system programs in scripts/system-programs.json are on PATH before the tests (or the
// benchmark) start them, so a missing one is one clear line instead of a spawn ENOENT deep inside a test.
//   node scripts/check-system.mjs [--for test|bench] [--no-install]
// Missing programs are installed with apt-get when running as root where apt-get exists (one line says so),
// unless --no-install (or TOLLGATE_NO_INSTALL=1); otherwise the check exits 1 naming them and the command.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { onPath } from './on-path.mjs';

const { values } = parseArgs({ options: { for: { type: 'string', default: 'test' }, 'no-install': { type: 'boolean', default: false } } });
const list = JSON.parse(readFileSync(new URL('./system-programs.json', import.meta.url), 'utf8')).programs;

/** The tests render the Kustomize overlays with a kubectl whose Kustomize is v5+, which no Debian package has:
 * scripts/kubectl.mjs finds one or fetches it once (one line says so). */
async function ensureKubectl() {
  if (values.for !== 'test') return;
  const { kubectlPath } = await import('./kubectl.mjs');
  try {
    kubectlPath();
  } catch (err) {
    console.error(err.message);
    process.exit(1);
  }
}

/** Whether a program is there: on PATH, or, for what is not a program of its own (a Python module), its probe
 * command exits 0. */
function present(p) {
  if (!p.probe) return onPath(p.program) !== undefined;
  try {
    execFileSync(p.probe[0], p.probe.slice(1), { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const missing = list.filter((p) => p.for.includes(values.for) && !present(p));
if (missing.length === 0) {
  await ensureKubectl();
  process.exit(0);
}

const programs = missing.map((p) => p.program).join(', ');
const packages = [...new Set(missing.map((p) => p.package))];
const install = `apt-get install -y --no-install-recommends ${packages.join(' ')}`;
const mayInstall = !values['no-install'] && process.env.TOLLGATE_NO_INSTALL !== '1' && process.getuid?.() === 0 && onPath('apt-get') !== undefined;

if (!mayInstall) {
  console.error(
    `npm ${values.for === 'bench' ? 'run bench' : 'test'} needs ${programs}, not found on PATH; install with: sudo apt-get update && sudo ${install}`,
  );
  process.exit(1);
}
console.error(
  `installing ${packages.join(' ')} (for ${programs}): the ${values.for === 'bench' ? 'benchmark starts' : 'tests start'} real processes on loopback`,
);
const quiet = { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } };
try {
  execFileSync('apt-get', ['update', '-qq'], quiet);
  execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...packages], quiet);
} catch {
  console.error(`could not install ${packages.join(' ')}; install with: ${install}`);
  process.exit(1);
}
const still = missing.filter((p) => !present(p));
if (still.length > 0) {
  console.error(`still not found after installing: ${still.map((p) => p.program).join(', ')}`);
  process.exit(1);
}
await ensureKubectl();
