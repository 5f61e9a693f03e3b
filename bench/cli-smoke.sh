#!/usr/bin/env bash
# The user's path through the CLI, end to end, on whatever backend `auto` picks (CUDA on the device):
# the README's demo (`fuseformer` with no command: train the tiny GPT-2), then `generate` and `chat` from its
# checkpoint, `quantize` it (INT4 AWQ with --eval, INT8 SmoothQuant), `generate` from the quantized
# directory, `serve` it and talk to the server over HTTP (models, completions, streamed completions,
# a malformed request, then SIGINT: it drains and exits 0), a BERT trained and `embed`ded (plain and as a
# sentence-transformers directory), a decoder embedding model's `embed` with its query prompt, a cross-encoder's
# `rerank` and /v1/rerank (a decoder reranker's `rerank` too), and `info` / `selftest`.
# Every step's output is checked; the last lines are a PASS / FAIL table and the exit code is the
# number of failures. Logs go to $OUT (the device tool's folder) or a temporary directory.
#
#   bash bench/cli-smoke.sh            # on the GPU: the demo's 600 steps
#   SMOKE_STEPS=4 bash bench/cli-smoke.sh   # quick, on the CPU
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
cli="node $repo/dist/src/cli/main.js"
out=${OUT:-$(mktemp -d)}
work=$(mktemp -d)
cd "$work" || exit 1
failures=0
results=()
check() { # name condition-description rc
  local name=$1 ok=$2
  if [ "$ok" = 1 ]; then results+=("PASS $name"); else results+=("FAIL $name"); failures=$((failures + 1)); fi
  echo "== $name: $([ "$ok" = 1 ] && echo PASS || echo FAIL)"
}
has() { grep -q -- "$2" "$out/$1.log"; }

steps_flag=()
[ -n "${SMOKE_STEPS:-}" ] && steps_flag=(--steps "$SMOKE_STEPS" --eval-every "$SMOKE_STEPS")

# 1. The demo, as `npm start` runs it (here with the work directory as its cwd: runs/ lands there).
$cli train "${steps_flag[@]}" > "$out/smoke-train.log" 2>&1; rc=$?
ckpt=$(ls -d "$work"/runs/gpt2-tiny/step-* 2>/dev/null | tail -1)
check demo-train "$([ $rc -eq 0 ] && [ -n "$ckpt" ] && [ -f "$work/runs/gpt2-tiny/loss.svg" ] && echo 1)"

# 2. generate from the checkpoint (the README's next command).
$cli generate --model "$ckpt" --prompt "Call me" --max-tokens 24 > "$out/smoke-generate.log" 2>&1; rc=$?
check generate "$([ $rc -eq 0 ] && has smoke-generate "Call me" && echo 1)"

# 3. quantize: INT4 AWQ with held-out perplexity, INT8 SmoothQuant; a second quantize into the same
#    --out replaces its own earlier output; --out at the model itself is refused by name.
$cli quantize --model "$ckpt" --out "$work/q4" --bits 4 --method awq --group 32 --eval --eval-batches 2 \
  --calibration-samples 8 --calibration-len 64 > "$out/smoke-quantize4.log" 2>&1; rc=$?
check quantize-int4-awq "$([ $rc -eq 0 ] && [ -f "$work/q4/model.safetensors" ] && has smoke-quantize4 perplexity && echo 1)"
$cli quantize --model "$ckpt" --out "$work/q8" --bits 8 --calibration-samples 8 --calibration-len 64 > "$out/smoke-quantize8.log" 2>&1; rc=$?
check quantize-int8-smoothquant "$([ $rc -eq 0 ] && [ -f "$work/q8/model.safetensors" ] && echo 1)"
$cli quantize --model "$ckpt" --out "$work/q8" --bits 8 --method rtn > "$out/smoke-quantize8-again.log" 2>&1; rc=$?
check quantize-replaces-own-output "$([ $rc -eq 0 ] && echo 1)"
$cli quantize --model "$ckpt" --out "$ckpt" --bits 8 --method rtn > "$out/smoke-quantize-self.log" 2>&1; rc=$?
check quantize-refuses-model-as-out "$([ $rc -ne 0 ] && [ -f "$ckpt/model.safetensors" ] && has smoke-quantize-self "out" && echo 1)"

# 2b. chat with the checkpoint given a chat template: two piped turns, the second reading the first from the cache.
cp -r "$ckpt" "$work/chat"
node -e 'const fs = require("fs"), p = process.argv[1] + "/tokenizer_config.json"; const c = fs.existsSync(p) ? JSON.parse(fs.readFileSync(p, "utf8")) : {};
  c.chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"; fs.writeFileSync(p, JSON.stringify(c));' "$work/chat"
printf 'Call me Ishmael.\nAnd then?\n' | $cli chat --model "$work/chat" --max-tokens 16 --temperature 0 > "$out/smoke-chat.out" 2> "$out/smoke-chat.log"; rc=$?
check chat "$([ $rc -eq 0 ] && [ "$(grep -c 'from the cache' "$out/smoke-chat.log")" = 2 ] && grep -qE 'prompt [0-9]+ positions, [1-9][0-9]* from the cache' "$out/smoke-chat.log" && echo 1)"

# 4. generate from the quantized directories.
$cli generate --model "$work/q4" --prompt "Call me" --max-tokens 24 > "$out/smoke-generate-q4.log" 2>&1; rc=$?
check generate-int4 "$([ $rc -eq 0 ] && has smoke-generate-q4 "Call me" && echo 1)"
$cli generate --model "$work/q8" --prompt "Call me" --max-tokens 24 --temperature 0.8 --seed 7 > "$out/smoke-generate-q8.log" 2>&1; rc=$?
check generate-int8-sampled "$([ $rc -eq 0 ] && has smoke-generate-q8 "Call me" && echo 1)"

# A server in the background on a free port: sets $server and $port (empty if it never listened).
start_server() { # log-name serve-args...
  local log="$out/$1.log"; shift
  $cli serve "$@" --port 0 > "$log" 2>&1 &
  server=$!
  port=
  for _ in $(seq 1 240); do
    port=$(grep -oE 'http://[^ ]+:[0-9]+' "$log" 2>/dev/null | head -1 | grep -oE '[0-9]+$')
    [ -n "$port" ] && break
    kill -0 $server 2>/dev/null || break
    sleep 0.5
  done
}
# SIGINT: the server drains and exits; sets rc (137 if it had to be killed).
stop_server() {
  kill -INT $server 2>/dev/null
  for _ in $(seq 1 60); do kill -0 $server 2>/dev/null || break; sleep 0.5; done
  if kill -0 $server 2>/dev/null; then kill -KILL $server; rc=137; else wait $server; rc=$?; fi
}

# 5. serve the INT4 directory on a free port; talk to it; SIGINT drains and exits 0.
start_server smoke-serve --model "$work/q4"
check serve-listens "$([ -n "$port" ] && echo 1)"
if [ -n "$port" ]; then
  PORT=$port node --input-type=module > "$out/smoke-http.log" 2>&1 <<'EOF'
const base = `http://127.0.0.1:${process.env.PORT}/v1`;
const failures = [];
const expect = (name, ok, detail) => { console.log(`${ok ? 'ok' : 'FAILED'} ${name}${ok ? '' : ': ' + detail}`); if (!ok) failures.push(name); };
const post = (path, body) => fetch(base + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
const models = await (await fetch(base + '/models')).json();
expect('models', Array.isArray(models.data) && models.data.length === 1, JSON.stringify(models));
const model = models.data[0].id;
const completion = await post('/completions', { model, prompt: 'Call me', max_tokens: 16, temperature: 0 });
const body = await completion.json();
expect('completion', completion.status === 200 && typeof body.choices?.[0]?.text === 'string' && body.usage?.completion_tokens > 0, JSON.stringify(body));
const again = await (await post('/completions', { model, prompt: 'Call me', max_tokens: 16, temperature: 0 })).json();
expect('greedy is repeatable', again.choices?.[0]?.text === body.choices?.[0]?.text, `${JSON.stringify(again.choices?.[0]?.text)} vs ${JSON.stringify(body.choices?.[0]?.text)}`);
const streamed = await post('/completions', { model, prompt: 'Call me', max_tokens: 16, temperature: 0, stream: true });
const sse = await streamed.text();
const chunks = sse.split('\n').filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]').map((l) => JSON.parse(l.slice(6)));
const text = chunks.map((c) => c.choices?.[0]?.text ?? '').join('');
expect('streamed = non-streamed', streamed.status === 200 && sse.includes('data: [DONE]') && text === body.choices?.[0]?.text, `${JSON.stringify(text)} vs ${JSON.stringify(body.choices?.[0]?.text)}`);
const sampled = await (await post('/completions', { model, prompt: 'Call me', max_tokens: 16, temperature: 0.9, top_p: 0.9, seed: 3, logprobs: 2 })).json();
expect('sampled with logprobs', sampled.choices?.[0]?.logprobs?.tokens?.length > 0, JSON.stringify(sampled));
const many = await Promise.all(Array.from({ length: 24 }, (_, i) => post('/completions', { model, prompt: `Call me ${i}`, max_tokens: 8, temperature: 0 }).then((r) => r.status)));
expect('24 concurrent requests', many.every((s) => s === 200), JSON.stringify(many));
// Structured outputs: the answer held to a schema token by token (on CUDA: the device's greedy pick kept where allowed, else a host pick from the row).
const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, ok: { type: 'boolean' } }, required: ['name', 'ok'], additionalProperties: false };
for (const [label, extra] of [['greedy', { temperature: 0 }], ['sampled', { temperature: 0.9, seed: 5 }]]) {
  const structured = await (await post('/completions', { model, prompt: 'Call me', max_tokens: 240, ...extra, response_format: { type: 'json_schema', json_schema: { name: 'person', schema } } })).json();
  const choice = structured.choices?.[0];
  let parsed = null;
  try { parsed = JSON.parse(choice?.text); } catch {}
  expect(`structured output (${label})`, choice?.finish_reason === 'stop' && parsed !== null && typeof parsed.name === 'string' && typeof parsed.ok === 'boolean' && Object.keys(parsed).length === 2, JSON.stringify(structured));
}
const bad = await post('/completions', '{"model": ');
const badBody = await bad.json().catch(() => null);
expect('malformed JSON is a 400 with a message', bad.status === 400 && typeof badBody?.error?.message === 'string', `${bad.status} ${JSON.stringify(badBody)}`);
const negative = await post('/completions', { model, prompt: 'x', temperature: -1 });
const negBody = await negative.json().catch(() => null);
expect('negative temperature is a 400 naming it', negative.status === 400 && /temperature/.test(negBody?.error?.message ?? ''), `${negative.status} ${JSON.stringify(negBody)}`);
process.exit(failures.length);
EOF
  rc=$?
  check http-requests "$([ $rc -eq 0 ] && echo 1)"
fi
stop_server
check serve-sigint-exits-0 "$([ $rc -eq 0 ] && echo 1)"

# 6. A BERT trained here, then `embed` from its checkpoint: plainly (mean pooling, --normalize), and as a
#    sentence-transformers directory (modules.json: CLS pooling then Normalize by default).
bert_steps=(--steps "${SMOKE_STEPS:-40}" --eval-every "${SMOKE_STEPS:-40}")
$cli train --model bert-tiny "${bert_steps[@]}" --out "$work/bert" > "$out/smoke-train-bert.log" 2>&1; rc=$?
bert=$(ls -d "$work"/bert/step-* 2>/dev/null | tail -1)
check train-bert "$([ $rc -eq 0 ] && [ -n "$bert" ] && echo 1)"
norms() { node -e 'const r = JSON.parse(require("fs").readFileSync(0, "utf8")); console.log(r.data.map((d) => Math.hypot(...d.embedding).toFixed(4)).join(" "))'; }
$cli embed --model "$bert" --text "Call me Ishmael." --text "The whale." --normalize > "$out/smoke-embed.json" 2> "$out/smoke-embed.log"; rc=$?
check embed "$([ $rc -eq 0 ] && [ "$(norms < "$out/smoke-embed.json")" = "1.0000 1.0000" ] && echo 1)"
if [ -n "$bert" ]; then
  mkdir -p "$bert/1_Pooling"
  echo '[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},{"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]' > "$bert/modules.json"
  echo '{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}' > "$bert/1_Pooling/config.json"
fi
$cli embed --model "$bert" --text "Call me Ishmael." --text "The whale." > "$out/smoke-embed-st.json" 2> "$out/smoke-embed-st.log"; rc=$?
check embed-sentence-transformers "$([ $rc -eq 0 ] && [ "$(norms < "$out/smoke-embed-st.json")" = "1.0000 1.0000" ] && grep -q 'cls pooling, normalised (sentence-transformers' "$out/smoke-embed-st.log" && echo 1)"
# The same directory served as /v1/embeddings: the vectors `embed` printed, over HTTP (float and base64).
start_server smoke-serve-embed --model "$bert"
check serve-embeddings-listens "$([ -n "$port" ] && echo 1)"
if [ -n "$port" ]; then
  PORT=$port EXPECTED="$out/smoke-embed-st.json" node --input-type=module > "$out/smoke-http-embed.log" 2>&1 <<'EOF'
import { readFileSync } from 'node:fs';
const base = `http://127.0.0.1:${process.env.PORT}/v1`;
const expected = JSON.parse(readFileSync(process.env.EXPECTED, 'utf8')).data.map((d) => d.embedding);
const post = (body) => fetch(base + '/embeddings', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const cosine = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0) / Math.hypot(...a) / Math.hypot(...b);
const input = ['Call me Ishmael.', 'The whale.'];
const floats = await (await post({ input })).json();
const base64 = await (await post({ input, encoding_format: 'base64' })).json();
const decoded = base64.data.map((d) => Array.from(new Float32Array(new Uint8Array(Buffer.from(d.embedding, 'base64')).buffer)));
const worst = Math.min(...floats.data.map((d, i) => cosine(d.embedding, expected[i])), ...decoded.map((v, i) => cosine(v, expected[i])));
console.log(`worst cosine against embed: ${worst}`);
process.exit(worst >= 0.9999 ? 0 : 1);
EOF
  rc=$?
  check http-embeddings "$([ $rc -eq 0 ] && echo 1)"
fi
stop_server
check serve-embeddings-sigint-exits-0 "$([ $rc -eq 0 ] && echo 1)"

# 6a. A decoder embedding model (the repository's Qwen3-Embedding-shaped fixture): `embed` with its query prompt
#     gives SentenceTransformer.encode's vectors (test/fixtures/qwen3-embedding/expected.json), in f32.
decoder_embedding="$repo/test/fixtures/qwen3-embedding"
$cli embed --model "$decoder_embedding/model" --text "Call me Ishmael." --text "whale" --prompt-name query --dtype f32 \
  > "$out/smoke-embed-decoder.json" 2> "$out/smoke-embed-decoder.log"; rc=$?
check embed-decoder "$([ $rc -eq 0 ] && node -e '
const fs = require("fs"), got = JSON.parse(fs.readFileSync(process.argv[1], "utf8")).data.map((d) => d.embedding);
const want = JSON.parse(fs.readFileSync(process.argv[2], "utf8")).cases.find((c) => c.prompt_name === "query").vectors;
const worst = Math.max(...got.map((v, i) => Math.max(...v.map((x, h) => Math.abs(x - want[[0, 2][i]][h])))));
process.exit(worst < 1e-4 ? 0 : 1);' "$out/smoke-embed-decoder.json" "$decoder_embedding/expected.json" && echo 1)"

# 6b. A cross-encoder (the repository's tiny fixture): `rerank` ranks best first; the same directory served as
#     /v1/rerank gives the same scores over HTTP; SIGINT exits 0.
reranker="$repo/test/fixtures/cross-encoder/xlm-roberta"
$cli rerank --model "$reranker" --query "where did the whale go" --document "The whale swam north" --document "Call me Ishmael." --document "whale" \
  > "$out/smoke-rerank.json" 2> "$out/smoke-rerank.log"; rc=$?
check rerank "$([ $rc -eq 0 ] && node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).results; process.exit(r.length === 3 && r.every((x, i) => i === 0 || r[i - 1].relevance_score >= x.relevance_score) ? 0 : 1)' "$out/smoke-rerank.json" && echo 1)"
start_server smoke-serve-rerank --model "$reranker"
check serve-rerank-listens "$([ -n "$port" ] && echo 1)"
if [ -n "$port" ]; then
  PORT=$port EXPECTED="$out/smoke-rerank.json" node --input-type=module > "$out/smoke-http-rerank.log" 2>&1 <<'EOF'
import { readFileSync } from 'node:fs';
const expected = JSON.parse(readFileSync(process.env.EXPECTED, 'utf8')).results;
const response = await fetch(`http://127.0.0.1:${process.env.PORT}/v1/rerank`, {
  method: 'POST', headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ query: 'where did the whale go', documents: ['The whale swam north', 'Call me Ishmael.', 'whale'] }),
});
const results = (await response.json()).results;
const worst = Math.max(...expected.map((e) => Math.abs(results.find((r) => r.index === e.index).relevance_score - e.relevance_score)));
console.log(`status ${response.status}, largest score difference from rerank: ${worst}`);
process.exit(response.status === 200 && worst <= 1e-6 ? 0 : 1);
EOF
  rc=$?
  check http-rerank "$([ $rc -eq 0 ] && echo 1)"
fi
stop_server
check serve-rerank-sigint-exits-0 "$([ $rc -eq 0 ] && echo 1)"

# 6c. A decoder reranker (the repository's Qwen3-Reranker-shaped fixture): `rerank` with its "whales" prompt gives
#     CrossEncoder.predict's scores (test/fixtures/qwen3-reranker/expected.json), in f32.
decoder_reranker="$repo/test/fixtures/qwen3-reranker"
$cli rerank --model "$decoder_reranker/causal" --query "What do whales eat?" --document "Whales eat krill." --document "yes" --prompt-name whales --dtype f32 \
  > "$out/smoke-rerank-decoder.json" 2> "$out/smoke-rerank-decoder.log"; rc=$?
check rerank-decoder "$([ $rc -eq 0 ] && node -e '
const fs = require("fs"), got = JSON.parse(fs.readFileSync(process.argv[1], "utf8")).results;
const want = JSON.parse(fs.readFileSync(process.argv[2], "utf8")).causal.cases.find((c) => c.prompt_name === "whales").scores;
const worst = Math.max(...got.map((r) => Math.abs(r.relevance_score - want[[0, 2][r.index]])));
process.exit(got.length === 2 && worst < 1e-4 ? 0 : 1);' "$out/smoke-rerank-decoder.json" "$decoder_reranker/expected.json" && echo 1)"

# 7. info and a quick selftest.
$cli info > "$out/smoke-info.log" 2>&1; rc=$?
check info "$([ $rc -eq 0 ] && echo 1)"
$cli selftest > "$out/smoke-selftest.log" 2>&1; rc=$?
check selftest "$([ $rc -eq 0 ] && echo 1)"

rm -rf "$work"
echo
echo "| CLI smoke step | result |"
echo "|---|---|"
for r in "${results[@]}"; do echo "| ${r#* } | ${r%% *} |"; done
echo "failures: $failures (logs in $out)"
exit $failures
