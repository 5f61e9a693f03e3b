// Three-way switches read from the environment: '1' forces a path on, '0' off, anything else (unset)
// leaves the choice to the code's own rule ('auto').

export function envSwitch(value: string | undefined): boolean | 'auto' {
  if (value === '1') return true;
  if (value === '0') return false;
  return 'auto';
}
