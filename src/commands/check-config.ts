import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { CompiledDomain, CompiledLimit, Rule } from '../config/compiled.js';
import { ConfigError } from '../config/errors.js';
import { type ConfigLimits, compileSources, configLimits, loadConfigDir, NO_CONFIG_WARNING, readConfigSources } from '../config/load.js';
import { overlaySources, parseOverlay } from '../config/overlay.js';
import { readOverlayText } from '../config/overlay-file.js';
import type { InFlightSpec } from '../config/spec.js';
import { DEFAULT_HEADERS } from '../config/spec.js';
import { windowText } from '../config/units.js';
import { CliError } from '../errors.js';
import { ALGORITHMS } from '../limits/kinds/index.js';
import { parseBool } from '../settings/compat.js';
import { maxConfigBytesOf } from '../settings/settings.js';
import type { Command } from './command.js';

const HELP =
  `Usage: tollgate check-config [--max-config-bytes N] [--merge-domain-config] DIR_OR_FILE\n` +
  `       tollgate check-config --xds-overlay OVERLAY [DIR_OR_FILE]\n\nValidates every YAML file in DIR (or ` +
  `the one FILE) as serve would load it, prints each\ndomain's rules and the config hash (of file names and contents: the same files give ` +
  `the\nsame hash wherever they are), and exits 1 with file:line:column: key: problem for each\nerror. A directory with no .yaml or .yml file ` +
  `passes with a warning, as serve starts on\nit (a reload that would empty a running config is refused). --max-config-bytes ` +
  `(env\nMAX_CONFIG_BYTES) and --merge-domain-config (env MERGE_DOMAIN_CONFIG) as for serve.\n\n` +
  `--xds-overlay checks an overlay file (XDS_OVERLAY_FILE) and, given DIR, writes it into DIR's files as\n` +
  `into the configs an xDS server sends (Envoy Gateway's, as envoyproxy/ratelimit's YAML), then validates and\nlists them as above, ` +
  `warning of each overlay entry that matched nothing.\n`;

const OPTIONS = { 'max-config-bytes': { type: 'string' }, 'merge-domain-config': { type: 'boolean' }, 'xds-overlay': { type: 'string' } } as const;

/** `tollgate check-config`: validates a config as serve would load it and lists its rules. */
export const checkConfigCommand: Command = { help: () => HELP, options: OPTIONS, run: checkConfig };

function checkConfig(args: string[]): number {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, strict: true, options: OPTIONS });
  const path = positionals[0];
  const overlay = values['xds-overlay'];
  if (positionals.length > 1 || (!path && !overlay)) {
    process.stderr.write(HELP);
    return 2;
  }
  for (const p of [path, overlay]) if (p !== undefined && !existsSync(p)) throw new CliError(`${p}: no such file or directory`);
  try {
    const merge = values['merge-domain-config'] ?? parseBool(process.env.MERGE_DOMAIN_CONFIG ?? '', 'MERGE_DOMAIN_CONFIG');
    const limits = configLimits(maxConfigBytesOf(values['max-config-bytes']), merge);
    if (overlay) return checkOverlay(overlay, path, limits);
    const config = loadConfigDir(path!, limits);
    // The same rule as serve, which starts on an empty directory with this warning.
    if (config.domains.size === 0) process.stderr.write(`tollgate: warning: ${path}: ${NO_CONFIG_WARNING}\n`);
    for (const domain of config.domains.values()) {
      for (const note of domain.notes) process.stderr.write(`tollgate: warning: ${note}\n`);
      process.stdout.write(describeDomain(domain));
    }
    process.stdout.write(`OK: ${config.domains.size} domain(s), config hash ${config.hash}\n`);
    return 0;
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${err.message}\n${err.problems.length} problem(s); nothing loaded.\n`);
    return 1;
  }
}

/** --xds-overlay: the overlay checked alone, or written into DIR's files (what a server generates, dumped as
 * envoyproxy/ratelimit's YAML), validated together and listed, each entry that took nothing named. */
function checkOverlay(file: string, dir: string | undefined, limits: ConfigLimits): number {
  const overlay = parseOverlay(file, readOverlayText(file, limits.maxFileBytes));
  if (!dir) {
    process.stdout.write(`OK: overlay ${file}, ${overlay.entries.length} entr${overlay.entries.length === 1 ? 'y' : 'ies'}\n`);
    return 0;
  }
  const { sources, unmatched } = overlaySources(readConfigSources(dir, limits), overlay);
  const config = compileSources(sources, limits.mergeDomains);
  for (const note of unmatched) process.stderr.write(`tollgate: warning: ${note}\n`);
  for (const domain of config.domains.values()) process.stdout.write(describeDomain(domain));
  process.stdout.write(
    `OK: ${config.domains.size} domain(s) with overlay ${file}, ${unmatched.length} entr${unmatched.length === 1 ? 'y' : 'ies'} unmatched\n`,
  );
  return 0;
}

/** `fromXds`: the domain is answered as envoyproxy/ratelimit's, without headers unless its config says. */
function describeDomain(d: CompiledDomain, fromXds = false): string {
  const headers = d.headers?.style ?? (fromXds ? 'none (from xDS)' : DEFAULT_HEADERS.style);
  const lines = [`domain ${d.name} (${d.file}), headers: ${headers}${d.tiers.size ? `, tiers: ${[...d.tiers].join(', ')}` : ''}`];
  for (const r of d.rules) {
    const flags = [
      r.inFlight ? inFlightSummary(r.inFlight) : r.algorithm,
      r.charge ? chargeSummary(r) : '',
      r.shadow ? 'shadow' : '',
      r.quota ? 'quota_mode' : '',
      r.unlimited ? 'unlimited' : '',
      r.variable.some((v) => !v) && r.id.includes('*') ? 'shared' : '',
    ]
      .filter(Boolean)
      .join(', ');
    const text = (l: CompiledLimit): string => limitText(l, r.algorithm);
    lines.push(`  ${r.id}  ${r.unlimited ? 'unlimited' : r.limits.map(text).join(' + ')}  [${flags}]  ${r.source}`);
    for (const [tier, limits] of r.tierLimits) lines.push(`    tier ${tier}: ${limits.map(text).join(' + ')}`);
  }
  return `${lines.join('\n')}\n`;
}

/** A limit, with its own algorithm when it is not its rule's (a token bucket beside a fixed window). */
function limitText(l: CompiledLimit, ruleAlgorithm: string): string {
  const kind = ALGORITHMS[l.kind]!;
  if (kind.slots) return `${l.requestsPerUnit} ${kind.per(l)}`;
  const { burst } = kind.shown(l);
  const own = l.algorithm === ruleAlgorithm ? '' : ` (${l.algorithm}${burst === undefined ? '' : `, burst ${burst}`})`;
  return `${l.requestsPerUnit}/${windowText(l)}${own}`;
}

/** A charge_mode rule in a line: its reservations and settlements, when it takes them, and its usage ledger. */
function chargeSummary(r: Rule): string {
  const reservations = r.reservationKey ? `, reservation_key ${r.reservationKey}, reservation_ttl ${r.reservationTtlMs / 1000}s` : '';
  const usage = r.usage ? `, usage ledger (values: ${r.usage.values.join(' ') || 'none'})` : '';
  return `charge_mode${reservations}${r.settlementKey ? `, settlement_key ${r.settlementKey}` : ''}${usage}`;
}

/** An in_flight rule in a line: its lease, how long it is renewed, the entry that names a request. */
function inFlightSummary(f: InFlightSpec): string {
  const hold = f.maxHoldMs ? `, max_hold ${f.maxHoldMs / 1000}s` : '';
  return `in_flight, lease ${f.leaseMs / 1000}s${hold}${f.requestKey ? `, request_key ${f.requestKey}` : ''}`;
}
