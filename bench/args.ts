/** Command-line flags of the bench's programs. */

/** The value after `name` in argv, undefined if the flag is absent; a flag without a value is an error. */
export function flagValue(argv: readonly string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  if (i < 0) return undefined;
  const v = argv[i + 1];
  if (v === undefined || v.startsWith('--')) throw new Error(`${name} needs a value`);
  return v;
}
