// Prometheus text exposition (format 0.0.4) of the server's counters, gauges and histograms: no client
// library, a few dozen lines. Histograms keep cumulative bucket counts, a sum and a count, as Prometheus
// expects (`_bucket{le="…"}`, `_sum`, `_count`).

export class Histogram {
  private readonly counts: number[];
  private sum = 0;
  private count = 0;

  constructor(readonly name: string, readonly help: string, readonly bounds: readonly number[]) {
    this.counts = new Array<number>(bounds.length).fill(0);
  }

  observe(x: number): void {
    this.sum += x;
    this.count++;
    for (let i = 0; i < this.bounds.length; i++) if (x <= this.bounds[i]!) this.counts[i]!++;
  }

  get observations(): number { return this.count; }

  text(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    this.bounds.forEach((b, i) => lines.push(`${this.name}_bucket{le="${b}"} ${this.counts[i]}`));
    lines.push(`${this.name}_bucket{le="+Inf"} ${this.count}`, `${this.name}_sum ${this.sum}`, `${this.name}_count ${this.count}`);
    return lines.join('\n');
  }
}

/** Counters with labels: name{k="v",…} value. */
export class LabeledCounter {
  private readonly values = new Map<string, number>();

  constructor(readonly name: string, readonly help: string) {}

  inc(labels: Record<string, string> = {}, by = 1): void {
    const key = Object.entries(labels).map(([k, v]) => `${k}="${v.replace(/["\\\n]/g, '_')}"`).join(',');
    this.values.set(key, (this.values.get(key) ?? 0) + by);
  }

  get total(): number { let n = 0; for (const v of this.values.values()) n += v; return n; }

  text(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    if (this.values.size === 0) lines.push(`${this.name} 0`);
    for (const [key, v] of this.values) lines.push(key ? `${this.name}{${key}} ${v}` : `${this.name} ${v}`);
    return lines.join('\n');
  }
}

export function gauge(name: string, help: string, value: number, type: 'gauge' | 'counter' = 'gauge'): string {
  return `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name} ${Number.isFinite(value) ? value : 0}`;
}

/** Latency buckets in seconds, 1 ms to 60 s. */
export const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
