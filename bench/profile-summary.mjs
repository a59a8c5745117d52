// Prints where a .cpuprofile spends its time: self time by function, and by file (node --cpu-prof output).
// "(idle)" in it is not waiting (see the end of this file).
//   node bench/profile-summary.mjs bench/profiles/CPU.*.cpuprofile [top]
import { readFileSync } from 'node:fs';

const [file, top = '25'] = process.argv.slice(2);
const profile = JSON.parse(readFileSync(file, 'utf8'));
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const self = new Map();
const dt = profile.timeDeltas;
profile.samples.forEach((id, i) => {
  self.set(id, (self.get(id) ?? 0) + (dt[i] ?? 0));
});
const total = [...self.values()].reduce((a, b) => a + b, 0);
const byFunction = new Map();
const byFile = new Map();
for (const [id, us] of self) {
  const { callFrame: f } = byId.get(id);
  const where = f.url ? f.url.replace(/^.*node_modules\//, '').replace(/^file:\/\/.*\/(dist|src)\//, '$1/') : '(native)';
  const name = `${f.functionName || '(anonymous)'}  ${where}:${f.lineNumber + 1}`;
  byFunction.set(name, (byFunction.get(name) ?? 0) + us);
  const group = where.startsWith('dist/')
    ? where
    : where
        .split('/')
        .slice(0, where.startsWith('@') ? 2 : 1)
        .join('/');
  byFile.set(group, (byFile.get(group) ?? 0) + us);
}
const show = (title, map) => {
  console.log(`\n${title}`);
  for (const [k, us] of [...map].sort((a, b) => b[1] - a[1]).slice(0, Number(top))) console.log(`${((100 * us) / total).toFixed(1).padStart(5)}%  ${k}`);
};
show('self time by function', byFunction);
show('self time by file or package', byFile);
// Node marks the whole poll phase of its event loop "(idle)" for the profiler, native work included: socket
// reads and writes, nghttp2 parsing frames. So "(idle)" is not time the thread waited. Saturated under h2load,
// Tollgate's main thread was on a CPU 96-97 % of the time (/proc) while its profile said 18-24 % "(idle)"
// (BENCHMARKS.md, 2026-11-26): the bench's "main thread busy" column is the measure of waiting.
console.log('\n(idle) is the event loop\'s poll phase, native I/O work included, not waiting: see "main thread busy" in npm run bench');
