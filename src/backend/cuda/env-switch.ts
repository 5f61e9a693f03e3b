// Three-way switches read from the environment: '1' forces a path on, '0' off, anything else (unset)
// leaves the choice to the code's own rule ('auto').

/** A strict on/off switch: '1' on, '0' off, unset or empty `fallback`; any other value is an error naming `name`. */
export function envFlag(name: string, value: string | undefined, fallback: boolean): boolean {
  if (value === undefined || value === '') return fallback;
  if (value === '1') return true;
  if (value === '0') return false;
  throw new Error(`${name} must be 0 or 1, got '${value}'`);
}

export function envSwitch(value: string | undefined): boolean | 'auto' {
  if (value === '1') return true;
  if (value === '0') return false;
  return 'auto';
}
