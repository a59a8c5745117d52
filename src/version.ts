import { readFileSync } from 'node:fs';

/** The version in package.json, read once: package.json sits one level above both src/ (tests) and dist/
 * (the built CLI), and ships in the package. */
export const VERSION: string = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
