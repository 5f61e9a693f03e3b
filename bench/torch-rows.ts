// The rows bench/torch_decode.py prints on stdout as it measures them, one JSON object a line
// ({"mode", "batch", "result"}): what bench/decode.ts keeps when the PyTorch process dies before its
// final summary line (torch 2.11's compiled static cache ended it with SIGSEGV on the H200).

/** One HF generate() measurement: ms/token and tokens/s, or why there is none. */
export interface TorchResult { ms_per_token?: number; tokens_per_s?: number; error?: string }

export interface TorchRow { mode: string; batch: number; result: TorchResult }

/** The per-row lines bench/torch_decode.py prints as it measures ({"mode", "batch", "result"}). */
export function torchRows(stdout: string): TorchRow[] {
  const rows: TorchRow[] = [];
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('{"mode"')) continue;
    try {
      const r = JSON.parse(line) as { mode?: unknown; batch?: unknown; result?: unknown };
      if (typeof r.mode === 'string' && typeof r.batch === 'number' && typeof r.result === 'object' && r.result !== null) rows.push({ mode: r.mode, batch: r.batch, result: r.result as TorchResult });
    } catch { /* a line cut off by the crash */ }
  }
  return rows;
}
