// Where a program is on PATH: scripts/check-system.mjs, scripts/kubectl.mjs and the system-check test share it.
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

/** The absolute path of `name` in one of PATH's directories, if it is an executable file there: callers may run
 * it under another PATH. */
export function onPath(name) {
  for (const dir of (process.env.PATH ?? '').split(delimiter).filter(Boolean)) {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      // not in this directory
    }
  }
  return undefined;
}
