#!/usr/bin/env bash
# The GPU checks and measurements of code that has not yet run on a GPU, in priority order, one after
# another (never side by side: two processes on one GPU skew timings, and a run of three at once hung
# once), each bounded by SIGKILL (a Node process busy in a synchronous call never sees SIGTERM).
# Logs go to $OUT (the device tool's folder) or bench/results/gpu-pending/; the last lines summarise.
#
#   bash bench/gpu-pending.sh [step ...]     steps: s59-fused-o s59-h200 s57-suite s57-smoke s57-norm-forms s56-norm s56-llama8b s56-verify s55-packed s55-hf s55-qkv s55-d128 s55-first s54-verify s54-prefix s53-decoder-rerank s52-cluster-rows s52-decoder-embed-profile s52-decoder-embed s51-penalties s51-sampled-ours s51-sampled s51-cluster s51-sample s51-first s50-device-mask s50-structured-bench s50-structured s49-smoke s48-qwen3-rest s48-qwen3 s47-rerank s47-dense s47-mpnet s47-rounds s47-verify s47-embed s46-embed s46-embed-profile s46-embed-host s46-embed-http s46-buckets s46-smoke s45-tokenizer s44-h200 s44-verify s42-beam s42-h200 s42-dist s41-defaults head-argmax graph-steps s40-defaults fused-mlp fused-o fused-extras head-norm sample-splits s37-quant-kernels s37-quant-1b serve-pipeline quant-llama quant-llama-1b stream-rows int4-after-wait int4-zero-fold int8-loop s34-int8-b4 s34-int8-plans s34-int4 int4-dequant one-pass ncu-src s33-verify weight-prefetch gemv-loop ncu s33-sweeps s32-route s32-check chain s31-verify s31-families s30-engines s30-defaults early-write sass l2-verify norm-k2048 timelines-b1 int4-default int4-tma-b1 int4-tma refresh-decode refresh-serve norm-tma stream4 stream3 stream2 skinny-recheck stream stream-probe bf16-pairs gemv-preload norm-preload norm-defaults int4-norm timeline norm-recheck append rope-check append-more regress regress-infer profile-append serve-append int4-rows int4-warps int8-plan int4-plan int4-mma-sweep wgmma wgmma-checks wgmma-varlen wgmma-train wgmma-infer profile-removal sampled-serve picks-tests profile-b1 spec-medium-hf skinny-sweep spec-sample spec-trained-hf norm-default spec-device norm-sweep norm-sweep2 multi-step async-upload async-spec split-sweep skinny prefetch profile-train quant-bench quant-quality beam-speed spec-trained spec-trained-medium split-tests decode-tune spec-ours decode-pipelined pipelined throughput-tests profile-throughput serve-throughput step-tests step-tests2 serve-quick int8-norm gemv-sweep tests infer-tests profile-shapes decode-hf decode-hf-static decode-norm infer-ops decode-fusions decode-quant spec profile-serve serve-cpuprof profile-quant serve-tests gemv-sweep quant-tests decode-int4 decode-int8 decode-quant-gated mma-tests decode-mma serve-mma gemv profile profile-fast tokenizer infer decode decode-modes beam serve serve-eager (default: all, in order)
#
# On the lent H200 a call runs 10 minutes at most, and a session has 30 minutes of device time (a
# machine start costs 1–2; it is given back after 30 s idle, so make the calls back to back). Every
# step's bound is cut to what is left of GPU_PENDING_BUDGET (default 570 s), so the summary and the
# archive always come back; GPU_PENDING_TAR=1 packs $OUT into one archive (the device tool brings back
# only a few files a call). Next, in priority order (session 15 ran wgmma / wgmma-train as calls 1–5):
#   Next (session 61): the same one call as session 60's line below (~9.5 min; session 60 had no GPU either: every start refused until the device time was spent) — it now also covers session 60's INT4 O projection (AttentionProjection.weight as int4Linear's packed form: the infer-ops shards' "project H=... int4 G=..." op cases, decode-gemv shard 0's INT4 Llama engine test, and fused_o_bench's Llama rows with --quant int4-head, FUSEFORMER_FUSED_O=1 against the INT4 O GEMV). If the chunked projection wins, default it where it wins (CudaBackend.fusedAttentionProjection / projectsAttention's rows, INT4 included); s59-fused-o alone (~6 min: project op cases + engine tests side by side, then the timings) is the shorter form
#   Next (session 60, was): one call, ~9.5 min: GPU_SUITE_JOBS=7 GPU_SUITE_BOUND=300 GPU_SUITE_FILES="decode-gemv.test.js@0/2 decode-gemv.test.js@1/2 infer-ops.test.js@0/2 infer-ops.test.js@1/2 ops.test.js@0/2 ops.test.js@1/2 flash-wgmma.test.js" GPU_PENDING_TAR=1 GPU_PENDING_BUDGET=585 bash .device/run.sh bash bench/gpu-pending.sh s57-suite s59-fused-o-bench — session 59 had no GPU (every start refused, then none lent), so this is still session 58's plan (its removals never ran on a GPU) plus session 59's: decode attention's cluster combine removed (dead branches only in the default kernels) and the O projection cut into output chunks, taken alone by models whose MLP is not fused (FUSEFORMER_FUSED_O=1, opt-in until measured; the infer-ops shards hold its op cases, decode-gemv shard 0 its engine test): s59-fused-o-bench then times GPT-2 b1 / b4 and Llama b1 with it against the default. If it wins, make it the default where it wins (CudaBackend.fusedAttentionProjection, projectsAttention's rows) and rerun bench:decode with HF (s59-h200) on the H200; if a suite file is cut, name it again with @i/n shards
#   Next (session 59, was): GPU_SUITE_JOBS=6 GPU_SUITE_BOUND=540 GPU_SUITE_FILES="decode-gemv.test.js@0/2 decode-gemv.test.js@1/2 infer-ops.test.js@0/2 infer-ops.test.js@1/2 ops.test.js flash-wgmma.test.js" ... s57-suite (one call, ~9.5 min; FILE@i/n runs shard i of n of its op cases, FUSEFORMER_TEST_SHARD: the files session 58 could not finish — decode-gemv killed at 314 s, infer-ops at 420 s, both before any result came back; flash-wgmma cut by the budget at 61 s; ops not reached — six processes at once: a cold file's time is mostly NVRTC on one core, and the device has 16). Each test is now reported as it ends (test/gpu/report-as-you-go.ts), so a cut file shows what passed and where it stopped: if one still cannot finish, split it by --test-name-pattern / FUSEFORMER_TEST_OPS. These also verify session 58's removals on the GPU (the streamed GEMM's norm forms, pre-wait and early trigger; three weight-load probes; FUSEFORMER_PROGRAMMATIC_RESTRICT: every catalogued kernel's source byte-identical before and after, so the default kernels are unchanged). Then bench:decode / bench:serve-speed with HF on the H200 when lent (the issue tables' rows are session 42's)
#   (session 58 ran, on H100s; one start refused, 181 s:) s57-suite in four calls: quant 97/97, infer-quantized 14/14, head-argmax 1/1, serve-engine 3/3, speculative 7/7, beam 15/15, paged-attention 97/97, gpt2-train 3/3, runtime 17/17, graph 2/2, tp-decode 1/1, tp-serve 1/1, nccl 1/1, vocab-shard 5/5, sum-squares 1/1, serve-constrained 2/2, decoder-embed 3/3, decoder-rerank 2/2, bert 5/5, models-train 5/5, gemm 391/391, flash-attention 33/33, flash-varlen 15/15, flash-tiles 51/51, flash-dropout 19/19, flash-backward 24/24 (multi-gpu: skipped, one GPU); decode-gemv and infer-ops killed with no result printed (their synchronous subtests held node:test's reporter: fixed after the calls)
#   Next (session 58, was): s57-suite (the whole GPU suite a file at a time: session 57's call 2 ran infer-engine 5/5 and was cut in quant.test.js; name the rest in GPU_SUITE_FILES from quant.test.js on — the megakernel, the streaming INT4 GEMV and the L2 prefetch were removed in session 57, verified by the CPU suite, the kernel catalog's nvcc compile and the emulator only; a file the budget cuts shows "skipped: budget": name the rest in GPU_SUITE_FILES next call), then bench:decode / bench:serve-speed with HF on the H200 when lent (the issue tables' rows are session 42's). Leads: the LayerNorm backward at BERT size is its deterministic column sums' 1.24 us on the chain (the row kernel alone 85% of a same-size copy: docs/perf.md "Session 57")
#   (session 57 ran, on H100s; eight other starts refused:) s57-suite (call 2, 160 s: infer-engine 5/5, quant.test.js cut at 122 s), s57-norm-forms + s57-smoke (call 1: Norm op cases 58/58; session 56's launch forms 0.6 us faster at BERT's rows, 18.62 -> 18.00 us; bench:kernels LayerNorm bwd BERT 79%, GPT-2 85% of a same-size copy; cli-smoke 26/26 PASS with the servers' warm-up)
#   Next (session 57, was): s57-smoke (~5 min: bench/cli-smoke.sh — the embeddings / rerank servers' new start-up warm-up, never run on a GPU), s57-norm-forms (~2 min: session 56's two LayerNorm-backward launch changes against the old forms, and where the row kernel's fixed cost goes; the build also reads gamma's registers from shared memory, after call 3: the Norm op cases run first); then bench:decode / bench:serve-speed with HF on the H200 when lent (the issue tables' rows are session 42's; sessions 43-56 measured on H100s). Leads: LayerNorm backward at BERT size is ~3 µs of fixed cost over a copy (docs/perf.md "Session 56"); the misses of #5-#7 stand; the embeddings / rerank servers have no start-up warm-up (the generative server's warmup.ts: kernel compiles and GEMM tunings before the first request; one rerank HTTP round took 835 ms in s56 call 1)
#   (session 56 ran, on H100s; five starts refused, ~10 device minutes lost to them:) s56-verify (call 1: op cases 79/79, decoder + engine suites 10/10; rerank over HTTP 348.5 ms with per-request answers; rerank 4.07x / 2.10x, embed-decoder 3.87x / 1.58x), s56-llama8b (call 2: Llama 3.1 8B b1 6.008 ms/token = 86% of floor, 3.75x HF eager / 1.33x static; b32 5,536 tok/s, 1.98x static), s56-norm (call 3: Norm op cases 58/58 both ways; the LayerNorm backward 4.82 us fixed + 13.28 per 8192 rows against the copy's 1.73 + 12.44; fused column sums slower, withdrawn; shapes: 8,2,2 stays)
#   Next (session 56, was): s56-verify then s56-llama8b (never run on a GPU: the rerank server answering each request as its pairs are scored — bench:rerank prints the rounds now, HTTP was 487.5 ms against 321.8 in process in call 3 —, the head_rstd refactor under the d-128 op cases, the decoder suites), then bench:rerank / bench:embed-decoder / bench:decode --models qwen3 on the H200 when lent (session 55 measured on H100s). Leads: the packed pass's attention is the mma kernel over paged keys (a wgmma form for paged keys), the gated MLP product at 62-70% of the GEMM roof (its SwiGLU a separate pass), the embeddings server's rounds (395 ms over HTTP against 337 in process)
#   (session 55 ran, on H100s, calls 4-5:) s55-packed (decoder encoder passes packed: embed-decoder 342.4 -> 326.7 ms, decoder-embed suite 3/3; by hand: rerank dense passes 458.8 -> 368.9 ms): the default
#   (session 55 ran, on H100s:) s55-d128 + s55-first (call 1: d-128 decode attention on tensor cores + the fused append with head norms: engines 5/5, Qwen3-0.6B b1 0.816 -> 0.744, b32 1.283 -> 1.162 ms/token, serving C256 19.3k -> 27.6k tok/s; profiles: qkvRopeAppend 18% of a Qwen3 embedding batch; four-block sampling clusters 66/66, GPT-2 b32 sampled 0.467 -> 0.438: default), s55-qkv (call 2: qkvRopeAppend in vectors 84.5 -> 34.6 us; 67/67 + 102/102; embed-decoder 375.6 -> 343.9 ms, rerank 358.3 -> 320.1), s55-hf (call 3: rerank bf16 3.93x HF eager sorted / 2.13x compile; embed-decoder 3.72x / 1.50x)
#   Next (session 55, was): s52-cluster-rows (~3 min), s52-decoder-embed-profile (~4 min), then bench:rerank in full on the H200 when lent (sessions 53-54 measured on H100s); the shared prefix's paged pass runs flash attention's mma kernel, not wgmma (paged keys): a wgmma form for paged keys is the lead if the suffix pass's attention shows in a profile
#   (session 54 ran, on H100s; eight starts failed:) s54-prefix (call 1: decoder-embed 3/3 + decoder-rerank 2/2 with the shared prefix; bench:rerank bf16 356.4 ms shared / 409.5 dense = 3.32x HF eager sorted, 1.74x compile; HTTP rounds 412 ms; a dense rep stalled 10.5 s: GEMM own-tunings), s54-verify (call 2: no stall, dense 420.9, shared 380.4 (noisy); f32 511/512 pairs within 1.6e-6, the one at 6.2e-3 an uncut 512-token pair: tail written as sentence-transformers does, fixed)
#   Next (session 54, was): s53-decoder-rerank again (~6 min: bench:rerank with the rerank server's rounds — session 53's HTTP run scored requests one at a time, 953 ms against 418 in process — every rep printed (one of call 2's two reps stalled at ~19 s: find why), f32 correctness with the baseline's tail restore), then s52-cluster-rows (~3 min), s52-decoder-embed-profile (~4 min), bench:embed / bench:embed-decoder / bench:rerank on the H200 when lent
#   (session 53 ran, on one H100, ten starts refused:) s53-decoder-rerank (call 1: GPU suite 2/2; bench:rerank bf16 420.4 ms = 2.89x HF eager sorted, 1.61x torch.compile; f32 1.16x; the baseline lacked sentence-transformers' tail restore on cut pairs), call 2 (bf16 with the baseline fixed: worst |dscore| 1.46e-2), call 3 (ours only, 5 reps: 418.1 ms, HTTP 953.2 ms)
#   Next (session 53, was): s52-cluster-rows (~3 min: 4-block clusters, FUSEFORMER_SAMPLE_CLUSTER_FOUR=1, opt-in and never checked on a GPU — the op cases with it, then bench:sample and sampled decode with / without; default it if they pass and gain; and the 8 x 1024 shape: temperature-only rows are Philox-bound, and the one-block kernel gives a 128k row 8 x 1024 threads against the cluster's 8 x 512), s52-decoder-embed-profile (~4 min: where a decoder embedding batch's time goes; bf16 runs its GEMMs at ~311 TFLOP/s overall), then bench:embed / bench:embed-decoder on the H200 when lent (sessions 46-52 measured on H100s)
#   (session 52 ran, on H100s:) s52-decoder-embed (call 1: GPU suite 2/2; bench:embed-decoder bf16 392.6 ms = 3.06x HF eager sorted, 1.79x torch.compile; f32 1.18x), s51-penalties + s51-sampled-ours (call 2: penalties 2/2; cluster shapes: 4 x 512 best at 32 rows of GPT-2's vocabulary; sampled decode cluster on / off GPT-2 b1 0.286 -> 0.245, Llama b1 1.142 -> 1.029)
#   Next (session 52, was): s51-penalties (~1 min: the constrained serving suite with penalised requests, frequency / presence penalties new in session 51), s51-sampled (~5 min: sampled decode beside HF generate(do_sample), cluster sampler on / off; or s51-sampled-ours, ~1.5 min, without HF, with the cluster-shape sweep), then bench:embed on the H200 (s46-embed). Leads: temperature-only rows at batch 32 are slower in the cluster kernel (18.9 vs 13.4 us at GPT-2's vocabulary): more threads a row, or the one-block kernel's split path for them
#   (session 51 ran:) s51-sample (call 2, H200: fixed-point top-p masses; bench/sample-speed.ts against PyTorch; structured sampled 0.69 ms/token; sampled serving profiles), s51-cluster (call 3, H100: the cluster sampler 60/60 op cases, engines 11/11; top-k+top-p at 128k 174 -> 59 us b1, 174 -> 122 b32; greedy decode unchanged)
#   (session 51 ran, on H100s:) s50-device-mask (maskLogits / biasLogits op cases 15/15 (3 dtypes), the file 30/30; constrained serving 2/2 with logit_bias; bench:structured with the device mask: sampled 4-field schema 9.75 -> 1.198 ms/token against 0.593 unconstrained; greedy json_object 0.323, schema 0.371 against 0.291; sampled json_object drew GPT-2's "{}" token first and stopped — the bench now picks a seed that writes)
#   Next (session 51, was): s50-device-mask (~2 min, carry bench/spec-tokenizer: node dist/bench/spec-tokenizer.js writes it) — maskLogits / biasLogits op cases on a GPU (they pass on the kernel emulator), the constrained serving suite with logit_bias requests, bench:structured again (sampled constrained was 9.1 ms/token with the host pick; the device mask should bring it near the unconstrained 0.59); then bench:embed on the H200 (when one is lent)
#   (session 50 ran, on H100s; six later starts refused:) s48-qwen3-rest (Qwen3-0.6B b1 0.818 ms/token = 30.8x HF eager, 4.1x static; b32 24,896 tok/s; engine suite 4/4), s49-smoke (cli-smoke 24/24 PASS with `fuseformer chat`), s50-structured (constrained serving 2/2, serving engine 3/3, cli-smoke 24/24 with structured requests), s50-structured-bench (host pick: constrained greedy 0.36-0.42 ms/token against 0.29 unconstrained, sampled 9.1-9.8 against 0.59)
#   Next (session 50, was): s48-qwen3-rest (~8 min), then s49-smoke (~5 min: `fuseformer chat` on CUDA, new in session 49), then bench:embed on the H200. Session 49 had 102 s of device time (no machine could start); its other work is host-only (tool calling, stop_token_ids / ignore_eos, /tokenize, --api-key / CORS, /v1/models/ID)
#   (session 49 ran:) nothing on a GPU
#   Next (session 49, was): s48-qwen3-rest (~8 min): the rest of s48-qwen3 — bench:decode --models qwen3 with HF eager / static beside it (call 2 was cut before HF's rows), the engine suite's qwen3 model on CUDA — then bench:embed on the H200. Qwen3-0.6B b1 is at 50% of its floor (28 small layers: the launch chain, as GPT-2's b1). Misses as below.
#   (session 48 ran, on H100s; eight other starts refused:) s47-rerank (BERT GPU suite 5/5 with the cross-encoder heads; cli-smoke 23/23 PASS with rerank and /v1/rerank), s48-qwen3 cut at 280 s (op cases 297/297 with the head norm; check:infer qwen3 + llama-tied all OK, qwen3 f32 rel err <= 1.2e-6, greedy 4/4; Qwen3-0.6B ours b1 0.817 ms/token, b32 24,844 tok/s, no HF rows)
#   Next (session 48, was): s47-rerank (cross-encoders on CUDA: never run there), then bench:embed on the H200 (sessions 46-47 measured on H100s). Leads for embeddings: at 32 x ~135 tokens a batch is GEMMs 1.29 ms + other kernels 1.21 ms (flash attention 27 us a layer at 33% of roof: its 128-query tiles half empty at L 135; biasQkvSplit + permute0213 0.26 ms a batch, which attention reading the packed QKV would remove). Misses as below.
#   (session 47 ran, on H100s — the H200 was asked for, H100s came:) s47-embed (embeddings pipelined: direct 193-198 -> 161-163 ms; bench:embed bf16 158.3 ms = 2.97x HF eager sorted, 1.81x torch.compile), s47-verify (check:infer 108/108 OK with the new xlm-roberta / roberta-mlm cases; BERT GPU suite 3/3 with the Embedder sync / async; async rounds: same HTTP throughput), s47-rounds (round sizes 512 / 128 / 64: 512 stays; bench:embed on the final build bf16 162.2 ms = 2.72x / 2.71x), s47-mpnet (check:infer 114/114 OK with mpnet; again 122/122 with distilbert), s47-dense (BERT GPU suite 4/4 with the sentence-transformers Dense path)
#   Next (session 47, was): the full bench:embed on the H200 (s46-embed; its rows are an H100's). Leads for embeddings: a batch is 2.5 ms of kernels in ~2.9 ms (call 4's profile: launches and the blocking download between batches) — launching batch i+1 before reading batch i, or CUDA graphs per bucketed shape, would close most of the rest. Misses as below.
#   (session 46 ran, on an H100 — the H200 was not lent:) s46-embed (BERT GPU suite and engines pass; bench:embed bf16 469 ms = 1.02x HF eager sorted, 0.67x torch.compile), s46-embed-profile (85% of a batch idle), s46-embed-host (cpu-prof: TypedArray.from in the pooling, 4 ms a batch), s46-embed again after the fix (bf16 191 ms: 2.43x HF eager sorted, 1.83x torch.compile; f32 1.13x / 1.08x; over HTTP 1,481 ms), s46-embed-http + s46-smoke (cli-smoke 19/19 PASS with the embeddings server), s46-buckets (bucketed batch lengths on / off: HTTP 273 / 267 ms against 2,059 / 1,997, direct unchanged: the default)
#   Next (session 46, was): nothing queued from session 45 (its host-side work ran on the GPU: cli-smoke 16/16 on an H100 in call 3). Misses stand (H200, session 42): GPT-2 b1 0.182 (0.12), Llama b1 0.736 (0.70), b32 31.3k (35k), INT4 + head 0.440 (0.30), INT8 + head 0.485 (0.45), serving 1.29x static at C 256 (2x; 1.46x at equal % of floor), decode steps 56-59% of the roofline (70%); leads in docs/perf.md (sessions 13-42).
#   (session 45 ran, on the H200:) s44-verify (engines 28/28, cli-smoke 13/13 PASS, serve load: 510 valid ok, 0 errors, 0 leaked blocks), s44-h200 (beam 15/15; bench:beam bf16 15.5x / 10.9x HF at b1 / b32 = beam.json; head argmax b4 within 1%, default kept; check:infer all OK); s45-tokenizer could not start (seven tries), then ran without a GPU on the development machine; call 3 (an H100): bench/cli-smoke.sh 16/16 with the BERT / embed steps
#   Next (session 45, was): first call: GPU_PENDING_TAR=1 GPU_PENDING_BUDGET=560 bash .device/run.sh bash bench/gpu-pending.sh s44-verify   # (~8 min, any card) sessions 43-44's host-side changes on the GPU: the engine suites, the quantized engines, bench/cli-smoke.sh (the CLI end to end: the demo's 600 steps, generate, quantize, serve over HTTP; a PASS/FAIL table), the serving load test. Second call, on the H200: s44-h200 (~6 min: the beam suite and bench:beam beside HF — copy beam.json to bench/results/ and update README / perf.md / inference.md if >= 10x holds at batches 1 and 32 —, head argmax default / off at batch 4 twice, check:infer).
#   (session 44 ran:) nothing on a GPU: every machine start (H100 and H200) failed, twelve tries over the session (25 of the 30 minutes of device time spent on them)
#   Next (session 44, was): as session 43's plan below, unchanged (session 43 had no device: new loans were paused). Session 43's changes are host-side (loading's header checks and one readFloats for every loader, sampling's f32 edges, the server, the CLI); the first call's engine suites and check:infer load real checkpoints through them on the GPU.
#   (session 43 ran:) nothing on a GPU: no device machine was lent (the workplace paused new loans)
#   Next (session 43, was): first call: GPU_PENDING_TAR=1 GPU_PENDING_BUDGET=300 bash .device/run.sh bash bench/gpu-pending.sh s42-beam   # (~2 min) on the H200 (session 42 ran it on an H100 only: bf16 batch 32 10.7x HF there; the H200 with the old host loop gave 7.3x): the beam GPU suite and bench:beam beside HF; copy beam.json to bench/results/ if it holds. Then a second round of the head argmax default / off at batch 4 on the H200 (call 4 had b4 slower with it by 0.2-0.8%, one round). Misses stand (H200, session 42): GPT-2 b1 0.182 (0.12), Llama b1 0.736 (0.70), b32 31.3k (35k), INT4 + head 0.440 (0.30), INT8 + head 0.485 (0.45), serving 1.29x static at C 256 (2x; 1.46x at equal % of floor), decode steps 56-59% of the roofline (70%).
#   (session 42 ran, on the H200 in calls 1-5, an H100 in call 6:) s42-h200 (bench:decode in full beside HF = decode.json: GPT-2 b1 0.182, Llama 0.736 / 31,301 tok/s, INT4 + head 0.440, INT8 + head 0.485; head-argmax suite 1/1), s42-dist (nccl, tp-decode ws1, vocab-shard 5/5 pass; tp-serve ws1 failed on a test flaw: plain engine pipelined — fixed; engines 28/28; b1 timelines), refresh-serve (serve-speed.json: C 256 44,404 tok/s, 1.29x static, 44x HF), s42-defaults (tp-serve 1/1; prefetch size 256 slower, 128 same: off; fused MLP and head argmax gains hold on the H200 at b1-3), beam-speed (H200, old host loop: bf16 b32 7.3x HF), s42-beam (H100: pipelined host reads, 15/15, bf16 10.7x / 15.2x)
#   Next (session 42, was): first call: GPU_PENDING_TAR=1 GPU_PENDING_BUDGET=560 bash .device/run.sh bash bench/gpu-pending.sh s40-defaults   # (~8 min) session 40's queue (the fused MLP's timelines usual / fused / early and decode default / FUSEFORMER_FUSED_MLP=0 at batches 1-4), on the H200 if lent — sessions 40-41 measured on an H100 only; then a full bench:decode with HF (decode.json is session 33's) to refresh the README's H200 rows. Then leads for #5 / #7 in docs/perf.md "Session 40".
#   (session 41 ran, on an H100 80GB HBM3, two calls — every other start refused:) s41-defaults (call 2: the engine GPU suites under the new default 29/29; default / off at b1, b2, b4: GPT-2 0.203 / 0.235 / 0.293 against 0.208 / 0.240 / 0.296, Llama 0.958 / 1.008 / 1.121 against 0.963 / 1.014 / 1.126), head-argmax (op cases 33/33, engine suite 1/1 with f32 / bf16 / INT8 / INT4 heads; GPT-2 b1 0.208 -> 0.203, Llama 0.967 -> 0.961, INT4 + head 0.502 -> 0.493, INT8 + head 0.607 -> 0.601: the default now; GPT-2's sampler 7.97 -> 3.74 us a step), graph-steps (3/3; 1 / 4 / 8 steps a graph all the same: opt-in, default 1)
#   Next (session 41, was): first call: GPU_PENDING_TAR=1 GPU_PENDING_BUDGET=560 bash .device/run.sh bash bench/gpu-pending.sh s40-defaults stream-rows   # (~8 min) the fused MLP, now the default at 2-4 rows with its early trigger (session 40, H100): the engine GPU suites under the new default (infer-engine, serve-engine, speculative, beam; bf16 tokens may differ run to run where the atomics' order flips a rounding: a failure comparing bf16 tokens of two runs is that, not a wrong kernel), GPT-2 b1 timelines usual / fused / fused + early (where the boundary saved at one row goes), decode default / FUSEFORMER_FUSED_MLP=0 at batches 1-4 twice (on the H200 if lent: session 40's numbers are an H100's). Then leads for #5 (GPT-2 b1 0.186 on the H200, target 0.12; Llama b1 0.745, 0.70): see docs/perf.md "Session 40".
#   (session 40 ran, on an H100 80GB HBM3, six calls:) fused-mlp fused-o (engine tests pass; fused MLP b1 0.208 -> 0.217, b4 0.327 -> 0.296; fused O slower, 0.275), fused-extras head-norm (early trigger b1 0.209 / b4 0.291: default at 2-4 rows; vector atomics, FB 8 / 32 slower; head norm no gain), sample-splits s37-quant-kernels (30/30 x3; splits / preload no gain; 4-layer quantize GPTQ 28 s, AWQ 29 s), quant-quality s37-quant-1b (check:quant all met; 16-layer Llama 1.2B GPTQ 72 s, AWQ 75 s), int4-zero-fold (122/122, slower: removed) with the fused MLP at batches 1-4, s34-int8-b4 (14/14 + 25/25, r2 plans slower at 2-4 rows)
#   Next (session 40, was): first call: GPU_PENDING_TAR=1 GPU_PENDING_BUDGET=560 bash .device/run.sh bash bench/gpu-pending.sh fused-mlp fused-o   # (~9 min) as session 39's plan below; every op case these steps run now passes on the kernel emulator (docs/emulator.md), so a GPU failure there is a race between blocks or a memory-ordering fault (the emulator runs blocks one after another), not the kernels' arithmetic. Then fused-extras head-norm, sample-splits s37-quant-kernels, quant-quality s37-quant-1b, int4-zero-fold (its checks pass on the emulator: only the timings are new), s34-int8-b4, stream-rows.
#   (session 39 ran:) nothing on a GPU: no device machine was lent. The kernel emulator (src/testing/emulator, new) ran the unmeasured kernels of sessions 34-38 on the CPU instead: the 249 decode op cases (normMlp's H 132 case, which the kernel refuses by design, now H 136), the fused MLP's and the sampler's probes, a GPT-2 through the fused decode step, the INT4 zero fold and the W8A8 plans of s34-int8-b4 in the quant suites (FUSEFORMER_TEST_EMULATE=1)
#   Next (session 39, was): first call: GPU_PENDING_TAR=1 GPU_PENDING_BUDGET=560 bash .device/run.sh bash bench/gpu-pending.sh fused-mlp fused-o   # (~9 min) GPT-2's MLP as one kernel (normMlp, FUSEFORMER_FUSED_MLP=1, built in session 38, never run): op cases (normMlp, residualNorm / normLinear with an f32 y — if one fails, the kernel is wrong: the CPU reference is fixed by the CPU tests), the engine test, decode off / on twice; default it (CudaBackend.fusedMlp) if GPT-2 b1 and b4 gain. fused-o: the O projection as decode attention's epilogue on top of it (FUSEFORMER_FUSED_O=1; default it if it gains). Second call: fused-extras head-norm (the fusions' variants — vector atomics, early trigger, block sizes — and timelines; the final norm in the LM head's GEMV, FUSEFORMER_HEAD_NORM=1). Third: sample-splits s37-quant-kernels (the greedy sampler at 1 / 2 splits; session 37's quantizer kernels, never run). Fourth: quant-quality s37-quant-1b. Then int4-zero-fold (~7 min), s34-int8-b4, stream-rows (~4).
#   (session 38 ran:) nothing on a GPU: every start was refused, then the device tool lent none for the rest of the session
#   Next (session 38, was): first call (if session 37's last call did not run): GPU_PENDING_TAR=1 GPU_PENDING_BUDGET=560 bash .device/run.sh bash bench/gpu-pending.sh s37-quant-kernels quant-quality s37-quant-1b   # (~9 min) GPTQ's rounding (gptqRoundBlock), AWQ's clip search (int4ClipGroups) and rescaling (scaleColumns) as kernels (session 37, CPU-tested; their op cases, the quantizeDecoder GPU test, 4-layer and 16-layer Llama 1.2B quantize times against session 36's GPTQ ~24 s / AWQ ~36 s a layer), check:quant with GPT-2's GPTQ now on the backend. Then int4-zero-fold (~7 min), s34-int8-b4 (re-measure against the looping W8A8 GEMV, now the default: its batch-4 numbers moved 0.942 -> 0.813), stream-rows (~4).
#   (session 37 ran:) s37-quant-test (the quantizeDecoder GPU test with its widened bounds: passes), int4-after-wait (checks 122/122, slower everywhere: removed), int8-loop (6/6 + 14/14; Llama INT8 + head b1 0.499 -> 0.494, b4 0.942 -> 0.813, GPT-2 slower: the default for grids of two rounds or more)
#   Next (session 37, was): first call: GPU_PENDING_TAR=1 bash .device/run.sh node --test --test-concurrency=1 --test-name-pattern='quantizeDecoder on CUDA' dist/test/gpu/infer-quantized.test.js   # (~1 min) the quantizeDecoder GPU test with its widened bf16 bounds (its f32 checks passed in session 36). Then session 36's queue below from stream-rows on; and quant-quality (check:quant on the trained GPT-2, now with the GPTQ act-order variant). The per-layer cost of the Llama quantizer (GPTQ ~25 s, AWQ ~28 s a 1.2B layer) is worth a profile: the calibration forward runs every layer each time, the captures download f32 copies.
#   (session 36 ran, after a device was lent late in the session:) serve-pipeline (38/38; C 256 39.3k → 43.0k tok/s: pipelined steps the default on CUDA; pinned uploads no gain), quant-llama (gatherColumns 24/24, act-order Llama on CUDA = CPU, quantizeDecoder on CUDA = CPU quantizer but its bf16 logits 3.4e-2 over the test's 3e-2 — now compared in f32; HF parity all OK incl. Qwen2 / Mistral / Phi-3), quant-llama-1b (GPTQ ~25 s a layer, AWQ ~28: both cut by the bounds), quant-llama-4l (GPTQ 94.6 s, AWQ 144 s, SmoothQuant 19.4 s for 4 layers at 1.2B widths; the GPTQ directory loads and generates; quantizeDecoder's GPU test: f32 checks pass, bf16 bounds widened since)
#   Next (session 36, was): first call: GPU_PENDING_TAR=1 GPU_PENDING_BUDGET=570 bash .device/run.sh bash bench/gpu-pending.sh serve-pipeline   # (~9 min) pipelined serving steps (built in session 35, never run; opt-in FUSEFORMER_SERVE_PIPELINE=1 / --pipeline): feedTokens' op cases, downloadLater behind a spin kernel, the serving engine pipelined (eager, graphs, preemption, seeded sampling), then bench:serve-speed off / on / on + FUSEFORMER_PINNED_UPLOADS=1 twice at C 16 / 64 / 256; default it (ServingEngineOptions.pipeline; CudaRuntime.pinnedUploads if that gains too) if the checks pass and tokens/s gain. Then the session-35 queue below, unchanged (session 35 had no device machine):
#   (session 35 ran:) nothing on a GPU: no device machine was lent
#   Next (session 35, was): first call: GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh int4-after-wait   # (~8 min) the INT4 GEMV's weight loads coherent and after the wait, all above the norm prologue's barriers (FUSEFORMER_INT4_LOADS_AFTER_WAIT=norm|1, built in session 34, never run): checks, decode 0 / norm / 1; default the winner. Then: int8-loop   # (~7 min) the W8A8 GEMV's looping form (built in session 34, never run; FUSEFORMER_GEMV_LOOP=gated-gemv,int8): its GPU test, engines, decode off / on; default it (GEMV_LOOP_DEFAULT) if INT8 + head b1 gains. Second call: int4-zero-fold   # (~7 min) the INT4 zero point folded per chunk by an all-ones mma (FUSEFORMER_INT4_ZERO_FOLD=1, built in session 34, never run): checks, decode off / on; default it if INT4 + head b1 gains. Third call: s34-int8-b4   # (~8 min) W8A8 plans at 2-4 rows (FUSEFORMER_INT8_PLAN: Llama INT8 + head batch 4 0.937 -> 0.906 / 0.900 with the gated / down product at r2.kw1, batch 1 slower; one round by hand in session 34's last minutes): op cases + engines with them, decode at batches 1-4; default the row counts that gain. Leads from session 34's timelines (docs/perf.md "Session 34"): INT8 + head b1's gated GEMV 16 x 12.1 us (66% of copy; 1024 blocks of one feature a warp, four rounds each running the norm + quantize prologue: a looping form as the bf16 gated GEMV's, or r2 at one row with its prologue once a block); INT4 + head's gated GEMV 11.7 us in the step against 7.2 alone without the prologue (the SASS staggers its 16 weight loads 4 at a time around the prologue at 128 registers). Misses stand: GPT-2 b1 0.186 (0.12), Llama b1 0.745 (0.70), b32 31.3k (35k), INT4 + head b1 0.450 (0.30), INT8 + head 0.504 (0.45).
#   (session 34 ran:) s33-verify (the down product's r4.kw4: checks pass, b1 0.755 -> 0.748, b4 1.078 -> 0.990: the default; attention split at 128-position caches slower), one-pass (46/46 + 16/16 + 43/43; GPT-2 b1 0.192 -> 0.186: the default), ncu-src (stall samples by SASS instruction: the INT4 GEMVs issue-heavy, LOP3 33%), int4-dequant (one LOP3 a nibble pair, integer zero points: 114/114; INT4 + head b1 0.466 -> 0.450), s34-int4 (INT4 plans alone: the planner's picks hold; b1 timelines), s34-int8-plans (cut at 30 s a run: nothing; redone by hand, one round)
#   Next (session 34): first call: GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh s33-verify   # (~5 min) the Llama down product at r4.kw4 (FUSEFORMER_GEMV_PLAN=k8192.n2048.plain=r4.kw4; probed in session 33's step: b1 0.756 -> 0.749, batch 4 1.078 -> 0.989 ms a step, never checked for correctness): op cases + engines with it, decode with / without twice; if all pass, default it (gemv.ts GEMV_PLAN_DEFAULT). Second call: one-pass   # (~6 min) GPT-2's LayerNorm prologues in one pass (FUSEFORMER_NORM_ONE_PASS, built in session 33, never run): op cases + engines, then decode off / on; default it if GPT-2 b1 gains. Third call: ncu-src   # (~8 min) per-SASS-instruction stall samples of the kernels below (NCU_SOURCE=1, built in session 33, never run; if ncu's CSV lacks the sampling columns, the -stalls.txt says which it has). Leads from session 33's profiles: batch-32 bf16 spends 14% of its step in separate residual RMS norms (32 x 4.96 us) beside the streamed GEMMs; INT4 + head batch 32 27% in its down product on the mma GEMV (16 x 18.4 us; the streamed INT4 GEMM lost there alone, 21.6 against 14.6 us); the INT4 gated GEMV at b1 issues 29% excess global sectors (per-row scale and zero loads, 8 rows a warp instruction: a [groups, rows] scale layout or a shared-memory stage would coalesce them); the 16-bit GEMVs sit on L1TEX scoreboard stalls at 25-37% occupancy (registers); GPT-2's norm GEMVs 40% at the prologue's barriers. Misses stand: GPT-2 b1 0.192 (0.12), Llama b1 0.754 (0.70), b32 31.3k (35k), INT4 + head b1 0.462 (0.30), INT8 + head 0.500 (0.45).
#   (session 33 ran:) weight-prefetch (slower everywhere, Llama b1 0.762 -> 0.862, INT4 + head 0.467 -> 0.531: removed), gemv-loop (22/22 + 2/2; gated looping Llama b1 0.761 -> 0.757: the default; other families slower), ncu (Nsight Compute on 11 kernels: docs/perf.md "Session 33"), s33-sweeps (bf16 plans alone: down 10.6 against 9.3 us at r4.kw4; INT4 crossovers; b32 timelines), the full bench:decode with HF (decode.json: GPT-2 b1 0.192, Llama 0.754 / 31,345 tok/s, 22-68x HF eager, 3.8-9.7x static), s33-plans (plans forced in the step: only the down product gains)
#   Next (session 33, was): first call: GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh weight-prefetch   # (~8 min) weight-prefetch: each decode GEMV block asking L2 for its whole weight slab before its wait (FUSEFORMER_WEIGHT_PREFETCH, built in session 32, never run; the SASS puts the INT4 gated GEMV's weight loads after the wait, a few in flight at a time, 42% of copy): default the families that gain. Second call: gemv-loop   # (~6 min) the 16-bit GEMVs' looping form, built in session 32, never run (FUSEFORMER_GEMV_LOOP; Llama b1's gated product, 1024 blocks in four rounds each running the norm prologue, is at 81% of copy against the down product's 92%) — if its op cases fail, leave it off (opt-in); if decode gains, default the families that gain. Third call: ncu s33-sweeps   # (~5 + ~4 min) ncu: Nsight Compute (never used here before; present on the H200, profiling open to users) on the kernels behind each gap — why Llama's gated GEMV stops at 81% of copy, the INT4 gated GEMV at 42%, what GPT-2's kernels and the LayerNorm backward stall on. s33-sweeps: every plan of the bf16 GEMV (does planGemv pick the fastest?), the INT4 routing crossovers (12-28 rows: the gated one lies in 17-31, the projections' in 9-15; GPT-2's 2304-wide QKV stays on the mma GEMV by the rule, unmeasured), the batch-32 timelines of bf16 / INT8 + head / INT4 + head (INT4's residual norms 5.6 µs before QKV at 32 rows, its down product at 14% of copy on the mma GEMV). Then (session 34 if the budget is spent): refresh-decode   # (~8 min) bench:decode in full with HF (decode.json is session 25's; the README quotes its HF ratios; since then GPT-2 b1 0.219 -> 0.192, Llama 0.817 -> 0.756, INT4 b32 1.19 -> 1.09). Misses stand: GPT-2 b1 0.192 (0.12), Llama b1 0.756 (0.70), b32 31.3k (35k), INT4 + head b1 0.460 (0.30), INT8 + head 0.497 (0.45).
#   (session 32 ran:) chain + flag (a kernel boundary 0.7-1.1 µs bare under griddepcontrol.wait, more under a flag release; flag release in the decode step correct, slower everywhere: Llama b1 0.755 -> 0.930; removed), s32-early (GEMVs triggering after their wait: mostly slower, opt-in FUSEFORMER_EARLY_TRIGGER; INT4 norm prologue kept, 0.466 against 0.469 off; INT4 b32 timelines restrict / restrict-free equal: the LM head's mma GEMV 205 µs), s32-check (gemv-sweep --paths: the streamed GEMM faster at the LM head and QKV from 16 rows, the mma GEMV at the gated product below 17 rows; regress 800/800, training 10/10 on the restrict-free build), s32-route (the shape routing: 14/14 + 15/15, Llama INT4 + head b32 1.19 -> 1.09, GPT-2 0.472 -> 0.451; the streamed-GEMM engine test re-pointed, 1/1), an ncu check (present, profiling open to users)
#   Next (session 32, was): first call: GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh chain flag, then the batch-32 INT4 timeline in both builds, INT4 + head with FUSEFORMER_INT4_NORM=0, refresh-decode, the streamed-GEMM op cases alone, the other GPU suites under the restrict-free build.
#   (session 31 ran:) s31-coherent (restrict-free build: 89/89 + 40/40 + 17/17; decode restrict / default / all families coherent), norm-k2048 + timelines-b1 (quantized norm prologue at K 2048 faster: INT4 + head 0.469 -> 0.460, INT8 + head 0.525 -> 0.512; 'auto' now K <= 2048), s31-families (53/53 + 12/12; the bf16 families one at a time: plain and narrow-norm GEMVs win, gated and wide-norm lose; the INT4 __ldg slower, withdrawn), s31-verify (89/89 + 17/17; GPT-2 b1 0.192, Llama b1 0.756, INT8 + head 0.180 / 0.498)
#   Next (session 31, was): first call: GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh s31-coherent   # (~9 min) programmatic kernels now compile with __restrict__ defined away (kernel.ts compiledSource; session 30 found ptxas moving .nc input loads above griddepcontrol.wait, e.g. the 4-row INT4 GEMV's x), never run on a GPU: the decode / model / quantized GPU checks with it, then decode default / FUSEFORMER_PROGRAMMATIC_RESTRICT=1 (the old build) / FUSEFORMER_WEIGHT_LOAD_COHERENT=1 (weights ahead of the wait in every GEMV) twice. If a check fails, FUSEFORMER_PROGRAMMATIC_RESTRICT=1 restores the measured build; if coherent weights win, default them. Second call: norm-k2048 again — the quantized GEMVs' norm prologue at Llama's K = 2048 (FUSEFORMER_INT4_NORM=1 / INT8_NORM=1) lost in session 26 when those kernels waited before any load (0 loads ahead of the wait then; 24-37 now, so the prologue's latency can hide behind weights in flight: it would remove INT4 + head's 32 separate norms, 15.6% of its b1 step) — plus timelines-b1. Then the other GPU suites (ops, layers, training: their column-sum kernels wait too) and bench:decode with HF (refresh-decode, a call of its own).
#   Later (session 31+): the misses stand (GPT-2 b1 0.219 against 0.12; Llama b1 0.782 against 0.70, b32 31.1k against 35k tokens/s; INT4 + head b1 0.469 against 0.30, INT8 + head 0.515 against 0.45; serving 1.28x static at C 256 against 2x; LayerNorm backward 71-78% of copy against 85%). Leads not yet tried: fewer dependent kernels a GPT-2 layer (the attention's output projection folded into the attention kernel's last block, or the residual norm + QKV + RoPE/append in one kernel at batch 1). SASS here, no device time: bash bench/sass-local.sh FILE.cubin (Debian's nvdisasm 11.8 on CUDA 13 cubins with the old ELF header; needs the non-free component).
#   (session 30 ran:) early-write (op cases 43/43 + 16/16 under deferred / early / one-wave; decode: INT4 early, W8A8 deferred, bf16 late and one-wave the defaults now), s30-defaults (op cases 43/43 + 16/16 with the defaults; bench:decode with HF cut at 330 s after our rows), sass (ptxas puts the plain GEMVs' wait above every weight load; the hinted forms keep 4-9 loads ahead at GPT-2), s30-hint-normal (the hinted form with an evict-normal policy: slower everywhere, GPT-2 b1 0.220 -> 0.246, Llama 0.780 -> 0.824; opt-in probe; op cases 87/87 + 17/17), s30-engines (whole models with the defaults: 2/2, 3/3, 12/12; then by hand serve-engine + beam 18/18, speculative + decode-layers + prefetch-l2 26/26; infer-ops.test.js printed no test in 150 s)
#   Next (session 29, was): first call: GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh early-write   # (~8 min) the norm GEMVs' last block found and writing sooner (FUSEFORMER_NORM_WRITE=deferred|early, built in session 28, never run): op cases, decode late / deferred / early, b1 timelines; default the winner where b1 gains (the op cases also cover the default kernels, whose first-pass loop changed form). Then the L2 hint's GPT-2 anomaly is a code-generation effect, not a cache one (session 28 call 6: GPT-2 bf16 b1 hint off / on 0.218 / 0.237 in the plain build, 0.218 / 0.205 in the timeline build): compare the hinted GEMVs' SASS (cuobjdump) in both builds; the op cases with the hint still never finish (decode-gemv.test.js: no TAP line in 300 s on a fresh machine under node --test; not its CPU reference, ~40 s here: l2-verify now runs the files in-process, whose TAP streams test by test, to see where the time goes). Llama with the hint: b1 0.815 → 0.810, b32 1.020 → 1.005. For the hint's SASS: node dist/bench/sass-probe.js here, then run with carry [".device", "sass-probe"]: bash .device/run.sh bash bench/gpu-pending.sh sass (seconds).
#   (session 28 ran:) s28-sweep (prewait: slower or equal, opt-in; sample-wave 1.013 → 1.007, later rounds within noise; their op cases 82/82 + 30/30), row-norm / row-norm2 / row-norm3 (the RMS norms split across the streamed GEMMs, FUSEFORMER_ROW_NORM=1: 14/14 GPU checks; b32 1.015 → 1.105, then 1.028 after two fixes, 1.033 with QKV's norm alone: opt-in; a ring cap for the rowScale products (96–160 KB) was slower still, removed), l2-verify (GPT-2 / Llama off / on, plain and stamped; op cases cut at 300 s)
#   (session 27 ran:) l2-hint (decode off / on: Llama every row slightly faster, GPT-2 bf16 b1 slower; op cases cut at 200 s), l2-check + l2-timelines (GPT-2 twice more, same; timelines by role b1 / b32), l2-gpt2 (GPT-2 timelines: faster with the hint; op cases cut at 280 / 200 s)
#   Next (session 27): the misses stand (INT4 b1 0.469 against 0.30: its GEMVs at ~40% of copy and ~116 kernels a step; INT8 b1 0.523 against 0.45: 32 separate residual norms a step (INT4: 2.5 µs each, 15.6% of the step; the norm in the GEMVs' prologue at K = 2048 measured slower again in session 26), its quantizing prologue after each wait — a norm kernel that writes the int8 rows and their scale would take that off the QKV and gate/up GEMVs; Llama b1 0.813, b32 1.02; GPT-2 b1 0.219; #2's LayerNorm backward 71–78% of a same-size copy). 
#   (session 26 ran, calls 4–5:) timelines-b1 (batch-1 timelines on the H200: INT4 + head's two residual norms a layer 15.6% of the step; prefetch-l2 2/2), norm-k2048 (the quantized norm prologue at K = 2048: INT4 + head 0.468 → 0.532, INT8 + head 0.520 → 0.527; default kept)
#   (session 26 ran:) int4-tma (the stage-tail build: 23/23; per product at 32 rows the form wins only on the gated product), int4-tma-b1 (gated only / from one row: 27/27; gated-only 4,1 the fastest, one row slower everywhere), int4-default (the default now: 111/112, the miss a W8A8 f32 tolerance, widened; INT4 b32 1.172 → 1.061)
#   Next (session 26, was): first call: GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh int4-tma   # (~5 min) the INT4 form of the streamed GEMM (built in session 25; its first build's op cases passed 7/7, INT4 b32 1.172 → 1.108 ms/token, bf16 1.021; then the scales' stage tail, never run: if the op cases fail, 6fd538b is the measured build): engines forced on, b32 profiles off / on (which products it speeds or slows), decode at three block shapes; default it on for the rows where it wins. Other leads: W8A8 at b32 (1.166); INT4 b1 0.469 against 0.30 (its gated GEMV ran at ~35% of copy in session 20's timeline); the timeline's stamps for the streamed GEMM (its waiting thread is the producer lane, not thread 0, so its kernels are merged into their neighbours' rows)
#   (session 25 ran:) norm-mma (correct, slower: b32 1.163 against 1.022; closed), early-trigger (correct, no gain; opt-in), refresh-decode (bench:decode in full with HF eager / static cache and the quantized rows = bench/results/decode.json), refresh-serve (bench:serve-speed in full with HF = serve-speed.json: C 256 39,602 tok/s, 1.28× static); the mma GEMV / skinny GPU tests with the streamed GEMM off (135/135)
#   Next (session 25, was): first call: GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh norm-mma   # (~4 min) the norm kernel with γ of a chunk loaded before the barrier wait and the squares by mma (built after s24's last call, never run; s24: QKV 18.9 µs against 8.5 stripped): its checks, decode and the b32 profile off / on; default it on only if b32 beats 1.016 ms/token. Then x prefetched before the accumulate epilogue; profile as norm-probe did (its FUSEFORMER_STREAM_NORM_PROBE build is not committed: cut the lines by hand); (2) serving's host part; (3) bench:serve-speed and bench:decode in full with HF
#   (session 24 ran:) mma-shape (16,3,4 failed to launch: static shared memory; now counted), stream-norm / stream-norm2 / norm-probe (the norm inside the streamed GEMM: correct, slower, opt-in; WIDE_GRID_MMA_SHAPE 16,2,4 past one wave: serving C 64 / 256 19,846 / 36,932 → 20,828 / 38,563 tok/s)
#   Next (session 24, was): first call: GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh mma-shape   # (~5 min) the tensor-core decode attention at 4 blocks an SM (the serving step's 808-block grid in 2 rounds instead of 3): checks, then profiles and decode per shape; default the best. Then (1) batch-32 decode, 1.025 ms/token against 0.914 for 35k tokens/s: the residual RMSNorm folded into the streamed GEMM (γ into the consumers' x fragments, Σx² from the x tiles, 1/rms on the output rows; the residual add in the previous product's epilogue) — normLinear at 32 rows costs 2.5–4 µs a layer over the GEMM alone; (2) serving's host part (~0.35–0.5 ms a 100-row step, serial with the graph: gpu-pending-s23/call2 profile-serve-b100 'idle'); (3) serve-speed full with HF (bench:serve-speed; serve-speed.json is session 10's) and bench:decode with HF (decode.json is session 19's)
#   (session 23 ran:) norm-tma (TMA norm backward: correct, slower, removed), stream4 (47/47 again), serve-stream (profiles: Llama b32, serving at 100 rows, mixed; serving with the streamed GEMM on/off), attn-mma (decode attention on tensor cores: 81/81 + 100/100; serving step 2.375 → 2.061 ms, Llama b32 1.051 → 1.022), attn-mma2 (default on: serve-engine 3/3; split-target sweep: one wave's target stays)
#   Next (session 23, was): first call: GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh norm-tma   # (~4 min) the norm backward on tensor-map TMA, built after the last device call. Then (1) serving with the streamed GEMM now the default for 5–32-row products (bench:serve-speed, #6: never measured with it; compare FUSEFORMER_STREAM_GEMM=0) and the full bench:decode with HF beside it (decode.json still holds session 19's rows); (2) the streamed GEMM at 33–64 rows (slower than cuBLASLt at 64 with the 5–32 planner: try 2 feature tiles a warp or 8 warps there, skinny-sweep --rows 48,64) and for the INT4 batch-32 path (gemv-int4-mma at 32 rows is slower than bf16 on cuBLASLt); (3) #2's LayerNorm backward (below).
#   (session 22 ran:) bf16-pairs (67/67; BERT erf forward 37.5 → 36.0 µs = 86% of a same-size copy: the default now); stream (1-D bulk copies: 47/47, 8–22% of copy), stream-probe (the copies run one after another); then tensor-map TMA: stream (47/47; sweep: gate/up 18.0 µs = 90% against cuBLASLt 20.7), stream2, stream3 (planned 8–64 rows; GPT-2 sweep), stream4 (final planner, 47/47; GPT-2 b32 0.412 → 0.344, Llama b32 1.094 → 1.049 ms/token: default on for 5–32 rows), skinny-recheck (92/92)
#   Next (session 22, was): GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh bf16-pairs   # (~3 min) then issue #2's last misses: the LayerNorm backward's ~3 µs of fixed cost (the block fold, the partial rows and the second kernel: try f32 red.add into a zeroed host.counters() accumulator with the last block writing dGamma/dBeta, or a cluster fold through DSMEM; BERT 14.7 µs must reach ≤ 12.4), and the erf GELU forward bf16 37.4 µs against f16 34.6 (identical PTX: read the SASS on the device, it has cuobjdump; ≤ 36.8 is 85% of a same-size copy)
#   (session 21's call 7 ran the two diagnostics below: LayerNorm backward rows alone 12.2–12.4 µs BERT / 22.1–22.5 GPT-2 against 14.7–14.9 / 24.8–25.4 in all; erf SASS: bf16's odd halves cost PRMT + SHF, docs/perf.md "Session 21")
#   Session 21's diagnostics (not committed): a timing-only LayerNorm backward that returns after its rows (no fold, no partials, no norm_column_sums: dGamma wrong) to split the 14.7 µs between the row pass and the column sums — bench:kernels --only layerNormBackward beside the default; and the bf16 erf forward's SASS (compile bias_activation_dropout_gelu_{bf16,f16}_h3072_v8_drop_r2s locally with nvcc -cubin -arch=sm_90, carry the cubins, /usr/local/cuda/bin/cuobjdump -sass on the device: the kernel cache's .cubin files are not plain cubins) with a to_float(bf16) by shift (__uint_as_float(bits << 16)) as the candidate fix
#   (session 21's call 6 ran:) norm-atomic — the staged norm backward's column sums by f32 atomics, the last block writing dGamma/dBeta (one launch, no partials): checks 58/58 + training 5/5, but slower (BERT bf16 14.7–14.8 → 17.6 µs, GPT-2 25.5 → 26.4–26.6): withdrawn, commit 2c52ad0 holds it
#   (session 21's calls 1–5 ran:) gemv-preload (forced on: 25/25, 19/19, 16/16, 14/14; timelines) and gemv-preload-ab (the default now by path: quantized prologues and bf16 at K > 1024 preload), act-rows (two rows a thread, the second staged: BERT erf forward 42.6 → 38.0 µs; checks 67/67 at 2, 4, 2s, 4s), kernels-s21 (the full bench:kernels: erf forward 37.4 µs bf16 = 84% of a same-size copy, f16 90%), BERT / training GPU tests 7/7
#   (session 21 first call, was:) GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh gemv-preload   # (~6 min) the GEMVs' norm prologue loading gamma / beta at the kernel's start (opt-in FUSEFORMER_NORM_GEMV_PRELOAD=1, never run): checks, then decode off / on; then session 17's leftover: node dist/bench/gemv-sweep.js --rows 32 --mma-only
#   (session 20's calls 1–6 ran:) rope-check (218/218) and timeline (the first kernel timelines, call 1 on an H100); int4-norm and two epilogue steps (the INT4 norm in the next GEMV's prologue / in the previous GEMV's epilogue: op cases 9/9 and 19/19, engines 11/11; the epilogue slower everywhere, withdrawn, commit aea87e1 holds it); norm-defaults (the prologue 'auto' at K ≤ 1024: GPT-2 INT4 + head 0.225 → 0.214; bf16 norm GEMV off and W8A8 norm at every K slower, defaults kept); a prologue-first step (the prologue before any weight load: Llama 0.566 → 0.506 but behind apart's 0.492, GPT-2 slower; withdrawn); (call 7:) norm-preload (residualNorm's gamma / beta / bias before its wait: 28/28 + 11/11 checks; Llama INT4 + head 0.489 → 0.484, INT8 + head 0.536 → 0.534; the default)
#   (session 19's calls 1–7 ran:) append (appendDecodeAttention: 82/82 checks; every decode row faster, e.g. GPT-2 b1 0.234 → 0.223, Llama INT4 + head 0.499 → 0.489), regress (800/800) and regress-infer (359/359 + 82/82), profile-append (hand counts 9/9), serve-append (198/198; serving unchanged, static +3%), append-more (199/199), rope-check (218/218)
#   (session 18's call 3 ran:) one block an SM for the bf16 and INT4 decode GEMVs (slower everywhere: Llama b1 0.849 → 0.968, INT4 + head 0.513 → 0.548; removed), and the gated INT4 MLP on / off: now faster (INT4 + head b1 0.514 → 0.499, b32 1.344 → 1.323), the default since
#   (session 18's call 1 ran:) the decode GEMVs triggering their dependents right after their wait instead of after the main loop: 187/187 checks but slower everywhere (Llama b1 0.847 → 0.882, INT4 + head 0.515 → 0.581 ms/token): withdrawn
#   (session 18's call 2 ran:) mma-small — every tensor-core GEMV plan at 32 rows for Llama's QKV and O beside cuBLASLt (none faster: QKV 7.18 against 6.54 µs, O 6.28 against 5.91), and those two products on it in the decode step (Llama b32 1.161 against 1.103 ms/token): not kept
#   Next (session 17's list): bash .device/run.sh node dist/bench/gemv-sweep.js --rows 32 --mma-only   # K-splits at four row tiles with one chunk in flight (call 7's sweep had the LM head at kw1 164 µs against kw8's 184 at u2; the planner's kw8.u1 and gate/up kw4.u1 unmeasured), then int4-rows
#   (session 17's calls 2 and 6 ran:) int4-plan — the INT4 planner's two-tile rule, then with 16-warp blocks: 27/27 and 30/30 checks; Llama INT4 + head b1 0.544 → 0.531 → 0.514
#   (session 17's call 8 ran:) int4-rows — 37/37 checks at 9–32 rows; Llama INT4 b32 1.437 → 1.270 ms/token, INT4 + head 1.491 → 1.344
#   (session 17's call 5 ran:) int4-warps — 16-warp blocks: 11/11 forced checks; Llama's down 7.06 → 5.36 µs (no gain elsewhere): the planner takes them for a long K at one block an SM; int4-plan again (call 6) measures it
#   (session 17's calls 2–4 ran:) int4-plan (two-tile INT4 plans: INT4 + head 0.544 → 0.528), decode-quant-gated (gated INT4 still slower at b1), int8-plan (narrow W8A8 plans: INT8 + head 0.556 → 0.547)
#   (session 17's call 1 ran:) the zero point folded per chunk ((magic + z)·Σx): 91/91 checks but slower at every product (Llama INT4 + head 0.603 against 0.544 ms/token): withdrawn
#   (session 16's calls 3–4 ran:) int4-stream — the streaming INT4 GEMV (opt-in FUSEFORMER_INT4_STREAM=1): 28/28 checks, slower than the mma GEMV at 4 of 5 products
#   (session 16's calls 1–2 ran:) wgmma-checks, wgmma-infer wgmma-varlen: (~7 min) the wgmma attention's GPU checks again (its kernels were edited for packed rows after session 15's calls 1–5; dense code is unchanged in effect) and the packed-sequence tests with FUSEFORMER_WGMMA_VARLEN=1
#   GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh wgmma-varlen   # (~6 min) packed vs padded on wgmma, on and off: if varlen-tests passed and varlen-on beats varlen-off, make it the default (flash-forward-wgmma.ts's wgmmaVarlenEnabled)
#   GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh wgmma-infer megakernel-sweep   # (~9 min) inference through the wgmma attention (its GPU tests and HF parity; never run with it), then session 14's megakernel sweep
#   (session 15 ran:) wgmma — the wgmma attention's GPU checks, bench:attention with SDPA and the tile sweeps, long-context; wgmma-train — bench:train, check:hf, the training GPU tests
#   (session 16 call 6 ran:) megakernel-sweep — the flag-released barriers and K/V prefetch on the block-per-chunk consumers: 17/17 checks; flag slower, prefetch 1–4% faster, all far behind layer by layer
#   GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh megakernel-trace   # (~2 min) the decode megakernel's stage timeline, its GPU checks, the decode bench with it on and off (what session 14 ran as calls 3–9)
#   (session 14's calls 2–9 ran:) megakernel / megakernel-trace — the megakernel from its first version to the kept one (docs/perf.md, "The decode megakernel")
#   (session 14's call 1 ran:) GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh sampled-serve picks-tests profile-removal   # serving's sampled rounds on the device (passed: now the default), removal-timed batch-1 profiles
#   Steps that train with GPT-2's BPE: node dist/bench/spec-tokenizer.js first, then carry [".device", "bench/spec-tokenizer"].
#   (session 13's call 5 ran:) GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh picks-tests   # (~3 min) greedy picks on the device in speculative serving and the eager extendGreedy (session 13)
#   (session 13's call 4 ran:) GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh spec-medium-hf profile-b1   # (~5 min) the medium pair with this build's sampled path (lazy probabilities) and HF beside it; fresh batch-1 profiles
#   (session 13's call 3 ran:) GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh skinny-sweep spec-sample spec-trained-hf   # (~8 min) the skinny GEMM's plans at batch 32; speculativeSample again (call 2 failed its p = q rows: FMA contraction); HF assisted generation on the trained pair
#   (session 13's call 2 ran:) GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh spec-sample spec-trained-medium   # (~6 min) speculativeSample (session 13, never run): its GPU cases, the speculative GPU tests, the trained pair on/off; then the medium pair
#   (session 13's call 1 ran:) GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh norm-default spec-device   # (~5 min) the LayerNorm backward's new default shape 8,2,2 through the op checks (its neighbours passed; it was only timed) and GPT-2 training; sampled speculative scored on the device (never run): tokenProbabilities' GPU cases, the speculative GPU tests with it on, the trained pair's bench on/off — default it on if they pass
#   bash .device/run.sh bash bench/gpu-pending.sh spec                        # speculative with HF assisted generation beside ours (random-weight pairs)
#   GPU_PENDING_TAR=1 bash .device/run.sh bash bench/gpu-pending.sh decode-int4 decode-int8 profile-quant   # quantized decode A/B and its op-by-op profile (#7's INT4 ≤ 0.30 ms/token: the INT4 GEMV runs at 19–40% of copy)
#   bash .device/run.sh bash bench/gpu-pending.sh infer                       # HF parity on the GPU
set -u
out=${OUT:-bench/results/gpu-pending}
mkdir -p "$out"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests profile tokenizer infer decode beam serve serve-eager)
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
# GPU_PENDING_BUDGET (seconds, default 570): every step's bound is cut to what is left of it, and a step
# with under 20 s left is skipped, so the summary and the archive are written before the device tool's
# 10-minute limit ends the call.
deadline=$(( t0 + ${GPU_PENDING_BUDGET:-570} ))
run() { # name seconds command...
  local name=$1 limit=$2; shift 2
  local left=$(( deadline - $(date +%s) ))
  if [ "$left" -lt 20 ]; then say "$name: skipped (${left}s of the budget left)"; echo "skipped: budget" > "$out/$name.log"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  say "$name: $*"
  timeout -s KILL "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "rc=$rc" >> "$out/$name.log"
  say "$name: rc=$rc ($( [ $rc -eq 137 ] && echo "killed after ${limit}s" || echo done))"
}
# The spec-trained steps train with GPT-2's BPE; the device's install lacks the dev dependency behind
# `--tokenizer gpt2`, so a carried bench/spec-tokenizer/ (node dist/bench/spec-tokenizer.js) is unpacked.
if [ -z "${SPEC_TOKENIZER:-}" ] && [ -f bench/spec-tokenizer/tokenizer.json.gz ]; then
  mkdir -p /tmp/spec-tokenizer && gunzip -c bench/spec-tokenizer/tokenizer.json.gz > /tmp/spec-tokenizer/tokenizer.json \
    && cp bench/spec-tokenizer/tokenizer_config.json /tmp/spec-tokenizer/ && SPEC_TOKENIZER=/tmp/spec-tokenizer/tokenizer.json
fi
# s59-fused-o's timings: GPT-2 decode at b1 / b4, default, fused MLP alone, fused MLP + chunked projection (two rounds), the one-chunk form, a b1 timeline
fused_o_bench() {
    # Most telling first (the budget may cut the tail): GPT-2 b1 / b4 default and with the projection (alone at b1,
    # with the fused MLP at b4), Llama b1 bf16 and INT4 + head without / with (alone; INT4: its INT4 O weight, session 60), GPT-2 with the fused MLP from one row and the
    # projection, a GPT-2 b1 timeline, the fused MLP alone, Llama at 32 chunks, then the first two GPT-2 runs again.
    local gpt2="node dist/bench/decode.js --no-torch --reps 3 --models gpt2 --batches 1,4"
    local llama="node dist/bench/decode.js --no-torch --reps 3 --models llama --batches 1 --quant int4-head"
    run o-default-1 40 $gpt2 --json "$out/o-default-1.json"
    run o-o1-1 40 env FUSEFORMER_FUSED_O=1 $gpt2 --json "$out/o-o1-1.json"
    run o-llama-o0 60 $llama --json "$out/o-llama-o0.json"
    run o-llama-o1 60 env FUSEFORMER_FUSED_O=1 $llama --json "$out/o-llama-o1.json"
    run o-mlp-o1-1 40 env FUSEFORMER_FUSED_MLP=1 FUSEFORMER_FUSED_O=1 $gpt2 --json "$out/o-mlp-o1-1.json"
    run o-timeline 60 env FUSEFORMER_FUSED_O=1 node dist/bench/decode-timeline.js --models gpt2 --quant bf16 --batch 1 --steps 8 --json "$out/o-timeline.json"
    run o-mlp-1 40 env FUSEFORMER_FUSED_MLP=1 $gpt2 --json "$out/o-mlp-1.json"
    run o-llama-o1-c32 60 env FUSEFORMER_FUSED_O=1 FUSEFORMER_FUSED_O_CHUNKS=32 $llama --json "$out/o-llama-o1-c32.json"
    run o-default-2 40 $gpt2 --json "$out/o-default-2.json"
    run o-o1-2 40 env FUSEFORMER_FUSED_O=1 $gpt2 --json "$out/o-o1-2.json"
}
for step in "${steps[@]}"; do
  case $step in
    gemv-preload) # (for session 21; built after session 20's last device call, never run) the GEMVs' norm prologue with gamma and beta loaded at the kernel's start (FUSEFORMER_NORM_GEMV_PRELOAD=1, opt-in): the normLinear op cases (bf16 GEMV, W8A8, INT4 forced on) and the engines against the CPU with it on, then decode off / on, one process each, two rounds: bf16 GPT-2 and Llama, GPT-2 INT4 + head and INT8 + head (their prologue norms); default it on where it wins
          run gemv-preload-ops 200 env FUSEFORMER_NORM_GEMV_PRELOAD=1 FUSEFORMER_TEST_OPS=normLinear node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          run gemv-preload-gemv 150 env FUSEFORMER_NORM_GEMV_PRELOAD=1 node --test --test-concurrency=1 --test-name-pattern='normLinear' dist/test/gpu/decode-gemv.test.js
          run gemv-preload-quant 150 env FUSEFORMER_NORM_GEMV_PRELOAD=1 node --test --test-concurrency=1 --test-name-pattern='INT4 product|W8A8 product' dist/test/gpu/quant.test.js
          run gemv-preload-engines 200 env FUSEFORMER_NORM_GEMV_PRELOAD=1 node --test --test-concurrency=1 dist/test/gpu/infer-engine.test.js dist/test/gpu/infer-quantized.test.js
          for round in 1 2; do
            for f in 0 1; do run decode-gemv-preload$f-$round 90 env FUSEFORMER_NORM_GEMV_PRELOAD=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --quant int4-head,int8-head --json "$out/decode-gemv-preload$f-$round.json"; done
          done
          # then, here: node dist/bench/timeline-diff.js decode-timeline-preload0.json decode-timeline-preload1.json --strip '_pre$'
          for f in 0 1; do run timeline-gemv-preload$f 60 env FUSEFORMER_NORM_GEMV_PRELOAD=$f node dist/bench/decode-timeline.js --models gpt2,llama --quant bf16 --batch 1 --steps 8 --json "$out/decode-timeline-preload$f.json"; done ;;
    norm-preload) # session 20: residualNorm with gamma, beta and bias loaded before its grid-dependency wait (never run): its GPU op cases against the CPU (every shape and dtype of infer-op-cases), the quantized engines against the CPU, then decode with it off / on (FUSEFORMER_NORM_PRELOAD=0 / 1), one process each: Llama INT4 + head and INT8 + head (their 32 norm kernels a step; the bf16 rows' final norm)
          run preload-ops 120 env FUSEFORMER_TEST_OPS=residualNorm node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          run preload-engines 100 node --test --test-concurrency=1 dist/test/gpu/infer-quantized.test.js
          for round in 1 2; do
            for f in 0 1; do run decode-preload$f-$round 45 env FUSEFORMER_NORM_PRELOAD=$f node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4-head,int8-head --json "$out/decode-preload$f-$round.json"; done
          done ;;
    norm-defaults) # session 20: the INT4 norm prologue's 'auto' default (K ≤ 1024: GPT-2 takes it, Llama keeps the norm kernel) through its GPU op cases and the quantized engines; then, one process each, two rounds: bf16 with the norm GEMV on (default) and off (FUSEFORMER_NORM_GEMV=0), the INT8 + head with the W8A8 norm prologue auto (default) and on at every K, and INT4 / INT4 + head on the default
          run norm-defaults-ops 150 node --test --test-concurrency=1 --test-name-pattern='INT4 product|W8A8 product' dist/test/gpu/quant.test.js
          run norm-defaults-engines 150 node --test --test-concurrency=1 dist/test/gpu/infer-quantized.test.js
          for round in 1 2; do
            run decode-bf16-normgemv1-$round 80 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/decode-bf16-normgemv1-$round.json"
            run decode-bf16-normgemv0-$round 80 env FUSEFORMER_NORM_GEMV=0 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/decode-bf16-normgemv0-$round.json"
            run decode-int8norm-auto-$round 60 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int8-head --json "$out/decode-int8norm-auto-$round.json"
            run decode-int8norm-on-$round 60 env FUSEFORMER_INT8_NORM=1 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int8-head --json "$out/decode-int8norm-on-$round.json"
          done
          run decode-int4-default 80 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --quant int4,int4-head --json "$out/decode-int4-default.json" ;;
    int4-norm) # session 20: the INT4 GEMV with the residual norm in its prologue (normLinear of an int4Linear, never run): its GPU op cases against the CPU and the unfused path, the quantized engines and models against the CPU, then decode with it off / on (FUSEFORMER_INT4_NORM=0 / 1), one process each, two rounds, and the INT4 + head steps' kernel timeline with it
          run int4-norm-ops 200 node --test --test-concurrency=1 --test-name-pattern='INT4 product' dist/test/gpu/quant.test.js
          run int4-norm-engines 200 node --test --test-concurrency=1 dist/test/gpu/infer-quantized.test.js
          for round in 1 2; do
            models=gpt2,llama; [ $round = 2 ] && models=llama
            for a in 0 1; do run decode-int4norm$a-$round 120 env FUSEFORMER_INT4_NORM=$a node dist/bench/decode.js --no-torch --reps 3 --models $models --quant int4,int4-head --json "$out/decode-int4norm$a-$round.json"; done
          done
          run timeline-int4norm 100 node dist/bench/decode-timeline.js --models gpt2,llama --quant int4-head --batch 1 --steps 8 --json "$out/decode-timeline-int4norm.json" ;;
    timeline) # (for session 20; session 19 built it, never run) the batch-1 decode steps' kernels on their programmatic chain (bench/decode-timeline.ts): GPT-2 and Llama, bf16, INT4 + head, INT8 + head
          run timeline 300 node dist/bench/decode-timeline.js --models gpt2,llama --quant bf16,int4-head,int8-head --batch 1 --steps 8 --json "$out/decode-timeline.json" ;;
    norm-recheck) # (for session 20; no new code) the residual norms inside the GEMVs, re-measured on this build (fused append, PDL, session 17's plans): the W8A8 GEMV's norm prologue at Llama's K = 2048 (FUSEFORMER_INT8_NORM=1; session 9 measured it slower, 0.566 → 0.573) and the bf16 norm GEMV off / on, one process each, two rounds
          for round in 1 2; do
            run decode-int8norm-auto-$round 100 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int8-head --json "$out/decode-int8norm-auto-$round.json"
            run decode-int8norm-on-$round 100 env FUSEFORMER_INT8_NORM=1 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int8-head --json "$out/decode-int8norm-on-$round.json"
            run decode-normgemv-off-$round 100 env FUSEFORMER_NORM_GEMV=0 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/decode-normgemv-off-$round.json"
          done ;;
    append) # session 19: appendDecodeAttention as one kernel (never run): its GPU op cases fused and not, the engines on it (CUDA against the CPU: bf16, f32 with 32-wide heads, quantized), then decode with it off / on (FUSEFORMER_DECODE_APPEND=0 / 1), one process each, two rounds
          run append-tests 240 env FUSEFORMER_TEST_OPS=appendDecodeAttention node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js dist/test/gpu/infer-engine.test.js dist/test/gpu/infer-quantized.test.js
          for round in 1 2; do
            models=gpt2,llama; [ $round = 2 ] && models=llama
            for a in 0 1; do run decode-append$a-$round 130 env FUSEFORMER_DECODE_APPEND=$a node dist/bench/decode.js --no-torch --reps 3 --models $models --quant int4-head,int8-head --json "$out/decode-append$a-$round.json"; done
          done ;;
    regress) # the foundation's and the decode ops' GPU checks on this build (session 18): the op table, GEMMs, runtime, graphs, then the decode-step ops
          run regress-ops 330 node --test --test-concurrency=1 dist/test/gpu/ops.test.js dist/test/gpu/gemm.test.js dist/test/gpu/runtime.test.js dist/test/gpu/graph.test.js
          run regress-infer 200 node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js dist/test/gpu/paged-attention.test.js ;;
    serve-append) # session 19: appendDecodeAttention in the serving engine's decode rows (paged; never run): the paged and decode-op checks (fused and not), the serving engine against the CPU, then serving at C 64 / 256 with it off / on, two rounds
          run serve-append-tests 300 env FUSEFORMER_TEST_OPS=appendDecodeAttention node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js dist/test/gpu/paged-attention.test.js dist/test/gpu/serve-engine.test.js
          for round in 1 2; do for a in 0 1; do
            run serve-append$a-$round 100 env FUSEFORMER_DECODE_APPEND=$a node dist/bench/serve-speed.js --no-torch --no-prefix --concurrency 64,256 --json "$out/serve-append$a-$round.json"
          done; done ;;
    rope-check) # session 19's review commit: qkvRopeAppend and the fused decode attention call one rope_pair device function — their GPU op cases (contiguous and paged) and the engines against the CPU
          run rope-check 200 env FUSEFORMER_TEST_OPS=qkvRopeAppend,appendDecodeAttention node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js dist/test/gpu/paged-attention.test.js dist/test/gpu/infer-engine.test.js ;;
    append-more) # session 19: the GPU suites whose decode steps now run appendDecodeAttention and that call 1–5 did not run: speculative decoding, the GEMV engine comparisons, tensor-parallel decode, beam search
          run append-more 520 node --test --test-concurrency=1 dist/test/gpu/speculative.test.js dist/test/gpu/decode-gemv.test.js dist/test/gpu/tp-decode.test.js dist/test/gpu/beam.test.js ;;
    profile-append) # session 19: issue #9's decode hand counts with appendDecodeAttention (profile-check), then the INT4 + head batch-1 step timed by removal (what each op costs the chained step now)
          run profile 200 node dist/bench/profile-check.js --only decode --out /tmp/fuseformer-profile
          cp /tmp/fuseformer-profile/check.json "$out/profile-check.json" 2>/dev/null
          run profile-removal-int4 200 node dist/src/cli/main.js profile --model llama-1.2B --mode decode --batch 1 --seq 96 --quantize rtn4 --quantize-lm-head --op-timing removal --out /tmp/pr-int4
          cp /tmp/pr-int4/profile.json "$out/profile-removal-int4.json" 2>/dev/null ;;
    regress-infer) # (session 19's call 2 ran regress: its ops/GEMM/runtime/graph checks 800/800; the decode ops' 200 s were too few) the decode-step ops and their variants, then paged attention
          run infer-ops 420 node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          run paged-attention 120 node --test --test-concurrency=1 dist/test/gpu/paged-attention.test.js ;;
    int4-rows) # session 17: the INT4 planner at 9–32 rows (one chunk in flight above two row tiles, 16-warp blocks for a long K; never run): the quantized GPU tests at those rows, then INT4 decode of Llama (batch 32 is the change)
          run quant-tests 150 env FUSEFORMER_QUANT_CASES='mma|M=(9|12|13|17|20|31|32) ' node --test --test-concurrency=1 dist/test/gpu/quant.test.js dist/test/gpu/infer-quantized.test.js
          run decode-int4-rows 120 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4,int4-head --json "$out/decode-int4-rows.json" ;;
    int4-warps) # session 17: the INT4 mma GEMV in 16-warp blocks (never run): its forced GPU cases, then every mma plan at M = 1 beside the 8-warp ones
          run quant-tests 120 env FUSEFORMER_QUANT_CASES='mma' node --test --test-concurrency=1 dist/test/gpu/quant.test.js
          run int4-sweep 240 node dist/bench/gemv-sweep.js --rows 1 --mma-only --json "$out/int4-sweep.json" ;;
    int8-plan) # session 17: the W8A8 GEMV's planner taking the narrowest R on ties (never run): the quantized GPU tests' W8A8 cases, then INT8 decode with it and with the old widest-R rule (FUSEFORMER_INT8_NARROW=0)
          run quant-tests 220 node --test --test-concurrency=1 dist/test/gpu/quant.test.js dist/test/gpu/infer-quantized.test.js
          run decode-int8-narrow 120 node dist/bench/decode.js --no-torch --reps 3 --quant int8,int8-head --json "$out/decode-int8-narrow.json"
          run decode-int8-wide 120 env FUSEFORMER_INT8_NARROW=0 node dist/bench/decode.js --no-torch --reps 3 --quant int8,int8-head --json "$out/decode-int8-wide.json" ;;
    int4-mma-sweep) # the quantized GPU tests, then every INT4 mma GEMV plan at M = 1 (bench/gemv-sweep.ts --mma-only; session 17's call 1 ran it with the withdrawn zero fold beside)
          run quant-tests 240 node --test --test-concurrency=1 dist/test/gpu/quant.test.js dist/test/gpu/infer-quantized.test.js
          run int4-sweep 300 node dist/bench/gemv-sweep.js --rows 1 --mma-only --json "$out/int4-sweep.json" ;;
    int4-plan) # session 17: the INT4 mma GEMV's planner with two tiles a warp where two blocks an SM remain (the gated gate/up, the LM heads): its GPU checks, INT4 decode of GPT-2 and Llama
          run quant-tests 240 env FUSEFORMER_QUANT_CASES='mma|int4Linear bf16 M=1 |M=2 K=768' node --test --test-concurrency=1 dist/test/gpu/quant.test.js dist/test/gpu/infer-quantized.test.js
          run decode-int4-plan 200 node dist/bench/decode.js --no-torch --reps 3 --quant int4,int4-head --json "$out/decode-int4-plan.json"
          run profile-int4-removal 150 node dist/src/cli/main.js profile --model llama-1.2B --mode decode --batch 1 --seq 96 --quantize rtn4 --quantize-lm-head --op-timing removal --out /tmp/p-int4r
          cp /tmp/p-int4r/profile.json "$out/profile-int4-removal.json" 2>/dev/null ;;
    wgmma-checks) # the wgmma attention's GPU checks (dense, dropout) and, with FUSEFORMER_WGMMA_VARLEN=1, the packed-sequence tests through the ops (~7 min)
           run wgmma-tests 420 node --test --test-concurrency=1 dist/test/gpu/flash-wgmma.test.js dist/test/gpu/flash-attention.test.js dist/test/gpu/flash-backward.test.js dist/test/gpu/flash-dropout.test.js
           run varlen-tests 240 env FUSEFORMER_WGMMA_VARLEN=1 node --test --test-concurrency=1 dist/test/gpu/flash-varlen.test.js ;;
    wgmma-varlen) # packed sequences on the wgmma attention (session 15, never run; opt-in FUSEFORMER_WGMMA_VARLEN=1): the packed GPU tests through the ops with it on, then bench:attention's packed-vs-padded rows on and off
           run varlen-tests 240 env FUSEFORMER_WGMMA_VARLEN=1 node --test --test-concurrency=1 dist/test/gpu/flash-varlen.test.js
           mkdir -p "$out/varlen-on" "$out/varlen-off"
           run varlen-bench-on 150 env FUSEFORMER_WGMMA_VARLEN=1 OUT="$out/varlen-on" node dist/bench/attention.js --no-main --no-sweep --no-bwd-sweep --no-wgmma-sweep --no-check
           run varlen-bench-off 150 env OUT="$out/varlen-off" node dist/bench/attention.js --no-main --no-sweep --no-bwd-sweep --no-wgmma-sweep --no-check ;;
    wgmma-infer) # inference and serving with the wgmma attention in their prefills (session 15 changed the routing after these last ran): the GPU tests, then HF parity
           run infer-tests 330 node --test --test-concurrency=1 dist/test/gpu/infer-engine.test.js dist/test/gpu/bert.test.js dist/test/gpu/serve-engine.test.js dist/test/gpu/speculative.test.js dist/test/gpu/beam.test.js
           run infer-parity 200 node dist/bench/infer-parity.js --json "$out/infer-parity.json" ;;
    wgmma) # the wgmma attention forward and backward (session 15): their GPU checks against the CPU, the flash GPU tests through the ops, then bench:attention's main table with SDPA beside it and the wgmma tile sweeps
           run wgmma-tests 420 node --test --test-concurrency=1 dist/test/gpu/flash-wgmma.test.js dist/test/gpu/flash-attention.test.js dist/test/gpu/flash-backward.test.js dist/test/gpu/flash-dropout.test.js
           run attention-bench 200 node dist/bench/attention.js --repeats 5 --no-sweep --no-bwd-sweep --no-extras --json "$out/attention.json"
           run long-context 120 node dist/bench/long-context.js --seq-lens 8192,32768 --steps 3 --json "$out/long-context.json" ;;
    wgmma-train) # training with the wgmma attention (session 15): GPT-2 124M and BERT-base against HF eager and torch.compile, HF parity of loss and gradients, the GPU training tests
           run train-bench 300 node dist/bench/train.js --variants bf16 --json "$out/train.json"
           run train-parity 240 node dist/bench/train-parity.js --json "$out/train-parity.json"
           run train-tests 150 node --test --test-concurrency=1 dist/test/gpu/gpt2-train.test.js dist/test/gpu/models-train.test.js ;;
    tests) run tests 420 node --test --test-concurrency=1 dist/test/gpu/decode-gemv.test.js dist/test/gpu/serve-engine.test.js dist/test/gpu/infer-quantized.test.js ;;
    infer-tests) run infer-tests 400 node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js dist/test/gpu/paged-attention.test.js dist/test/gpu/decode-gemv.test.js \
                   dist/test/gpu/infer-engine.test.js dist/test/gpu/serve-engine.test.js dist/test/gpu/infer-quantized.test.js dist/test/gpu/speculative.test.js \
                   dist/test/gpu/beam.test.js dist/test/gpu/graph.test.js dist/test/gpu/gemm.test.js dist/test/gpu/runtime.test.js ;;
    decode-hf) run decode-hf 420 node dist/bench/decode.js --reps 3 --modes default,cublas --json "$out/decode.json" ;;
    decode-hf-static) run decode-hf-static 400 node dist/bench/decode.js --reps 3 --modes default --torch-modes static-compile,static --json "$out/decode-static.json" ;;
    decode-norm) run decode-norm 200 env FUSEFORMER_NORM_GEMV=1 node dist/bench/decode.js --no-torch --reps 3 --modes default --json "$out/decode-norm.json" ;;
    infer-ops) run infer-ops 200 node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js ;;
    decode-fusions) # the opt-in decode fusions one at a time and together, beside the default, one process each
                    run decode-base 120 node dist/bench/decode.js --no-torch --reps 3 --modes default --json /tmp/decode-base.json
                    run decode-norm 120 env FUSEFORMER_NORM_GEMV=1 node dist/bench/decode.js --no-torch --reps 3 --modes default --json /tmp/decode-norm.json
                    run decode-cluster 120 env FUSEFORMER_DECODE_CLUSTER=1 node dist/bench/decode.js --no-torch --reps 3 --modes default --json /tmp/decode-cluster.json
                    run decode-both 120 env FUSEFORMER_NORM_GEMV=1 FUSEFORMER_DECODE_CLUSTER=1 node dist/bench/decode.js --no-torch --reps 3 --modes default --json /tmp/decode-both.json ;;
    decode-quant) run decode-quant 200 node dist/bench/decode.js --no-torch --reps 3 --quant int4,int8,int4-head --json "$out/decode-quant.json" ;;
    profile-shapes) run profile-llama-b32 120 env FUSEFORMER_PDL=0 node dist/src/cli/main.js profile --model llama-1.2B --mode decode --batch 32 --seq 96 --out /tmp/p-llama-b32
                    run profile-gpt2-b1 120 env FUSEFORMER_PDL=0 node dist/src/cli/main.js profile --model gpt2-124M --mode decode --batch 1 --seq 96 --out /tmp/p-gpt2-b1 ;;
    spec-trained) # speculative on a trained pair (issue #7: α on our trained models): GPT-2 124M and a 2-layer draft of its width (bench/spec-draft),
          # both trained on Moby-Dick with GPT-2's BPE (the last 5% held out), then α and the speedup on a held-out prompt
          [ "${SPEC_TESTS:-1}" = 1 ] && run spec-tests 240 node --test --test-concurrency=1 dist/test/gpu/speculative.test.js
          run train-target 240 node dist/src/cli/main.js train --model gpt2-124M --data moby-dick --tokenizer "${SPEC_TOKENIZER:-gpt2}" --steps 800 --sample-tokens 32 --overwrite --out /tmp/spec-pair/target
          run train-draft 150 node dist/src/cli/main.js train --model bench/spec-draft --data moby-dick --tokenizer "${SPEC_TOKENIZER:-gpt2}" --steps 800 --sample-tokens 32 --overwrite --out /tmp/spec-pair/draft
          # SPEC_TOKENIZER: a tokenizer.json for --tokenizer (the device's install lacks the dev dependency behind `gpt2`)
          run spec-trained 200 node dist/bench/speculative.js --target "$(ls -d /tmp/spec-pair/target/step-* | tail -1)" --draft "$(ls -d /tmp/spec-pair/draft/step-* | tail -1)" --reps 2 --no-torch --json "$out/speculative-trained.json" ;;
    spec-trained-medium) # the same with a GPT-2-medium-sized target (24 layers × 1024, bench/spec-medium) and a 2-layer draft of its width: a target
          # whose decode step costs more than a launch chain, where the lecture's speedup should show
          run train-medium 300 node dist/src/cli/main.js train --model bench/spec-medium --data moby-dick --tokenizer "${SPEC_TOKENIZER:-gpt2}" --steps 800 --sample-tokens 32 --overwrite --out /tmp/spec-medium/target
          run train-medium-draft 150 node dist/src/cli/main.js train --model bench/spec-medium-draft --data moby-dick --tokenizer "${SPEC_TOKENIZER:-gpt2}" --steps 800 --sample-tokens 32 --overwrite --out /tmp/spec-medium/draft
          run spec-trained-medium 200 node dist/bench/speculative.js --target "$(ls -d /tmp/spec-medium/target/step-* | tail -1)" --draft "$(ls -d /tmp/spec-medium/draft/step-* | tail -1)" --reps 2 --no-torch --json "$out/speculative-trained-medium.json" ;;
    spec-ours) # speculative decoding without HF (never measured; the HF runs took > 170 s before a row), one model per bounded run
          run spec-ours-gpt2 150 node dist/bench/speculative.js --models gpt2 --reps 2 --no-torch --json "$out/speculative-gpt2.json"
          run spec-ours-llama 150 node dist/bench/speculative.js --models llama --reps 2 --no-torch --json "$out/speculative-llama.json" ;;
    spec) # two bounded runs (one run of both models with HF took over 170 s without printing a row)
          run spec-gpt2 280 node dist/bench/speculative.js --models gpt2 --reps 2 --json "$out/speculative-gpt2.json"
          run spec-llama 280 node dist/bench/speculative.js --models llama --reps 2 --json "$out/speculative-llama.json" ;;
    profile-serve) # the serving engine's eager steps, op by op (PDL off: programmatic launches overlap the markers)
          run profile-serve-decode 150 env FUSEFORMER_PDL=0 node dist/src/cli/main.js profile --model llama-1.2B --mode serve-decode --batch 128 --seq 512 --out /tmp/p-serve-decode
          run profile-serve-mixed 150 env FUSEFORMER_PDL=0 node dist/src/cli/main.js profile --model llama-1.2B --mode serve-mixed --batch 64 --seq 512 --chunk 512 --out /tmp/p-serve-mixed
          run profile-serve-decode256 150 env FUSEFORMER_PDL=0 node dist/src/cli/main.js profile --model llama-1.2B --mode serve-decode --batch 256 --seq 640 --out /tmp/p-serve-decode256
          [ "${GPU_PENDING_TAR:-0}" = 1 ] && for k in decode mixed decode256; do cp /tmp/p-serve-$k/profile.json "$out/profile-serve-$k.json" 2>/dev/null; done ;;
    step-tests2) run step-tests2 300 node --test --test-concurrency=1 dist/test/gpu/paged-attention.test.js dist/test/gpu/infer-ops.test.js dist/test/gpu/serve-engine.test.js ;;
    serve-cpuprof) # where the host time of a serving run goes (a mixed step of 97 rows took 12.9 ms at C 16: host-bound?)
          run serve-cpuprof 200 node --cpu-prof --cpu-prof-dir=/tmp/serve-prof dist/bench/serve-speed.js --concurrency 16 --no-torch --no-prefix --json /tmp/serve-prof.json
          f=$(ls -S /tmp/serve-prof/*.cpuprofile 2>/dev/null | head -1); [ -n "$f" ] && node bench/cpuprofile-top.mjs "$f" 40 > "$out/serve-cpuprof-top.txt" 2>&1 ;;
    profile-quant) # the INT4 decode step op by op (batch 1, the bench's context), PDL off as above
          run profile-int4 150 env FUSEFORMER_PDL=0 node dist/src/cli/main.js profile --model llama-1.2B --mode decode --batch 1 --seq 96 --quantize rtn4 --quantize-lm-head --out /tmp/p-int4
          run profile-int8 150 env FUSEFORMER_PDL=0 node dist/src/cli/main.js profile --model llama-1.2B --mode decode --batch 1 --seq 96 --quantize rtn8 --quantize-lm-head --out /tmp/p-int8
          cp /tmp/p-int4/profile.json "$out/profile-int4.json" 2>/dev/null; cp /tmp/p-int8/profile.json "$out/profile-int8.json" 2>/dev/null ;;
    mma-tests) run mma-tests 300 node --test --test-concurrency=1 dist/test/gpu/decode-gemv.test.js ;;
    decode-mma) # the tensor-core GEMV for 5–64 rows beside cuBLASLt, one process each (batch 32 is the row that moves)
          run decode-cublas-b32 150 node dist/bench/decode.js --no-torch --reps 3 --json /tmp/decode-nomma.json
          run decode-mma-b32 150 env FUSEFORMER_MMA_GEMV=1 node dist/bench/decode.js --no-torch --reps 3 --json /tmp/decode-mma.json ;;
    serve-mma) run serve-mma 200 env FUSEFORMER_MMA_GEMV=1 node dist/bench/serve-speed.js --concurrency 16,64 --no-torch --no-prefix --json "$out/serve-speed-mma.json" ;;
    decode-int4) # the tensor-core INT4 GEMV (default) beside the SIMT GEMV / tiled GEMM it replaced, one process each
          run decode-int4-mma 150 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4,int4-head --json "$out/decode-int4-mma.json"
          run decode-int4-simt 150 env FUSEFORMER_INT4_MMA=0 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4,int4-head --json /tmp/decode-int4-simt.json ;;
    decode-int8) # the W8A8 GEMV (default) beside the three-op path it replaced, and INT4 after the weight prefetch, one process each
          run decode-quant-s8 200 node dist/bench/decode.js --no-torch --reps 3 --quant int4,int8,int4-head,int8-head --json "$out/decode-quant.json"
          run decode-int8-off 150 env FUSEFORMER_INT8_GEMV=0 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int8,int8-head --json /tmp/decode-int8-off.json ;;
    int8-norm) # the W8A8 GEMV with the norm prologue (opt-in): its checks, then A/B against residualNorm + the GEMV, one process each
          run int8-norm-tests 300 env FUSEFORMER_INT8_NORM=1 node --test --test-concurrency=1 dist/test/gpu/quant.test.js dist/test/gpu/infer-quantized.test.js
          run decode-int8-base 150 node dist/bench/decode.js --no-torch --reps 3 --quant int8,int8-head --json /tmp/decode-int8-base.json
          run decode-int8-norm 150 env FUSEFORMER_INT8_NORM=1 node dist/bench/decode.js --no-torch --reps 3 --quant int8,int8-head --json "$out/decode-int8-norm.json" ;;
    step-tests) # the packed paged flash attention, qkvRopeAppend with tableRows, and the serving engine's graph-replayed mixed steps
          run step-tests 300 node --test --test-concurrency=1 dist/test/gpu/paged-attention.test.js dist/test/gpu/serve-engine.test.js dist/test/gpu/flash-varlen.test.js dist/test/gpu/flash-attention.test.js ;;
    serve-quick) run serve-quick 360 node dist/bench/serve-speed.js --no-torch --json "$out/serve-speed.json" ;;
    throughput-tests) # decode attention's throughput variant forced everywhere (its checks), with the qkvRopeAppend and serving checks
          run throughput-tests 300 env FUSEFORMER_DECODE_THROUGHPUT=1 node --test --test-concurrency=1 dist/test/gpu/paged-attention.test.js dist/test/gpu/infer-ops.test.js dist/test/gpu/serve-engine.test.js ;;
    profile-throughput) # a 128-row serving decode step, decode attention's latency variant against its throughput variant
          for t in 0 1; do run profile-decode-t$t 120 env FUSEFORMER_PDL=0 FUSEFORMER_DECODE_THROUGHPUT=$t node dist/src/cli/main.js profile --model llama-1.2B --mode serve-decode --batch 128 --seq 512 --out /tmp/p-decode-t$t; done ;;
    quant-quality) # check:quant (issue #7's quality targets: held-out perplexity of a GPT-2 trained here, INT8 ≤ +1%, calibrated INT4 ≤ +4%; session 37: GPT-2's GPTQ on the backend, AWQ's clip / rescaling kernels, the act-order variant)
          run quant-quality 420 node dist/bench/quant-quality.js --json "$out/quant-quality.json" ;;
    quant-bench) # bench:quant (issue #7's benchmark: the quantized linears at Llama 1.2B's shapes beside bf16 and PyTorch; never run on a GPU), for the record and its chart
          run quant-bench 300 node dist/bench/quant.js --json "$out/quant.json" ;;
    beam-speed) # beam search speed against HF generate (issue #5: ≥ 10× at 4 beams, batch 1 and 32; never run on a GPU)
          run beam-speed 420 node dist/bench/beam.js --iters 3 --json "$out/beam.json" ;;
    prefetch) # decode attention's early copies (freshKeys, built session 10, never run): every decode-attention check, then A/B one process each, decode and serving
          run prefetch-tests 300 node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js dist/test/gpu/speculative.test.js
          run decode-prefetch 120 node dist/bench/decode.js --no-torch --reps 3 --modes default --json /tmp/decode-prefetch.json
          run decode-noprefetch 120 env FUSEFORMER_DECODE_PREFETCH=0 node dist/bench/decode.js --no-torch --reps 3 --modes default --json /tmp/decode-noprefetch.json
          run serve-prefetch 120 node dist/bench/serve-speed.js --concurrency 64,256 --no-torch --no-prefix --json "$out/serve-speed-prefetch.json"
          run serve-noprefetch 120 env FUSEFORMER_DECODE_PREFETCH=0 node dist/bench/serve-speed.js --concurrency 64,256 --no-torch --no-prefix --json /tmp/serve-noprefetch.json ;;
    sampled-serve) # sampled speculative rounds of the serving engine on the device (serve/device-rounds.ts, session 13): the serving engine's GPU tests, the new χ² one among them
          run sampled-serve-tests 120 node --test --test-concurrency=1 dist/test/gpu/serve-engine.test.js ;;
    picks-tests) # greedy picks on the device (infer/greedy-picks.ts, session 13): speculative serving's drafting and verification, the eager extendGreedy
          run picks-serve-tests 150 node --test --test-concurrency=1 dist/test/gpu/serve-engine.test.js
          run picks-spec-tests 150 node --test --test-concurrency=1 dist/test/gpu/speculative.test.js ;;
    spec-medium-hf) # the medium pair (24 × 1024 target, 2-layer draft; trained here) with this build's sampled path and HF assisted generation beside it
          [ -d /tmp/spec-medium/target ] || { run train-medium 300 node dist/src/cli/main.js train --model bench/spec-medium --data moby-dick --tokenizer "${SPEC_TOKENIZER:-gpt2}" --steps 800 --sample-tokens 32 --overwrite --out /tmp/spec-medium/target
            run train-medium-draft 150 node dist/src/cli/main.js train --model bench/spec-medium-draft --data moby-dick --tokenizer "${SPEC_TOKENIZER:-gpt2}" --steps 800 --sample-tokens 32 --overwrite --out /tmp/spec-medium/draft; }
          run spec-medium-hf 300 node dist/bench/speculative.js --target "$(ls -d /tmp/spec-medium/target/step-* | tail -1)" --draft "$(ls -d /tmp/spec-medium/draft/step-* | tail -1)" --reps 2 --json "$out/speculative-medium-hf.json" ;;
    profile-removal) # the batch-1 decode steps timed by removal: what each op costs the PDL-chained step (markers break the chain)
          run profile-removal-gpt2-b1 120 node dist/src/cli/main.js profile --model gpt2-124M --mode decode --batch 1 --seq 96 --op-timing removal --out /tmp/pr-gpt2-b1
          run profile-removal-llama-b1 150 node dist/src/cli/main.js profile --model llama-1.2B --mode decode --batch 1 --seq 96 --op-timing removal --out /tmp/pr-llama-b1 ;;
    profile-b1) # the batch-1 decode steps op by op (the per-op times of this build, for the next decode work)
          run profile-gpt2-b1 90 node dist/src/cli/main.js profile --model gpt2-124M --mode decode --batch 1 --seq 96 --out /tmp/p-gpt2-b1
          run profile-llama-b1 90 node dist/src/cli/main.js profile --model llama-1.2B --mode decode --batch 1 --seq 96 --out /tmp/p-llama-b1 ;;
    spec-trained-hf) # the trained pair (spec-sample trains it) with HF assisted generation beside ours, same run (bench/torch_speculative.py)
          [ -d /tmp/spec-pair/target ] && run spec-trained-hf 240 node dist/bench/speculative.js --target "$(ls -d /tmp/spec-pair/target/step-* | tail -1)" --draft "$(ls -d /tmp/spec-pair/draft/step-* | tail -1)" --reps 2 --json "$out/speculative-trained-hf.json" ;;
    skinny-sweep) # every skinny GEMM plan (4/8 warps, feature tiles, 4–8 stages, splits; session 13) at Llama 1.2B's batch-32 products beside the planner and the default path
          run skinny-sweep 330 node dist/bench/skinny-sweep.js --rows 32 --json "$out/skinny-sweep.json" ;;
    spec-sample) # sampled speculative decoding's residual / bonus draws on the device (speculativeSample, built session 13, never run; deviceAcceptance
          # on by default since session 13's call 1): the op's GPU cases (infer-ops), the speculative GPU tests, the trained pair's bench with it on and off
          run spec-sample-tests 300 env FUSEFORMER_TEST_OPS=speculativeSample,tokenProbabilities,sampleTokens node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js dist/test/gpu/speculative.test.js
          [ -d /tmp/spec-pair/target ] || { run train-target 240 node dist/src/cli/main.js train --model gpt2-124M --data moby-dick --tokenizer "${SPEC_TOKENIZER:-gpt2}" --steps 800 --sample-tokens 32 --overwrite --out /tmp/spec-pair/target
            run train-draft 150 node dist/src/cli/main.js train --model bench/spec-draft --data moby-dick --tokenizer "${SPEC_TOKENIZER:-gpt2}" --steps 800 --sample-tokens 32 --overwrite --out /tmp/spec-pair/draft; }
          for on in 1 0; do run spec-sample-$on 150 env FUSEFORMER_SPEC_DEVICE_ACCEPT=$on node dist/bench/speculative.js --target "$(ls -d /tmp/spec-pair/target/step-* | tail -1)" --draft "$(ls -d /tmp/spec-pair/draft/step-* | tail -1)" --reps 3 --no-torch --json "$out/speculative-sample-$on.json"; done ;;
    spec-device) # sampled speculative decoding scored on the device (tokenProbabilities, FUSEFORMER_SPEC_DEVICE_ACCEPT=1; built session 12, never run):
          # the op's GPU cases (infer-ops), the speculative GPU tests with it on, then the trained pair's bench with it on and off
          run spec-device-tests 300 env FUSEFORMER_SPEC_DEVICE_ACCEPT=1 node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js dist/test/gpu/speculative.test.js
          [ -d /tmp/spec-pair/target ] || { run train-target 240 node dist/src/cli/main.js train --model gpt2-124M --data moby-dick --tokenizer "${SPEC_TOKENIZER:-gpt2}" --steps 800 --sample-tokens 32 --overwrite --out /tmp/spec-pair/target
            run train-draft 150 node dist/src/cli/main.js train --model bench/spec-draft --data moby-dick --tokenizer "${SPEC_TOKENIZER:-gpt2}" --steps 800 --sample-tokens 32 --overwrite --out /tmp/spec-pair/draft; }
          for on in 1 0; do run spec-device-$on 150 env FUSEFORMER_SPEC_DEVICE_ACCEPT=$on node dist/bench/speculative.js --target "$(ls -d /tmp/spec-pair/target/step-* | tail -1)" --draft "$(ls -d /tmp/spec-pair/draft/step-* | tail -1)" --reps 3 --no-torch --json "$out/speculative-device-$on.json"; done ;;
    norm-default) # the staged LayerNorm backward at its new default shape (8,2,2): the norm op checks, its bench rows, GPT-2 training on the GPU
          run norm-tests-default 120 env FUSEFORMER_TEST_OPS=Norm node --test dist/test/gpu/ops.test.js
          run norm-bench-default 60 node dist/bench/kernels.js --only layerNormBackward,layerNormForward --no-torch --json "$out/norm-bench-default.json"
          run train-tests 120 node --test dist/test/gpu/gpt2-train.test.js ;;
    norm-sweep2) # (session 12, after norm-sweep found 2 row slots a warp and 2 blocks an SM fastest) finer shapes around 8,2,2, their checks,
          # and the checks of this build's defaults (async uploads on, downloads widened in place), then speculative on a freshly trained pair
          run defaults-tests 200 node --test --test-concurrency=1 dist/test/gpu/runtime.test.js dist/test/gpu/infer-engine.test.js dist/test/gpu/serve-engine.test.js dist/test/gpu/speculative.test.js dist/test/gpu/graph.test.js
          for cfg in 4,4,2 2,8,2; do run norm-tests-${cfg//,/-} 100 env FUSEFORMER_NORM_BACKWARD=$cfg FUSEFORMER_TEST_OPS=Norm node --test dist/test/gpu/ops.test.js; done
          for cfg in 8,2,2 4,4,2 2,8,2 8,2,3 6,2,2 16,1,4; do run norm-bench-${cfg//,/-} 90 env FUSEFORMER_NORM_BACKWARD=$cfg node dist/bench/kernels.js --only layerNormBackward --no-torch --json "$out/norm-bench-${cfg//,/-}.json"; done
          [ -d /tmp/spec-pair/target ] || { run train-target 240 node dist/src/cli/main.js train --model gpt2-124M --data moby-dick --tokenizer "${SPEC_TOKENIZER:-gpt2}" --steps 800 --sample-tokens 32 --overwrite --out /tmp/spec-pair/target
            run train-draft 150 node dist/src/cli/main.js train --model bench/spec-draft --data moby-dick --tokenizer "${SPEC_TOKENIZER:-gpt2}" --steps 800 --sample-tokens 32 --overwrite --out /tmp/spec-pair/draft; }
          run spec-defaults 150 node dist/bench/speculative.js --target "$(ls -d /tmp/spec-pair/target/step-* | tail -1)" --draft "$(ls -d /tmp/spec-pair/draft/step-* | tail -1)" --reps 3 --no-torch --json "$out/speculative-defaults.json" ;;
    norm-sweep) # the staged LayerNorm backward's launch shape (FUSEFORMER_NORM_BACKWARD="warps,blocksPerSm,maxStages"; default 16,1,4,
          # 48–63% of copy since 2026-11-29): the norm cases of the op checks at three other shapes, then bench:kernels' LayerNorm rows at each
          # (session 12: the column sums launched programmatically after the reducing kernels — all ops checked by default first)
          run norm-tests-default 200 node --test dist/test/gpu/ops.test.js
          for cfg in 8,2,4 4,4,4 16,1,2; do run norm-tests-${cfg//,/-} 100 env FUSEFORMER_NORM_BACKWARD=$cfg FUSEFORMER_TEST_OPS=Norm node --test dist/test/gpu/ops.test.js; done
          run norm-bench-nopdl 90 env FUSEFORMER_PDL=0 node dist/bench/kernels.js --only layerNormBackward,biasDropoutResidualBackward,biasActivationDropoutBackward --no-torch --json "$out/norm-bench-nopdl.json"
          run norm-bench-pdl 90 node dist/bench/kernels.js --only layerNormBackward,biasDropoutResidualBackward,biasActivationDropoutBackward --no-torch --json "$out/norm-bench-pdl.json"
          for cfg in 16,1,2 8,2,4 8,2,2 4,4,4 12,1,4; do run norm-bench-${cfg//,/-} 90 env FUSEFORMER_NORM_BACKWARD=$cfg node dist/bench/kernels.js --only layerNormBackward --no-torch --json "$out/norm-bench-${cfg//,/-}.json"; done ;;
    split-sweep) # decode attention's smallest split capacity (FUSEFORMER_DECODE_MIN_SPLIT_CAPACITY; default 256, so the decode bench's
          # 160-position GPT-2 cache is never split), one process each
          for c in 256 128 64; do run decode-split$c 120 env FUSEFORMER_DECODE_MIN_SPLIT_CAPACITY=$c node dist/bench/decode.js --no-torch --reps 3 --modes default --json /tmp/decode-split$c.json; done ;;
    multi-step) # the serving engine's multi-step decoding (FUSEFORMER_SERVE_DECODE_STEPS, built session 11, never run): decodeAdvance's and
          # the engine's GPU checks, then serving at 1 / 4 / 8 decode steps a run (and with async uploads), one process each
          run multi-tests 260 node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          run multi-serve-tests 200 env FUSEFORMER_SERVE_DECODE_STEPS=4 node --test --test-concurrency=1 dist/test/gpu/serve-engine.test.js
          for k in 1 4 8; do run serve-steps$k 120 env FUSEFORMER_SERVE_DECODE_STEPS=$k node dist/bench/serve-speed.js --concurrency 16,64,256 --no-torch --no-prefix --json "$out/serve-speed-steps$k.json"; done
          run serve-steps4-async 120 env FUSEFORMER_SERVE_DECODE_STEPS=4 FUSEFORMER_ASYNC_UPLOAD=1 node dist/bench/serve-speed.js --concurrency 16,64,256 --no-torch --no-prefix --json "$out/serve-speed-steps4-async.json" ;;
    async-upload) # uploads that do not drain the stream (FUSEFORMER_ASYNC_UPLOAD=1, built session 11, never run): the runtime's
          # checks and the engines' with it on, then serving and speculative A/B (a trained pair, as spec-trained), one process each
          run async-tests 300 env FUSEFORMER_ASYNC_UPLOAD=1 node --test --test-concurrency=1 dist/test/gpu/runtime.test.js dist/test/gpu/infer-engine.test.js dist/test/gpu/serve-engine.test.js dist/test/gpu/speculative.test.js
          run serve-async 120 env FUSEFORMER_ASYNC_UPLOAD=1 node dist/bench/serve-speed.js --concurrency 16,64,256 --no-torch --no-prefix --json "$out/serve-speed-async.json"
          run serve-sync 120 node dist/bench/serve-speed.js --concurrency 16,64,256 --no-torch --no-prefix --json /tmp/serve-speed-sync.json ;;
    async-spec) # speculative decoding with and without async uploads on the trained pair (trained first on a fresh machine, as spec-trained)
          [ -d /tmp/spec-pair/target ] || { run train-target 240 node dist/src/cli/main.js train --model gpt2-124M --data moby-dick --tokenizer "${SPEC_TOKENIZER:-gpt2}" --steps 800 --sample-tokens 32 --overwrite --out /tmp/spec-pair/target
            run train-draft 150 node dist/src/cli/main.js train --model bench/spec-draft --data moby-dick --tokenizer "${SPEC_TOKENIZER:-gpt2}" --steps 800 --sample-tokens 32 --overwrite --out /tmp/spec-pair/draft; }
          for mode in async sync; do
            run spec-$mode 150 env FUSEFORMER_ASYNC_UPLOAD=$([ $mode = async ] && echo 1 || echo 0) node dist/bench/speculative.js --target "$(ls -d /tmp/spec-pair/target/step-* | tail -1)" --draft "$(ls -d /tmp/spec-pair/draft/step-* | tail -1)" --reps 2 --no-torch --json "$out/speculative-$mode.json"
          done ;;
    skinny) # the skinny GEMM (kernels/gemm-skinny.ts, opt-in FUSEFORMER_SKINNY_GEMM=1; session 11: split-K combined in a cluster): its checks, decode A/B, the b32 step op by op, serving A/B
          run skinny-tests 300 node --test --test-concurrency=1 --test-name-pattern=skinny dist/test/gpu/decode-gemv.test.js
          run decode-noskinny 120 node dist/bench/decode.js --no-torch --reps 3 --modes default --json /tmp/decode-noskinny.json
          run decode-skinny 120 env FUSEFORMER_SKINNY_GEMM=1 node dist/bench/decode.js --no-torch --reps 3 --modes default --json /tmp/decode-skinny.json
          run profile-skinny-b32 120 env FUSEFORMER_PDL=0 FUSEFORMER_SKINNY_GEMM=1 node dist/src/cli/main.js profile --model llama-1.2B --mode decode --batch 32 --seq 96 --out /tmp/p-skinny-b32
          run serve-skinny 200 env FUSEFORMER_SKINNY_GEMM=1 node dist/bench/serve-speed.js --concurrency 16,64 --no-torch --no-prefix --json "$out/serve-speed-skinny.json" ;;
    split-tests) # decode attention's splits by each sequence's length (session 10) and the pipelined variant by default: every variant's checks, the engines against the CPU
          run split-tests 420 node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js dist/test/gpu/serve-engine.test.js dist/test/gpu/infer-engine.test.js ;;
    decode-tune) # (session 10: memory-bound GEMMs tuned on first use, since reverted: no gain) GPU checks, decode A/B against no tuning at all, then serving
          run tune-tests 200 node --test --test-concurrency=1 dist/test/gpu/gemm.test.js dist/test/gpu/infer-engine.test.js
          run decode-tuned 150 node dist/bench/decode.js --no-torch --reps 3 --modes default --json "$out/decode-tuned.json"
          run decode-untuned 150 env FUSEFORMER_GEMM_AUTOTUNE=0 node dist/bench/decode.js --no-torch --reps 3 --modes default --json /tmp/decode-untuned.json
          run serve-tuned 200 node dist/bench/serve-speed.js --no-torch --json "$out/serve-speed-tuned.json" ;;
    decode-pipelined) # the decode engine's contiguous caches with decode attention's pipelined variant forced, against the default, one process each
          run decode-default 150 node dist/bench/decode.js --no-torch --reps 3 --modes default --json /tmp/decode-default.json
          run decode-pipe 150 env FUSEFORMER_DECODE_PIPELINED=1 node dist/bench/decode.js --no-torch --reps 3 --modes default --json /tmp/decode-pipelined.json ;;
    pipelined) # decode attention's pipelined variant (opt-in, built session 9, never run): its checks, then A/B at 128 and 256 serving rows, then serving
          run pipelined-tests 300 node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          for t in 0 1; do run profile-pipelined$t 120 env FUSEFORMER_PDL=0 FUSEFORMER_DECODE_PIPELINED=$t node dist/src/cli/main.js profile --model llama-1.2B --mode serve-decode --batch 256 --seq 640 --out /tmp/p-pipelined$t; done
          run serve-pipelined 200 env FUSEFORMER_DECODE_PIPELINED=1 node dist/bench/serve-speed.js --concurrency 64,256 --no-torch --no-prefix --json "$out/serve-speed-pipelined.json" ;;
    serve-throughput) run serve-throughput 200 env FUSEFORMER_DECODE_THROUGHPUT=auto node dist/bench/serve-speed.js --no-torch --no-prefix --json "$out/serve-speed-throughput.json" ;;
    stream) # (for session 22; built this session, never run) the streamed skinny GEMM (kernels/gemm-stream.ts, opt-in FUSEFORMER_STREAM_GEMM=1: a producer warp's bulk copies into an mbarrier ring, split-K in a cluster): its GPU checks (GEMM + gated cases against the CPU, the engines' prefill and 12-row decode against cuBLASLt), the sweep of its plans beside cuBLASLt at 32 rows, then decode off / on (batch 32 is what it is for)
          run stream-tests 200 node --test --test-concurrency=1 --test-name-pattern='streamed' dist/test/gpu/decode-gemv.test.js
          run stream-sweep 200 node dist/bench/skinny-sweep.js --kernels stream --rows 32 --json "$out/stream-sweep.json"
          for f in 0 1; do run decode-stream$f 100 env FUSEFORMER_STREAM_GEMM=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/decode-stream$f.json"; done ;;
    norm-k2048) # (session 26, call 5) the quantized GEMVs' norm prologue at Llama's K = 2048 (FUSEFORMER_INT4_NORM=1 / FUSEFORMER_INT8_NORM=1; default only K ≤ 1024, chosen in session 20 before the prologue preloaded gamma): call 4's timelines put Llama's 32 separate residual norms a step at 15.6% (INT4 + head) and 9.6% (INT8 + head) of the batch-1 step
          run norm-k2048-tests 60 node --test --test-concurrency=1 --test-name-pattern='normLinear' dist/test/gpu/quant.test.js
          for round in 1 2; do
            run decode-norm-auto-$round 60 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4-head,int8-head --json "$out/decode-norm-auto-$round.json"
            run decode-norm-on-$round 60 env FUSEFORMER_INT4_NORM=1 FUSEFORMER_INT8_NORM=1 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4-head,int8-head --json "$out/decode-norm-on-$round.json"
          done ;;
    sass) # the machine code of kernels compiled here (node dist/bench/sass-probe.js: GPT-2 / Llama batch-1 GEMVs, plain / evict-first / evict-normal hinted loads, plain / timeline build; carry sass-probe) disassembled with cuobjdump, one .sass file each, and each file's instruction count and where its first weight load, the grid-dependency wait and its first global read of the prologue fall
          for f in sass-probe/*.cubin; do
            name=$(basename "$f" .cubin)
            /usr/local/cuda/bin/cuobjdump -sass "$f" > "$out/$name.sass" 2>&1
            wait_line=$(grep -nE 'ACQBULK' "$out/$name.sass" | head -1 | cut -d: -f1)
            say "$name: $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' "$out/$name.sass") instructions; loads before the grid-dependency wait (ACQBULK, line ${wait_line:-none}): $(awk -v w="${wait_line:-0}" 'NR < w && /LDG/' "$out/$name.sass" | wc -l)"
          done ;;
    serve-pipeline) # (session 35, never run) pipelined serving steps (FUSEFORMER_SERVE_PIPELINE=1 / --pipeline: the host lays out, uploads and launches step i + 1 before it reads step i's tokens; feedTokens feeds the decode rows from step i's samples inside the graph; Backend.downloadLater reads the tokens through page-locked memory): feedTokens' op cases, the runtime's downloadLater check, the serving engine against one-at-a-time decoding with it (eager, graphs, preemption, seeded sampling); then bench:serve-speed off / on / on with pinned uploads (FUSEFORMER_PINNED_UPLOADS=1: a step's uploads through page-locked buffers, never waiting for the step in flight) twice (C 16 / 64 / 256; the host's ~0.3 / 0.4 / 1.0 ms a step on the dev machine is serial with the GPU's 1.1-1.8 ms decode steps today). Default it on (ServingEngineOptions.pipeline) if the checks pass and tokens/s gain
          run pipe-tests 300 env FUSEFORMER_TEST_OPS=feedTokens node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js dist/test/gpu/runtime.test.js dist/test/gpu/serve-engine.test.js
          for round in 1 2; do
            run pipe-off-$round 150 node dist/bench/serve-speed.js --no-torch --no-prefix --concurrency 16,64,256 --json "$out/pipe-off-$round.json"
            run pipe-on-$round 150 node dist/bench/serve-speed.js --no-torch --no-prefix --concurrency 16,64,256 --pipeline --json "$out/pipe-on-$round.json"
            run pipe-pinned-$round 150 env FUSEFORMER_PINNED_UPLOADS=1 node dist/bench/serve-speed.js --no-torch --no-prefix --concurrency 16,64,256 --pipeline --json "$out/pipe-pinned-$round.json"
          done ;;
    quant-llama) # (session 36, never run) Llama-family additions: HF parity with the new Qwen2, Mistral and Phi-3 cases (bench/hf_infer.py: read as Llama variants); quantized Llama-family models: gatherColumns' op cases (act-order GPTQ's inputs) and an act-order Llama on CUDA against the CPU; quantizeDecoder on CUDA (calibration through the engine's capture, GPTQ's factorization and updates as cuBLASLt f32 GEMMs, AWQ, SmoothQuant) against the CPU quantizer, its directory on both; its directory on both (the full-size run is quant-llama-1b)
          run ql-ops 120 env FUSEFORMER_TEST_OPS=gatherColumns node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          run ql-test 240 node --test --test-concurrency=1 --test-name-pattern='quantizeDecoder on CUDA|act-order' dist/test/gpu/infer-quantized.test.js
          run ql-parity 420 node dist/bench/infer-parity.js --json "$out/infer-parity.json" ;;
    quant-llama-1b) # (session 36, never run) the Llama 1.2B config (random bf16, written by transformers on the GPU) through `fuseformer quantize` GPTQ (its factorization and updates as cuBLASLt GEMMs; the host form took an hour or more), AWQ and SmoothQuant with --eval (times), then `generate` on the GPTQ directory, with --quantize-lm-head, and on the 16-bit one with --quantize rtn4 (the same kernels)
          ql=/tmp/llama-1b
          run ql-make 180 python3 bench/make_llama_dir.py $ql
          run ql-gptq 300 bash -c "time node dist/src/cli/main.js quantize --model $ql --out $ql-gptq --bits 4 --method gptq --calibration-samples 16 --calibration-len 256 --eval --eval-batches 2"
          run ql-generate 120 bash -c "for extra in '' --quantize-lm-head; do node dist/src/cli/main.js generate --model $ql-gptq --prompt 'The sea' --max-tokens 128 --temperature 0 \$extra; done; node dist/src/cli/main.js generate --model $ql --quantize rtn4 --prompt 'The sea' --max-tokens 128 --temperature 0"
          run ql-awq 200 bash -c "time node dist/src/cli/main.js quantize --model $ql --out $ql-awq --bits 4 --method awq --calibration-samples 16 --calibration-len 256 --eval --eval-batches 2"
          run ql-smoothquant 180 bash -c "time node dist/src/cli/main.js quantize --model $ql --out $ql-sq --bits 8 --method smoothquant --calibration-samples 16 --calibration-len 256 --eval --eval-batches 2" ;;
    quant-llama-4l) # (session 36) the quantize pipeline end to end at Llama 1.2B's widths on 4 of its layers (the 16-layer run, quant-llama-1b, needs ~8 min for GPTQ alone): GPTQ with --eval and its time, generate on the result (and with --quantize-lm-head), AWQ and SmoothQuant with --eval
          ql=/tmp/llama-4l
          run q4-make 120 python3 bench/make_llama_dir.py $ql --layers 4
          run q4-gptq 150 bash -c "time node dist/src/cli/main.js quantize --model $ql --out $ql-gptq --bits 4 --method gptq --calibration-samples 16 --calibration-len 256 --eval --eval-batches 2"
          run q4-generate 90 bash -c "for extra in '' --quantize-lm-head; do node dist/src/cli/main.js generate --model $ql-gptq --prompt 'The sea' --max-tokens 64 --temperature 0 \$extra; done"
          run q4-awq 150 bash -c "time node dist/src/cli/main.js quantize --model $ql --out $ql-awq --bits 4 --method awq --calibration-samples 16 --calibration-len 256 --eval --eval-batches 2"
          run q4-sq 100 bash -c "time node dist/src/cli/main.js quantize --model $ql --out $ql-sq --bits 8 --method smoothquant --calibration-samples 16 --calibration-len 256 --eval --eval-batches 2" ;;
    s44-h200) # (session 44) session 43's queue on the H200: the beam GPU suite and bench:beam beside HF (pipelined host reads measured on an H100 only: bf16 10.7x HF at batch 32 there), then the LM head's greedy pick default / FUSEFORMER_HEAD_ARGMAX=0 at batch 4, two rounds (session 42 had b4 0.2-0.8% slower with it, one round); then check:infer against HF (session 43's loader changes on real checkpoints)
          run beam-tests 90 node --test --test-concurrency=1 dist/test/gpu/beam.test.js
          run beam-speed 200 node dist/bench/beam.js --iters 3 --json "$out/beam.json"
          for round in 1 2; do
            for f in default 0; do run argmax-b4-$f-$round 45 env FUSEFORMER_HEAD_ARGMAX=${f#default} node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --batches 4 --json "$out/argmax-b4-$f-$round.json"; done
          done
          run infer-parity 240 node dist/bench/infer-parity.js --json "$out/infer-parity.json" ;;
    s59-fused-o) # (session 59) the O projection in decode attention's epilogue cut into output chunks (DecodeAttentionSpec.project.chunks, projectionChunks: GPT-2 at b1 12 heads x 16 chunks = 192 blocks, each projecting 48 of the 768 rows from 6 KB of W_O, where session 40's one-chunk form had 12 blocks each streaming 98 KB: attention 2.8 -> 11.6 us a layer, b1 0.217 -> 0.275). Never run on a GPU (the emulator passes the op cases and the GPT-2 decode tests): the projected op cases, the engine test, then GPT-2 decode at b1 / b4: default, fused MLP alone, fused MLP + chunked projection (twice), and the one-chunk form once
          # The two checks side by side (correctness only; a cold file's time is mostly NVRTC on one core), then the timings alone.
          run o-ops 150 env FUSEFORMER_TEST_OPS="project" node --test --test-concurrency=1 --test-name-pattern="decode-step ops match" dist/test/gpu/infer-ops.test.js &
          run o-engine 150 node --test --test-concurrency=1 --test-name-pattern='O projection in the attention kernel' dist/test/gpu/decode-gemv.test.js &
          wait
          fused_o_bench ;;
    s59-fused-o-bench) # (session 59) s59-fused-o's timings alone (after s57-suite in the same call, whose infer-ops and decode-gemv shards hold its op cases and engine test)
          fused_o_bench ;;
    s59-h200) # (session 59) the issue tables' decode and serving rows on this build (the last H200 run of bench:decode / bench:serve-speed was session 42's; sessions 43-58 were lent H100s): bench:decode in full beside HF eager and static cache with the quantized rows, then serving at C 256 (the target's concurrency) beside HF generate batched
          run decode-full 440 node dist/bench/decode.js --reps 3 --torch-modes eager,static --quant int4,int8,int4-head,int8-head --json "$out/decode.json"
          run serve-256 ${SERVE_BOUND:-300} node dist/bench/serve-speed.js --concurrency 256 --no-prefix --json "$out/serve-speed-256.json" ;;
    s57-suite) # (session 57) the whole GPU suite, a file at a time (the last whole run was on 2026-11-29): every dist/test/gpu file, or those GPU_SUITE_FILES names (space-separated basenames); a file the budget cuts shows "skipped: budget" in the summary: name it in the next call's list; GPU_SUITE_BOUND (seconds, default 420) bounds each file; GPU_SUITE_JOBS (default 1) runs that many files at once
          # GPU_SUITE_JOBS=n runs n files at once (correctness only, never timings: most of a cold file's time is
          # NVRTC compiling on one CPU core, and the processes share the kernel disk cache).
          # FILE@i/n runs shard i of n of a file's op cases (FUSEFORMER_TEST_SHARD; the op-case suites, decode-gemv).
          for entry in ${GPU_SUITE_FILES:-$(cd dist/test/gpu && ls *.test.js | tr '\n' ' ')}; do
            f=${entry%@*}; shard=; [ "$f" != "$entry" ] && shard=${entry#*@}
            while [ "$(jobs -rp | wc -l)" -ge "${GPU_SUITE_JOBS:-1}" ]; do wait -n; done
            run suite-${f%.test.js}${shard:+-${shard%/*}of${shard#*/}} ${GPU_SUITE_BOUND:-420} env FUSEFORMER_TEST_SHARD=$shard node --test --test-concurrency=1 dist/test/gpu/$f &
          done
          wait ;;
    s57-smoke) # (session 56, built after its last call) the CLI end to end on CUDA: the embeddings and rerank servers now warm up before they listen (Embedder.warmUp / Reranker.warmUp, never run on a GPU) and the rerank server takes --max-queue; cli-smoke's serve steps start them
          run cli-smoke 330 bash bench/cli-smoke.sh ;;
    s57-norm-forms) # (session 56, built after its last call) the LayerNorm backward's launch forms one beside another (bench/norm-backward.ts --forms: as launched — the row kernel programmatic, the column sums one sum a block row, both new in session 56 and never timed against the old forms —, the row kernel eager, session 55's column kernel, both as in session 55, and two timing probes: no end-of-kernel fold, no gamma copy), then bench:kernels' LayerNorm rows with PyTorch (issue #2's table; on the H200 when lent)
          run norm-ops 90 env FUSEFORMER_TEST_OPS=Norm node --test --test-concurrency=1 dist/test/gpu/ops.test.js
          run norm-forms 150 node dist/bench/norm-backward.js --forms --json "$out/norm-forms.json"
          run norm-kernels 150 node dist/bench/kernels.js --only layerNorm --json "$out/kernels-norm.json" ;;
    s56-norm) # (session 56) the 16-bit LayerNorm backward taken apart (bench/norm-backward.ts: the op, the row and column kernels alone, a same-size copy, at 2k-32k rows; fixed cost and per-row rate fitted) with the row kernel launched programmatically and the column sums one sum a block row (new), the column sums fused into the row kernel's last blocks (FUSEFORMER_NORM_FUSED_SUMS=1, new), and the staged shapes swept; first the Norm op cases both ways
          run norm-ops 150 env FUSEFORMER_TEST_OPS=Norm node --test --test-concurrency=1 dist/test/gpu/ops.test.js
          run norm-ops-fused 150 env FUSEFORMER_NORM_FUSED_SUMS=1 FUSEFORMER_TEST_OPS=Norm node --test --test-concurrency=1 dist/test/gpu/ops.test.js
          run norm-parts 200 node dist/bench/norm-backward.js --shapes "8,2,3;8,2,4;16,1,2;16,1,3;4,4,2;4,4,3" --json "$out/norm-backward.json"
          for f in 0 1; do run norm-kernels-fused$f 60 env FUSEFORMER_NORM_FUSED_SUMS=$f node dist/bench/kernels.js --only layerNormBackward --no-torch --json "$out/kernels-norm-fused$f.json"; done ;;
    s56-llama8b) # (session 55, built after its last call) Llama 3.1 8B's shape (d-128 heads, 16 GB of bf16 weights) through bench:decode beside HF eager / static cache, batch 1 and 32: the d-128 decode attention at the size users run
          run decode-llama8b 420 node dist/bench/decode.js --models llama8b --batches 1,32 --reps 3 --torch-modes eager,static --json "$out/decode-llama8b.json" ;;
    s56-verify) # (session 55, built after its last call) the rerank and embeddings servers answering each request as soon as its pairs / inputs are done (a decoder's requests in turn within a round), the head_rstd refactor (qkvRopeAppend / fused append head norms): the d-128 and head-norm op cases, the decoder suites, then bench:rerank ours (rounds printed) and with HF in bf16
          run verify-ops 200 env FUSEFORMER_TEST_OPS="qkvRopeAppend,d=128,headNorm" node --test --test-concurrency=1 --test-name-pattern="decode-step ops match|tensor-core variant forced" dist/test/gpu/infer-ops.test.js
          run verify-suites 200 node --test --test-concurrency=1 dist/test/gpu/decoder-embed.test.js dist/test/gpu/decoder-rerank.test.js dist/test/gpu/infer-engine.test.js
          run rerank-bench 240 node dist/bench/rerank.js --reps 3 --dtypes bf16 --json "$out/rerank.json"
          run embed-decoder-bench 200 node dist/bench/embed.js --model qwen3 --reps 3 --dtypes bf16 --json "$out/embed-qwen3.json" ;;
    s55-packed) # (session 55) the decoder encoder's passes packed without padding (the shared-prefix path with no prefix: no padded rows, no permute, flash attention's packed queries over paged keys), never run on a GPU: bench:embed-decoder ours packed / padded (FUSEFORMER_PACKED_PASSES=0), then the decoder-embed GPU suite
          run embed-build 40 python3 bench/hf_embed.py build /tmp/fuseformer-embed-qwen3 --model qwen3 --sequences 1024
          for p in 1 0; do run embed-decoder-packed$p 40 env FUSEFORMER_PACKED_PASSES=$p node dist/bench/embed.js --model qwen3 --keep /tmp/fuseformer-embed-qwen3 --no-hf --reps 3 --dtypes bf16 --json "$out/embed-qwen3-packed$p.json"; done
          run packed-embed-tests 90 node --test --test-concurrency=1 dist/test/gpu/decoder-embed.test.js ;;
    s55-hf) # (session 55) bench:rerank and bench:embed-decoder in bf16 beside HF eager / torch.compile in the same run, with call 2's vectors of pairs in qkvRopeAppend and the d-128 decode attention
          run rerank-bench 220 node dist/bench/rerank.js --reps 3 --dtypes bf16 --json "$out/rerank.json"
          run embed-decoder-bench 200 node dist/bench/embed.js --model qwen3 --reps 3 --dtypes bf16 --json "$out/embed-qwen3.json" ;;
    s55-qkv) # (session 55) qkvRopeAppend in vectors of pairs for many rows (8 pairs a thread at 16 bit; call 1's profiles had Qwen3's prefill norm + RoPE at 30% of copy, 18% of an embedding batch, 11% of a rerank batch), never run on a GPU: its op cases and the d-128 decode attention cases (fresh: call 1's suite spent 240 s compiling every variant), the paged suite, the Qwen3 embedding and reranker fixtures against sentence-transformers, the embedding batch's profile again, then bench:embed-decoder and bench:rerank (ours, bf16) with vectors on / off (FUSEFORMER_QKV_VECTORS=0)
          run qkv-ops 200 env FUSEFORMER_TEST_OPS="qkvRopeAppend,d=128" node --test --test-concurrency=1 --test-name-pattern="decode-step ops match|tensor-core variant forced" dist/test/gpu/infer-ops.test.js
          run qkv-suites 200 node --test --test-concurrency=1 dist/test/gpu/paged-attention.test.js dist/test/gpu/decoder-embed.test.js dist/test/gpu/decoder-rerank.test.js
          run embed-build 60 python3 bench/hf_embed.py build /tmp/fuseformer-embed-qwen3 --model qwen3 --sequences 1024
          run embed-profile 60 node dist/bench/embed-profile.js /tmp/fuseformer-embed-qwen3
          for v in 1 0; do run embed-decoder-vec$v 90 env FUSEFORMER_QKV_VECTORS=$v node dist/bench/embed.js --model qwen3 --keep /tmp/fuseformer-embed-qwen3 --no-hf --reps 3 --dtypes bf16 --json "$out/embed-qwen3-vec$v.json"; done
          for v in 1 0; do run rerank-vec$v 100 env FUSEFORMER_QKV_VECTORS=$v node dist/bench/rerank.js --keep /tmp/fuseformer-rerank --no-hf --reps 3 --dtypes bf16 --json "$out/rerank-vec$v.json"; done ;;
    s55-d128) # (session 55) decode attention's tensor-core variant and the fused append (Qwen3's head norms inside) for 256-byte rows — d 128 at 16 bit, Llama 3 8B / Qwen / Mistral heads, which took the CUDA-core latency kernel and a separate qkvRopeAppend before — never run on a GPU: the decode attention op cases with every variant, the engine suite (a d-128 Qwen3 decoded teacher-forced against the CPU), then Qwen3-0.6B decode and serving with it / without (FUSEFORMER_DECODE_MMA=0: the old kernels at d 128)
          run d128-ops 240 env FUSEFORMER_TEST_OPS=ecodeAttention node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          run d128-engine 150 node --test --test-concurrency=1 dist/test/gpu/infer-engine.test.js
          for round in 1 2; do for m in 1 0; do run decode-qwen3-mma$m-$round 60 env FUSEFORMER_DECODE_MMA=$m node dist/bench/decode.js --no-torch --reps 3 --models qwen3 --batches 1,32 --json "$out/decode-qwen3-mma$m-$round.json"; done; done
          for m in 1 0; do run serve-qwen3-mma$m 120 env FUSEFORMER_DECODE_MMA=$m node dist/bench/serve-speed.js --preset qwen3-0.6B --no-torch --no-prefix --concurrency 64,256 --json "$out/serve-qwen3-mma$m.json"; done ;;
    s55-first) # (session 55) where a decoder embedding batch and a rerank batch spend their time (bench:embed-decoder's Qwen3-Embedding-0.6B size; bench:rerank's Qwen3-Reranker-0.6B size, shared prefix and dense), then session 52's 4-block sampling clusters
          run embed-build 120 python3 bench/hf_embed.py build /tmp/fuseformer-embed-qwen3 --model qwen3 --sequences 1024
          run embed-profile 150 node dist/bench/embed-profile.js /tmp/fuseformer-embed-qwen3
          run rerank-build 120 python3 bench/hf_rerank.py build /tmp/fuseformer-rerank
          run rerank-profile 150 node dist/bench/embed-profile.js /tmp/fuseformer-rerank --rerank
          run cluster-ops 120 env FUSEFORMER_SAMPLE_CLUSTER_FOUR=1 FUSEFORMER_TEST_OPS=sampleTokens,tokenProbabilities,speculativeSample node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          for f in 1 0; do run sample-speed-four-$f 40 env FUSEFORMER_SAMPLE_CLUSTER_FOUR=$f node dist/bench/sample-speed.js --no-torch --reps 9 --only "V=128256,V=50257" --json "$out/sample-speed-four-$f.json"; done
          for f in 1 0; do run decode-sampled-four-$f 45 env FUSEFORMER_SAMPLE_CLUSTER_FOUR=$f node dist/bench/decode.js --sampling 0.7,50,0.9 --no-torch --reps 3 --models gpt2,llama --batches 1,32 --json "$out/decode-sampled-four-$f.json"; done ;;
    s54-verify) # (session 54) call 1's bench:rerank had one dense rep at 10.5 s (bf16; f32 +14 s): the GEMM runner's round shapes timing their own candidates at their 50th call — an encoder's batches are all round, so ~64 tunings in one rep. Now only a bucket's one round member does: ours shared / dense, no HF, every rep printed
          run rerank-ours 150 node dist/bench/rerank.js --reps 5 --no-hf --dtypes bf16 --json "$out/rerank-ours.json"
          # f32 against HF: call 1's worst |dscore| 6.2e-3 (bound 1e-4) though the CPU encoder equals HF's CPU f32 to 4e-7 on six pairs: every pair's scores both sides, to find which
          run rerank-f32 200 node dist/bench/rerank.js --reps 1 --dtypes f32 --no-compile --json "$out/rerank-f32.json" ;;
    s54-prefix) # (session 54) the shared prefix (infer/shared-prefix.ts, never run on a GPU: a pass's common token prefix computed once, the suffixes packed over paged keys): the decoder-embed and decoder-rerank GPU suites (the shared-prefix case against the CPU / the dense pass; the rerank fixtures through it), then bench:rerank with ours shared / dense beside HF in the same run (its HTTP part through the rerank server's rounds, every rep printed)
          run prefix-embed-tests 150 node --test --test-concurrency=1 dist/test/gpu/decoder-embed.test.js
          run prefix-rerank-tests 150 node --test --test-concurrency=1 dist/test/gpu/decoder-rerank.test.js
          run rerank-bench 400 node dist/bench/rerank.js --reps 3 --json "$out/rerank.json" ;;
    s53-decoder-rerank) # (session 53) decoder rerankers (infer/decoder-reranker.ts, never run on a GPU): the GPU suite (the Qwen3-Reranker-shaped and Qwen3ForSequenceClassification fixtures against CrossEncoder.predict's scores; a Llama-shaped d-64 causal reranker against the CPU, pair by pair), then bench:rerank — a Qwen3-Reranker-0.6B-size Qwen3ForCausalLM, 512 pairs, ours beside HF eager / torch.compile (logits_to_keep=1) in the same run
          run decoder-rerank-tests 150 node --test --test-concurrency=1 dist/test/gpu/decoder-rerank.test.js
          run rerank-bench 420 node dist/bench/rerank.js --reps 3 --json "$out/rerank.json" ;;
    s52-cluster-rows) # (session 52) 4-block clusters (FUSEFORMER_SAMPLE_CLUSTER_FOUR=1, opt-in: never checked on a GPU) below 4096 vectors a row and where 8 a row would pass the SMs with < 3 vectors a thread (GPT-2's vocabulary from 17 rows; call 2's shape sweep: top-k + top-p at 32 rows 87 -> 63 us): the sampling op cases with it (32000 and 40 rows of 50257 take 4 blocks), bench:sample and sampled decode with it / without; default it (sampleTokensClusterFour) if the checks pass and the rows gain
          run cluster-ops 150 env FUSEFORMER_SAMPLE_CLUSTER_FOUR=1 FUSEFORMER_TEST_OPS=sampleTokens,tokenProbabilities,speculativeSample node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          for f in 1 0; do run sample-speed-four-$f 40 env FUSEFORMER_SAMPLE_CLUSTER_FOUR=$f node dist/bench/sample-speed.js --no-torch --reps 9 --only "V=128256,V=50257" --json "$out/sample-speed-four-$f.json"; done
          for f in 1 0; do run decode-sampled-four-$f 45 env FUSEFORMER_SAMPLE_CLUSTER_FOUR=$f node dist/bench/decode.js --sampling 0.7,50,0.9 --no-torch --reps 3 --models gpt2,llama --batches 1,32 --json "$out/decode-sampled-four-$f.json"; done
          # Temperature-only rows are Philox-bound: the one-block kernel gives 128k rows 8 x 1024 threads, the cluster 8 x 512.
          run shape-8x1024 30 env FUSEFORMER_SAMPLE_CLUSTER_SHAPE=8,1024 node dist/bench/sample-speed.js --no-torch --reps 9 --only "V=128256,V=50257" --json "$out/shape-8x1024.json" ;;
    s52-decoder-embed-profile) # (session 52) where a decoder embedding batch's time goes: bench:embed-decoder's Qwen3-Embedding-0.6B-size model, one batch of 32 median-length sequences op by op, and every batch's wall against device time
          run embed-build 120 python3 bench/hf_embed.py build /tmp/fuseformer-embed-qwen3 --model qwen3 --sequences 1024
          run embed-profile 200 node dist/bench/embed-profile.js /tmp/fuseformer-embed-qwen3 ;;
    s52-decoder-embed) # (session 52) decoder models as sentence encoders (infer/decoder-encoder.ts, never run on a GPU): the GPU suite (the Qwen3-Embedding-shaped fixture against SentenceTransformer.encode's vectors; a Llama-shaped d-64 decoder against the CPU encoder), then bench:embed-decoder — a Qwen3-Embedding-0.6B-size Qwen3Model, ours beside HF eager / torch.compile (last-token pooling) in the same run
          run decoder-embed-tests 150 node --test --test-concurrency=1 dist/test/gpu/decoder-embed.test.js
          run embed-decoder-bench 420 node dist/bench/embed.js --model qwen3 --reps 3 --json "$out/embed-qwen3.json" ;;
    s51-sampled) # (session 51) sampled decode end to end against HF generate(do_sample) in the same run (bench:decode --sampling 0.7,50,0.9: T 0.7, top-k 50, top-p 0.9, HF's usual chat settings), ours with the cluster sampler and without (FUSEFORMER_SAMPLE_CLUSTER=0)
          run decode-sampled 260 node dist/bench/decode.js --sampling 0.7,50,0.9 --torch-modes eager,static --reps 3 --models gpt2,llama --batches 1,32 --json "$out/decode-sampled.json"
          run decode-sampled-off 60 env FUSEFORMER_SAMPLE_CLUSTER=0 node dist/bench/decode.js --sampling 0.7,50,0.9 --no-torch --reps 3 --models gpt2,llama --batches 1,32 --json "$out/decode-sampled-off.json" ;;
    s51-penalties) # (session 51) OpenAI's frequency / presence penalties on CUDA (biases from the answer's tokens, biasLogits, the rows sampled again): the constrained serving suite, whose requests now include penalised ones (batched equal to alone, greedy equal to the CPU's)
          run penalties-tests 150 node --test --test-concurrency=1 dist/test/gpu/serve-constrained.test.js ;;
    s51-sampled-ours) # (session 51, the short form of s51-sampled when little device time is left) the cluster's shape at batch 1 / 32 (FUSEFORMER_SAMPLE_CLUSTER_SHAPE: 8 x 512 may not fit one wave of clusters at 32 rows), then sampled decode, ours only, cluster sampler on / off
          for shape in 8,512 8,256 4,512 4,1024; do run shape-${shape/,/x} 30 env FUSEFORMER_SAMPLE_CLUSTER_SHAPE=$shape node dist/bench/sample-speed.js --no-torch --reps 9 --only "V=128256,V=50257" --json "$out/shape-${shape/,/x}.json"; done
          for c in 1 0; do run decode-sampled-$c 45 env FUSEFORMER_SAMPLE_CLUSTER=$c node dist/bench/decode.js --sampling 0.7,50,0.9 --no-torch --reps 3 --models gpt2,llama --batches 1,32 --json "$out/decode-sampled-$c.json"; done ;;
    s51-cluster) # (session 51) sampleTokens in thread-block clusters (sample-tokens-cluster.ts: a row's 8 blocks run the top-k / top-p radix selects together; never run): the op cases (sampleTokens, tokenProbabilities, speculativeSample), the engines that sample (serving's chi-square test, speculative), bench/sample-speed.ts on / off (FUSEFORMER_SAMPLE_CLUSTER=0), greedy decode b1 / b32 on / off (the packed-pick path must not slow), bench:structured
          run cluster-ops 150 env FUSEFORMER_TEST_OPS=sampleTokens,tokenProbabilities,speculativeSample node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          run sample-speed 150 node dist/bench/sample-speed.js --json "$out/sample-speed.json"
          run sample-speed-off 60 env FUSEFORMER_SAMPLE_CLUSTER=0 node dist/bench/sample-speed.js --no-torch --json "$out/sample-speed-off.json"
          for round in 1 2; do for c in 1 0; do run decode-cluster-$c-$round 45 env FUSEFORMER_SAMPLE_CLUSTER=$c node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --batches 1,32 --json "$out/decode-cluster-$c-$round.json"; done; done
          run sampling-engines 200 node --test --test-concurrency=1 dist/test/gpu/serve-engine.test.js dist/test/gpu/speculative.test.js dist/test/gpu/head-argmax.test.js
          run structured-bench 100 node dist/bench/structured.js --tokenizer bench/spec-tokenizer --tokens 128 --reps 3 --json "$out/structured.json" ;;
    s51-sample) # (session 51) what sampling a token costs: sampleTokens alone in a CUDA graph (greedy / T / top-k / top-p at 50k-152k vocabularies, B 1 and 32, flat and peaked rows) against transformers' warpers + multinomial in PyTorch eager and in a CUDA graph (bench/sample-speed.ts); bench:structured's sampled rows put ~0.3 ms a token on top-p sampling at GPT-2's vocabulary: the masses' float atomics on shared memory were CAS loops (ATOMS.CAST.SPIN); now fixed-point integer adds. Carry bench/spec-tokenizer
          run sample-ops 120 env FUSEFORMER_TEST_OPS=sampleTokens,tokenProbabilities,speculativeSample node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          run sample-speed 300 node dist/bench/sample-speed.js --json "$out/sample-speed.json"
          run structured-bench 200 node dist/bench/structured.js --tokenizer bench/spec-tokenizer --tokens 128 --reps 3 --json "$out/structured.json"
          for b in 1 32; do
            run prof-greedy-$b 60 node dist/src/cli/main.js profile --mode serve-decode --batch $b --seq 128 --top 12 --out "$out/prof-greedy-$b"
            run prof-topp-$b 60 node dist/src/cli/main.js profile --mode serve-decode --batch $b --seq 128 --top 12 --temperature 1 --top-k 0 --top-p 0.95 --out "$out/prof-topp-$b"
          done ;;
    s51-first) # (session 51) s50-device-mask's checks and bench, then bench:embed in full (HF eager / torch.compile in the same run) on the H200 when lent (sessions 46-47 measured on H100s)
          run mask-ops 120 env FUSEFORMER_TEST_OPS=maskLogits,biasLogits node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          run constrained-tests 150 node --test --test-concurrency=1 dist/test/gpu/serve-constrained.test.js
          run structured-bench 200 node dist/bench/structured.js --tokenizer bench/spec-tokenizer --tokens 128 --reps 3 --json "$out/structured.json"
          run embed-bench 330 node dist/bench/embed.js --json "$out/embed.json" ;;
    s50-device-mask) # (session 50) constrained rows masked on the device (maskLogits, then the rows sampled again; logit_bias by biasLogits the same way; was: a host pick from the downloaded row, 9 ms/token sampled at GPT-2's vocabulary in call 8): maskLogits' op cases, the constrained serving suite, then bench:structured again
          run mask-ops 120 env FUSEFORMER_TEST_OPS=maskLogits,biasLogits node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          run constrained-tests 150 node --test --test-concurrency=1 dist/test/gpu/serve-constrained.test.js
          run structured-bench 200 node dist/bench/structured.js --tokenizer bench/spec-tokenizer --tokens 128 --reps 3 --json "$out/structured.json" ;;
    s50-structured-bench) # (session 50) what structured outputs cost on the GPU (bench/structured.ts: GPT-2 124M random with GPT-2's vocabulary, one request, unconstrained / json_object / a 4-field schema, greedy and sampled; the host's share timed apart); needs bench/spec-tokenizer carried (node dist/bench/spec-tokenizer.js writes it)
          run structured-bench 200 node dist/bench/structured.js --tokenizer bench/spec-tokenizer --tokens 128 --reps 3 --json "$out/structured.json" ;;
    s50-structured) # (session 50) structured outputs on CUDA: constrained requests in the serving engine (valid JSON of the schema; batched with graphs and pipelined steps equal alone; greedy equal to the CPU's), the serving engine suite beside it, then the CLI end to end with its two structured-output requests over HTTP (25 / 25 on the CPU)
          run constrained-tests 150 node --test --test-concurrency=1 dist/test/gpu/serve-constrained.test.js
          run serve-tests 150 node --test --test-concurrency=1 dist/test/gpu/serve-engine.test.js
          run cli-smoke 300 bash bench/cli-smoke.sh ;;
    s49-smoke) # (session 49) the CLI end to end on CUDA with its new step: `fuseformer chat` (two piped turns from the demo checkpoint given a chat template, the serving warm-up before them, the second turn's prompt read from the prefix cache); 24 steps, 24 / 24 PASS on the CPU in session 49
          run cli-smoke 330 bash bench/cli-smoke.sh ;;
    s48-qwen3-rest) # (session 48's call 2 was cut at its budget after the op cases and check:infer) bench:decode of a Qwen3-0.6B beside HF eager / static cache, then the engine suite's qwen3 model against the CPU
          run qwen3-decode 300 node dist/bench/decode.js --models qwen3 --torch-modes eager,static --reps 3 --json "$out/decode-qwen3.json"
          run qwen3-engine 200 node --test --test-concurrency=1 dist/test/gpu/infer-engine.test.js ;;
    s48-qwen3) # (session 48) Qwen3 on CUDA: qkvRopeAppend's head-norm op cases (decode, prefill with spare heads, odd d 40; the appendDecodeAttention fallback), check:infer's qwen3 case against HF (f32 / bf16 logits, greedy 128 tokens; llama-tied beside it), bench:decode of a Qwen3-0.6B beside HF eager / static cache, then the engine suite's qwen3 model against the CPU
          run qwen3-ops 150 env FUSEFORMER_TEST_OPS=qkvRopeAppend,appendDecodeAttention node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          run qwen3-infer 150 node dist/bench/infer-parity.js --only qwen3,llama-tied --json "$out/infer-parity-qwen3.json"
          run qwen3-decode 240 node dist/bench/decode.js --models qwen3 --torch-modes eager,static --reps 3 --json "$out/decode-qwen3.json"
          run qwen3-engine 150 node --test --test-concurrency=1 dist/test/gpu/infer-engine.test.js ;;
    s47-rerank) # (session 47) cross-encoders on CUDA (the BERT GPU suite's new case: BERT and XLM-R classification heads against the CPU, f32 and bf16), then the CLI end to end with its new rerank / /v1/rerank steps (23 steps; 23/23 on the CPU in session 47)
          run bert-tests 150 node --test --test-concurrency=1 dist/test/gpu/bert.test.js
          run cli-smoke 300 bash bench/cli-smoke.sh ;;
    s47-dense) # (session 47) the BERT GPU suite with its new case: a sentence-transformers directory with Dense layers (tanh; identity without bias) on CUDA against the CPU, f32 and bf16, batches down to one row
          run bert-tests 120 node --test --test-concurrency=1 dist/test/gpu/bert.test.js ;;
    s47-mpnet) # (session 47) MPNet encoders on CUDA (check:infer's new mpnet case — the relative position bias on the materialised scores, f32 and bf16 — beside BERT / RoBERTa / XLM-RoBERTa, and all of check:infer), the BERT GPU suite
          run bert-tests 150 node --test --test-concurrency=1 dist/test/gpu/bert.test.js
          run check-infer 330 node dist/bench/infer-parity.js --json "$out/infer-parity.json" ;;
    s47-rounds) # (session 47) the embeddings server's most inputs a round (512, the default, against 128 and 64: responses sooner, so a closed loop of clients refills the queue while the GPU computes), ours only over HTTP, two rounds; then bench:embed in full with HF on the final build
          [ -f /tmp/fuseformer-embed/sequences.json ] || run embed-build 120 python3 bench/hf_embed.py build /tmp/fuseformer-embed
          for round in 1 2; do for n in 512 128 64; do run embed-rounds-$n-$round 60 node dist/bench/embed.js --no-hf --dtypes bf16 --reps 3 --round-inputs $n --keep /tmp/fuseformer-embed --json "$out/embed-rounds-$n-$round.json"; done; done
          run embed-bench 330 node dist/bench/embed.js --keep /tmp/fuseformer-embed --json "$out/embed.json" ;;
    s47-verify) # (session 47) RoBERTa / XLM-RoBERTa encoders (check:infer's new xlm-roberta and roberta-mlm cases beside BERT, all of check:infer), the Embedder's sync and async forms on CUDA against the CPU encoder, and the embeddings server's rounds yielding to the event loop on / off (FUSEFORMER_EMBED_ASYNC=0), ours only over HTTP, two rounds
          run bert-tests 150 node --test --test-concurrency=1 dist/test/gpu/bert.test.js
          run check-infer 300 node dist/bench/infer-parity.js --json "$out/infer-parity.json"
          [ -f /tmp/fuseformer-embed/sequences.json ] || run embed-build 120 python3 bench/hf_embed.py build /tmp/fuseformer-embed
          for round in 1 2; do for a in 1 0; do run embed-async-$a-$round 60 env FUSEFORMER_EMBED_ASYNC=$a node dist/bench/embed.js --no-hf --dtypes bf16 --reps 3 --keep /tmp/fuseformer-embed --json "$out/embed-async-$a-$round.json"; done; done ;;
    s47-embed) # (session 47) the Embedder's batches queued one ahead of the read (BertEncoder.embeddingsLater; the GPU test against the CPU encoder), then bench:embed in full (HF eager / torch.compile in the same run), then pipelined on / off (FUSEFORMER_EMBED_PIPELINE=0), ours only, direct and over HTTP, two rounds
          run bert-tests 150 node --test --test-concurrency=1 dist/test/gpu/bert.test.js
          run embed-bench 330 node dist/bench/embed.js --keep /tmp/fuseformer-embed --json "$out/embed.json"
          for round in 1 2; do for p in 1 0; do run embed-pipeline-$p-$round 60 env FUSEFORMER_EMBED_PIPELINE=$p node dist/bench/embed.js --no-hf --dtypes bf16 --reps 3 --keep /tmp/fuseformer-embed --json "$out/embed-pipeline-$p-$round.json"; done; done ;;
    s46-embed) # (session 46) the BERT encoder after session 46's loader changes (weights through openWeightFile, readFloats' finite check for BERT too), then bench:embed — the Embedder (fuseformer embed and the /v1/embeddings server) on a BERT-base against HF BertModel eager / torch.compile in the same run (bench/hf_embed.py), bf16 and f32, and over HTTP with 64 clients — and the decoder engines (the .bin / repo-id loader paths)
          run bert-tests 150 node --test --test-concurrency=1 dist/test/gpu/bert.test.js
          run embed-bench 330 node dist/bench/embed.js --json "$out/embed.json"
          run engines 150 node --test --test-concurrency=1 dist/test/gpu/infer-engine.test.js dist/test/gpu/serve-engine.test.js ;;
    s46-embed-profile) # (session 46) where bench:embed's time goes: one batch of 32 × ~134 tokens op by op (BERT-base, bf16), and every batch's wall time
          run embed-build 120 python3 bench/hf_embed.py build /tmp/fuseformer-embed
          run embed-profile 200 node dist/bench/embed-profile.js /tmp/fuseformer-embed ;;
    s46-embed-host) # (session 46) the embedding passes' host time: bench:embed's workload three times under node --cpu-prof, the top functions by self time
          [ -f /tmp/fuseformer-embed/sequences.json ] || run embed-build 120 python3 bench/hf_embed.py build /tmp/fuseformer-embed
          run embed-cpuprof 150 node --cpu-prof --cpu-prof-dir="$out/cpuprof" dist/bench/embed-profile.js /tmp/fuseformer-embed --host-only
          run embed-cpuprof-top 30 bash -c "node bench/cpuprofile-top.mjs \"\$(ls $out/cpuprof/*.cpuprofile | head -1)\" 40" ;;
    s46-embed-http) # (session 46) the embeddings server's rounds under bench:embed's 64 clients (ours only, bf16): how many inputs a round takes and how much of a pass is compute
          [ -f /tmp/fuseformer-embed/sequences.json ] || run embed-build 120 python3 bench/hf_embed.py build /tmp/fuseformer-embed
          run embed-http 120 node dist/bench/embed.js --no-hf --dtypes bf16 --keep /tmp/fuseformer-embed --json "$out/embed-http.json" ;;
    s46-buckets) # (session 46) bucketed batch lengths on / off (FUSEFORMER_EMBED_BUCKETS=0), ours only, direct and over HTTP, two rounds
          [ -f /tmp/fuseformer-embed/sequences.json ] || run embed-build 120 python3 bench/hf_embed.py build /tmp/fuseformer-embed
          for round in 1 2; do for b in 1 0; do run embed-buckets-$b-$round 60 env FUSEFORMER_EMBED_BUCKETS=$b node dist/bench/embed.js --no-hf --dtypes bf16 --reps 3 --keep /tmp/fuseformer-embed --json "$out/embed-buckets-$b-$round.json"; done; done ;;
    s46-smoke) # (session 46) the CLI end to end on CUDA with the embeddings server step (bench/cli-smoke.sh)
          run cli-smoke 300 bash bench/cli-smoke.sh ;;
    s45-tokenizer) # (session 45) check:tokenizer with its new parts: the files beside tokenizer.json against transformers' AutoTokenizer (special_tokens_map.json, add_bos / add_eos, chat_template.jinja) and an opus-mt style directory through our MarianTokenizer (our own SentencePiece reader) against transformers' MarianTokenizer; first the Python modules it needs
          run py-modules 60 python3 -c "import importlib; [print(m, getattr(importlib.import_module(m), '__version__', '?')) if importlib.util.find_spec(m) else print(m, 'missing') for m in ('tokenizers', 'transformers', 'sentencepiece', 'sacremoses', 'google.protobuf')]"
          run check-tokenizer 240 node dist/bench/tokenizer-parity.js --json "$out/tokenizer-parity.json" ;;
    s44-verify) # (session 44) session 43's host-side changes on the GPU (loading's header checks and the one readFloats every loader uses, sampling's f32 edges, the serving engine's validation, the server, the CLI): the engine GPU suites, the quantized engines, the CLI end to end (bench/cli-smoke.sh: the demo's 600 steps, generate, quantize, serve over HTTP), the serving load test on CUDA
          run engines 240 node --test --test-concurrency=1 dist/test/gpu/infer-engine.test.js dist/test/gpu/serve-engine.test.js dist/test/gpu/speculative.test.js dist/test/gpu/head-argmax.test.js dist/test/gpu/infer-quantized.test.js
          run cli-smoke 240 bash bench/cli-smoke.sh
          run serve-load 90 node dist/bench/serve.js --backend cuda --requests 600 --json "$out/serve.json" ;;
    s42-beam) # (session 42) beam search with pipelined host reads (TranslateOptions.pipeline, the default: the next chunk of decoder steps launched before this chunk's candidates are read) and the host's bookkeeping without copying token lists (bf16 batch 32 was 0.882 ms a step against 0.433 of device time: 7.3x HF, short of 10x): the beam GPU suite, then bench:beam beside HF
          run beam-tests 90 node --test --test-concurrency=1 dist/test/gpu/beam.test.js
          run beam-speed 200 node dist/bench/beam.js --iters 3 --json "$out/beam.json" ;;
    s42-h200) # (session 42) the H200 again after two H100-only sessions: bench:decode in full beside HF eager and static cache with the quantized rows (decode.json was session 33's; since then the one-pass norms, the down product at r4.kw4, the fused MLP at 2-4 rows, the head's greedy pick), then the head-argmax engine suite on this card
          run decode-full 440 node dist/bench/decode.js --reps 3 --torch-modes eager,static --quant int4,int8,int4-head,int8-head --json "$out/decode.json"
          run ha-engine 90 node --test --test-concurrency=1 dist/test/gpu/head-argmax.test.js ;;
    s42-dist) # (session 42) the multi-GPU code's one-GPU checks, several never run on a GPU: NCCL at world size 1, the vocabulary-parallel ops against the CPU (vocab-shard), a world-size-1 NCCL serving leader against a plain engine (tp-serve), TP decoding at world size 1 (tp-decode), the DP / TP training paths at world size 1 (multi-gpu); two-GPU cases skip by name. Then the engine suites under the session-41 defaults and the b1 timelines on this card
          run dist-tests 240 node --test --test-concurrency=1 dist/test/gpu/nccl.test.js dist/test/gpu/vocab-shard.test.js dist/test/gpu/tp-serve.test.js dist/test/gpu/tp-decode.test.js dist/test/gpu/multi-gpu.test.js
          run engines 150 node --test --test-concurrency=1 dist/test/gpu/infer-engine.test.js dist/test/gpu/serve-engine.test.js dist/test/gpu/speculative.test.js dist/test/gpu/beam.test.js
          for m in gpt2 llama; do run timeline-$m 60 node dist/bench/decode-timeline.js --models $m --quant bf16 --batch 1 --steps 8 --json "$out/timeline-$m.json"; done ;;
    s41-defaults) # (session 41) the LM head's greedy picks the default (CudaBackend.headArgmax): the engine GPU suites under it (infer-engine, serve-engine, speculative, beam, head-argmax), decode default / FUSEFORMER_HEAD_ARGMAX=0 once
          run d41-engines 300 node --test --test-concurrency=1 dist/test/gpu/infer-engine.test.js dist/test/gpu/serve-engine.test.js dist/test/gpu/speculative.test.js dist/test/gpu/beam.test.js dist/test/gpu/head-argmax.test.js
          for f in default 0; do run d41-$f 45 env FUSEFORMER_HEAD_ARGMAX=${f#default} node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --batches 1,2,4 --json "$out/d41-$f.json"; done ;;
    head-argmax) # (session 41) the LM head's GEMV packing each row's greedy pick into a 64-bit word by atomicMax (GemmArgs.argmax, kernels/gemv.ts GemvSpec.argmax) and sampleTokens taking it for greedy rows without a penalty (FUSEFORMER_HEAD_ARGMAX=1, opt-in until measured): the sampler walked the 100 KB / 256 KB row after the head (9.5 / 10.1 us of GPT-2's / Llama's b1 step with the gap to the next step). Op cases (gemm argmax, sampleTokens argmax), the engine test (16-bit, INT8 and INT4 heads), decode off / on twice, Llama INT8 + head and INT4 + head off / on, the b1 timeline with it
          run ha-ops 200 env FUSEFORMER_TEST_OPS=argmax node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          run ha-engine 200 node --test --test-concurrency=1 dist/test/gpu/head-argmax.test.js
          for round in 1 2; do
            for f in 0 1; do run ha-$f-$round 60 env FUSEFORMER_HEAD_ARGMAX=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --batches 1,4 --json "$out/ha-$f-$round.json"; done
          done
          for f in 0 1; do run ha-quant-$f 100 env FUSEFORMER_HEAD_ARGMAX=$f node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int8-head,int4-head --batches 1,4 --json "$out/ha-quant-$f.json"; done
          run ha-timeline 60 env FUSEFORMER_HEAD_ARGMAX=1 node dist/bench/decode-timeline.js --models gpt2 --quant bf16 --batch 1 --steps 8 --json "$out/ha-timeline.json" ;;
    graph-steps) # (session 41) several decode steps a replayed graph (EngineOptions.graphSteps, FUSEFORMER_DECODE_GRAPH_STEPS; default 1 until measured): the sampler's row in the b1 timelines (9.5 us of GPT-2's step) runs to the next step's first kernel, so it holds the gap between two graph launches, which a k-step graph replaces by a programmatic edge. The engine GPU suite with 8 steps a graph, then decode at 1 / 4 / 8 steps a graph, GPT-2 and Llama at batches 1 and 4, twice, and a GPT-2 b1 timeline at 8
          run gs-engine 200 env FUSEFORMER_DECODE_GRAPH_STEPS=8 node --test --test-concurrency=1 dist/test/gpu/infer-engine.test.js
          for round in 1 2; do
            for k in 1 4 8; do run gs-$k-$round 60 env FUSEFORMER_DECODE_GRAPH_STEPS=$k node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --batches 1,4 --json "$out/gs-$k-$round.json"; done
          done
          run gs-timeline 60 env FUSEFORMER_DECODE_GRAPH_STEPS=8 node dist/bench/decode-timeline.js --models gpt2 --quant bf16 --batch 1 --steps 8 --json "$out/gs-timeline.json" ;;
    s40-defaults) # (session 40) the fused MLP the default at 2-4 rows with its early trigger (CudaBackend.fusedMlpMinRows, mlpOptions.earlyTrigger): the engine GPU suites under it, GPT-2 b1 timelines of the usual form / fused / fused + early, then decode default / FUSEFORMER_FUSED_MLP=0 at batches 1-4, twice
          run d40-engines 240 node --test --test-concurrency=1 dist/test/gpu/infer-engine.test.js dist/test/gpu/serve-engine.test.js dist/test/gpu/speculative.test.js dist/test/gpu/beam.test.js
          run d40-mlp-engine 90 node --test --test-concurrency=1 --test-name-pattern='fused MLP' dist/test/gpu/decode-gemv.test.js
          for f in 0 1; do run d40-timeline-$f 60 env FUSEFORMER_FUSED_MLP=$f node dist/bench/decode-timeline.js --models gpt2 --quant bf16 --batch 1 --steps 8 --json "$out/d40-timeline-$f.json"; done
          run d40-timeline-late 60 env FUSEFORMER_FUSED_MLP=1 FUSEFORMER_MLP_EARLY_TRIGGER=0 node dist/bench/decode-timeline.js --models gpt2 --quant bf16 --batch 1 --steps 8 --json "$out/d40-timeline-late.json"
          for round in 1 2; do
            for f in default 0; do run d40-$f-$round 45 env FUSEFORMER_FUSED_MLP=${f#default} node dist/bench/decode.js --no-torch --reps 3 --models gpt2 --batches 1,2,3,4 --json "$out/d40-$f-$round.json"; done
          done ;;
    fused-mlp) # (session 40 ran it on an H100: see its header line) (session 38) GPT-2's MLP as one kernel (normMlp, kernels/gemv-mlp.ts; FUSEFORMER_FUSED_MLP=1): the norm prologue, fc + GELU, and the proj's partial sums by f32 atomics into an accumulator the next norm reads as an f32 y — one kernel boundary a layer fewer at 1–4 rows, every weight load of a block issued before its wait. Op cases (normMlp; residualNorm / normLinear with an f32 y), the engine test, then GPT-2 decode off / on / on with vector atomics (FUSEFORMER_MLP_RED_V4=1) twice, the early trigger (FUSEFORMER_MLP_EARLY_TRIGGER=1), the block size (features a block 8 / 32 against the planner's 16) and the b1 timeline with it on
          # (its op cases pass on the kernel emulator in CI since session 39; the engine test below runs the kernels concurrently, where a race would show)
          run mlp-engine 120 node --test --test-concurrency=1 --test-name-pattern='fused MLP \(one normMlp kernel a layer, 1–4 rows\) gives' dist/test/gpu/decode-gemv.test.js
          for round in 1 2; do
            for f in 0 1; do run mlp-$f-$round 40 env FUSEFORMER_FUSED_MLP=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2 --batches 1,4 --json "$out/mlp-$f-$round.json"; done
          done ;;
    fused-extras) # (session 38, never run) the fused MLP's and projection's variants, after fused-mlp and fused-o: the vector atomics' op cases (FUSEFORMER_MLP_RED_V4=1) and the engine test with them and the early trigger, decode with each (and FB 8 / 32 features a block), the b1 timelines of both fusions
          # (the vector atomics' and the projection variants' op cases pass on the kernel emulator in CI since session 39)
          run mlp-engine-early 90 env FUSEFORMER_MLP_EARLY_TRIGGER=1 FUSEFORMER_MLP_RED_V4=1 node --test --test-concurrency=1 --test-name-pattern='fused MLP' dist/test/gpu/decode-gemv.test.js
          for round in 1 2; do run mlp-v4-$round 40 env FUSEFORMER_FUSED_MLP=1 FUSEFORMER_MLP_RED_V4=1 node dist/bench/decode.js --no-torch --reps 3 --models gpt2 --batches 1,4 --json "$out/mlp-v4-$round.json"; done
          run mlp-early 40 env FUSEFORMER_FUSED_MLP=1 FUSEFORMER_MLP_EARLY_TRIGGER=1 node dist/bench/decode.js --no-torch --reps 3 --models gpt2 --batches 1,4 --json "$out/mlp-early.json"
          for fb in 8 32; do run mlp-fb$fb 40 env FUSEFORMER_FUSED_MLP=1 FUSEFORMER_MLP_FEATURES=$fb node dist/bench/decode.js --no-torch --reps 3 --models gpt2 --batches 1,4 --json "$out/mlp-fb$fb.json"; done
          run mlp-timeline 60 env FUSEFORMER_FUSED_MLP=1 node dist/bench/decode-timeline.js --models gpt2 --quant bf16 --batch 1 --steps 8 --json "$out/mlp-timeline.json"
          run o-timeline 60 env FUSEFORMER_FUSED_MLP=1 FUSEFORMER_FUSED_O=1 node dist/bench/decode-timeline.js --models gpt2 --quant bf16 --batch 1 --steps 8 --json "$out/o-timeline.json" ;;
    fused-o) # (session 38, never run) the O projection as decode attention's epilogue (DecodeAttentionArgs.project, FUSEFORMER_FUSED_O=1 with FUSEFORMER_FUSED_MLP=1): each block multiplies its heads' outputs by their 64 columns of W_O (prefetched into L2 before its wait) and adds the 768 sums into an f32 accumulator the MLP's norm reads — the O GEMV (2.2 µs a GPT-2 layer at b1) gone. The decode attention op cases with a projection (their variants — cluster forced, throughput, pipelined, tensor-core, fused append — in fused-extras), the engine test, then GPT-2 decode with the fused MLP, projection off / on twice, and the b1 timeline
          # (its op cases pass on the kernel emulator in CI since session 39; the engine test runs them concurrently)
          run o-engine 150 node --test --test-concurrency=1 --test-name-pattern='O projection in the attention kernel' dist/test/gpu/decode-gemv.test.js
          for round in 1 2; do
            for f in 0 1; do run o-$f-$round 40 env FUSEFORMER_FUSED_MLP=1 FUSEFORMER_FUSED_O=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2 --batches 1,4 --json "$out/o-$f-$round.json"; done
          done ;;
    head-norm) # (session 38, never run) the final norm in the LM head's GEMV prologue (FUSEFORMER_HEAD_NORM=1, headNormOptions: one kernel a token fewer — the final residualNorm was 2.4 µs of GPT-2's batch-1 step, 4.6 of Llama's): the engine test, then decode off / on twice (GPT-2 and Llama, batches 1 and 4), and with the fused MLP
          run head-engine 150 node --test --test-concurrency=1 --test-name-pattern='LM head' dist/test/gpu/decode-gemv.test.js
          for round in 1 2; do
            for f in 0 1; do run head-$f-$round 45 env FUSEFORMER_HEAD_NORM=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --batches 1,4 --json "$out/head-$f-$round.json"; done
          done
          run head-mlp 40 env FUSEFORMER_HEAD_NORM=1 FUSEFORMER_FUSED_MLP=1 node dist/bench/decode.js --no-torch --reps 3 --models gpt2 --batches 1,4 --json "$out/head-mlp.json" ;;
    sample-splits) # (session 38, never run) the greedy sampler's split count (FUSEFORMER_SAMPLE_SPLITS, a probe): GPT-2's batch-1 timeline put sampleTokens at 9.5 µs of a 218 µs step (4 blocks a row, then a partial, a fence, a counter and the last block's reduction, each a dependent round trip) and its preload (FUSEFORMER_SAMPLE_PRELOAD: the first logits requested before the row's state): the sampleTokens op cases at 1 and 2 splits and with the preload, then decode b1 / b4 at 1, 2 and the default splits and with the preload, twice
          for n in 1 2; do run splits-ops-$n 120 env FUSEFORMER_SAMPLE_SPLITS=$n FUSEFORMER_TEST_OPS=sampleTokens node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js; done
          run preload-ops 120 env FUSEFORMER_SAMPLE_PRELOAD=1 FUSEFORMER_TEST_OPS=sampleTokens node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          for round in 1 2; do
            for n in default 1 2; do run splits-$n-$round 45 env FUSEFORMER_SAMPLE_SPLITS=${n#default} node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --batches 1,4 --json "$out/splits-$n-$round.json"; done
            run preload-$round 45 env FUSEFORMER_SAMPLE_PRELOAD=1 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --batches 1,4 --json "$out/preload-$round.json"
          done ;;
    s37-quant-kernels) # (session 37, never run) GPTQ's column rounding (gptqRoundBlock) and AWQ's clip search (int4ClipGroups) and rescaling (scaleColumns) as kernels: their op cases against the CPU, the quantizeDecoder GPU test, then the 4-layer Llama 1.2B-width quantize runs (session 36 before them: GPTQ 94.6 s, AWQ 144 s for 4 layers)
          # (their op cases pass on the kernel emulator in CI since session 39; the quantizeDecoder test runs them on the GPU)
          run qk-test 120 node --test --test-concurrency=1 --test-name-pattern='quantizeDecoder on CUDA' dist/test/gpu/infer-quantized.test.js
          ql=/tmp/llama-4l
          run qk-make 120 python3 bench/make_llama_dir.py $ql --layers 4
          # with the host's CPU profile (where the time left goes), summarised by cpuprofile-top
          for m in gptq awq; do
            run qk-$m 150 bash -c "time node --cpu-prof --cpu-prof-dir=/tmp/qk-prof-$m dist/src/cli/main.js quantize --model $ql --out $ql-$m --bits 4 --method $m --calibration-samples 16 --calibration-len 256 --eval --eval-batches 2"
            f=$(ls -S /tmp/qk-prof-$m/*.cpuprofile 2>/dev/null | head -1); [ -n "$f" ] && node bench/cpuprofile-top.mjs "$f" 40 > "$out/qk-$m-cpuprof-top.txt" 2>&1
          done
          run qk-generate 60 bash -c "node dist/src/cli/main.js generate --model $ql-gptq --prompt 'The sea' --max-tokens 32 --temperature 0; node dist/src/cli/main.js generate --model $ql-awq --prompt 'The sea' --max-tokens 32 --temperature 0" ;;
    s37-quant-1b) # (session 37) the whole Llama 1.2B config (16 layers, random bf16) through GPTQ and AWQ with the rounding / clip / rescaling kernels (session 36: ~24 / ~36 s a layer, ~6.5 / ~10 min a model; cut by the call's bounds)
          ql=/tmp/llama-1b
          run q1-make 150 python3 bench/make_llama_dir.py $ql
          run q1-gptq 200 bash -c "time node dist/src/cli/main.js quantize --model $ql --out $ql-gptq --bits 4 --method gptq --calibration-samples 16 --calibration-len 256"
          run q1-awq 200 bash -c "time node dist/src/cli/main.js quantize --model $ql --out $ql-awq --bits 4 --method awq --calibration-samples 16 --calibration-len 256" ;;
    s37-quant-test) # (session 37) the quantizeDecoder GPU test with its bf16 bounds widened in session 36 (its f32 checks passed there)
          run s37-quant-test 150 node --test --test-concurrency=1 --test-name-pattern='quantizeDecoder on CUDA' dist/test/gpu/infer-quantized.test.js ;;
    stream-rows) # (session 35) the streamed GEMM at the serving engine's decode rows past its default 5-32 (STREAM_MAX_ROWS is 64; session 22's note: slower than cuBLASLt at 64 with the 5-32 planner): every stream plan around the planner's pick at 40 / 48 / 64 rows of Llama 1.2B's products beside cuBLASLt (C 64 serving runs decode steps of ~37 rows on cuBLASLt at 31-67% of copy, session 23's profile); if a plan wins at a row count, widen the default there (CudaBackend's streamGemm rows) and measure serving
          run stream-rows 300 node dist/bench/skinny-sweep.js --kernels stream --rows 40,48,64 --json "$out/stream-rows.json" ;;
    int4-after-wait) # (session 37 ran it: slower everywhere, e.g. Llama INT4 + head b1 0.447 -> 0.507 (norm) / 0.517 (1); removed, this step no longer applies) (session 34) the INT4 mma GEMV's weight loads coherent and after its grid-dependency wait (FUSEFORMER_INT4_LOADS_AFTER_WAIT=norm|1, Int4MmaGemvSpec.loadsAfterWait): in the SASS read here all 16 of the gated GEMV's weight loads (8 of QKV's) go out before its norm prologue's barriers, where the default's .nc loads leave 4 in flight through the prologue; Llama INT4 + head b1's gated GEMV takes 11.7 us in the step against 7.2 alone without the prologue. The INT4 op cases and engines with it (1), then decode 0 / norm / 1 twice; default the winner
          run aw-tests 300 env FUSEFORMER_INT4_LOADS_AFTER_WAIT=1 node --test --test-concurrency=1 dist/test/gpu/quant.test.js dist/test/gpu/infer-quantized.test.js
          for round in 1 2; do
            for f in 0 norm 1; do run aw-$f-$round 90 env FUSEFORMER_INT4_LOADS_AFTER_WAIT=$f node dist/bench/decode.js --no-torch --reps 3 --models llama,gpt2 --quant int4-head,int4 --batches 1,4 --json "$out/aw-$f-$round.json"; done
          done ;;
    int4-zero-fold) # (session 40 ran it: 122/122, slower — Llama INT4 + head b1 0.506 -> 0.526; removed, this step no longer applies) (session 34) the INT4 mma GEMV's zero point folded per chunk at one row tile (FUSEFORMER_INT4_ZERO_FOLD=1, Int4MmaGemvSpec.zeroFold): the tensor cores multiply magic + q as the LOP3 leaves it, an mma with all-ones weights sums the chunk's x from the B fragments in registers, C - (magic + z)*Sum(x) per chunk (session 17's fold summed x in a prologue pass and lost); SASS: Llama's gated GEMV 1573 -> 1469 instructions, down 939 -> 882. The INT4 op cases and engines with it, then decode off / on twice (INT4 + head, INT4; batches 1 and 4)
          run zf-tests 300 env FUSEFORMER_INT4_ZERO_FOLD=1 node --test --test-concurrency=1 dist/test/gpu/quant.test.js dist/test/gpu/infer-quantized.test.js
          for round in 1 2; do
            for f in 0 1; do run zf-$f-$round 90 env FUSEFORMER_INT4_ZERO_FOLD=$f node dist/bench/decode.js --no-torch --reps 3 --models llama,gpt2 --quant int4-head,int4 --batches 1,4 --json "$out/zf-$f-$round.json"; done
          done ;;
    int8-loop) # (session 34, never run) the W8A8 GEMV's looping form (Int8GemvSpec.loop, FUSEFORMER_GEMV_LOOP's family int8: grids past the resident blocks loop over their tiles, the wait + norm prologue + x's quantization once a block; Llama INT8 + head b1's gated GEMV is 1024 blocks in four rounds, 12.1 us at 66% of copy): its GPU test, the quantized engines with it, then decode default / + int8 twice (INT8 and INT8 + head, batches 1 and 4)
          run loop8-tests 240 node --test --test-name-pattern='looping W8A8' dist/test/gpu/quant.test.js
          run loop8-engines 200 env FUSEFORMER_GEMV_LOOP=gated-gemv,int8 node --test --test-concurrency=1 dist/test/gpu/infer-quantized.test.js
          for round in 1 2; do
            for f in gated-gemv gated-gemv,int8; do run loop8-${f//,/+}-$round 90 env FUSEFORMER_GEMV_LOOP=$f node dist/bench/decode.js --no-torch --reps 3 --models llama,gpt2 --quant int8,int8-head --batches 1,4 --json "$out/loop8-${f//,/+}-$round.json"; done
          done ;;
    s34-int8-b4) # (session 34, not run: the device time ran out) W8A8 plans at 2-4 rows: s34-int8-plans (its first call cut each run at 30 s; a second, by hand, one round) had Llama INT8 + head batch 4 0.937 -> 0.906 (gated r2.kw1, 512 blocks) and 0.900 (down r2.kw1, 128 blocks) ms a step, batch 1 slower (0.504 -> 0.508 / 0.510). The W8A8 op cases and the INT8 engines with both forced at every row count (its M=1 K=8192 and M=4 gated cases take them), then decode at batches 1-4 planner / both at 2-4 rows / both at 3-4 rows, twice; if the op cases pass and batches 2-4 gain, make those entries gemv-int8.ts's default
          both='k2048.gated=r2.kw1,k8192=r2.kw1'
          run i8-ops 300 env FUSEFORMER_INT8_PLAN=$both FUSEFORMER_QUANT_CASES='^int8Linear|^(bf16|f16|f32) M=' node --test --test-concurrency=1 --test-name-pattern='quantized ops|W8A8' dist/test/gpu/quant.test.js
          run i8-engines 200 env FUSEFORMER_INT8_PLAN=$both node --test --test-concurrency=1 dist/test/gpu/infer-quantized.test.js
          for round in 1 2; do
            for p in none k2048.m2.gated=r2.kw1,k2048.m3.gated=r2.kw1,k2048.m4.gated=r2.kw1,k8192.m2=r2.kw1,k8192.m3=r2.kw1,k8192.m4=r2.kw1 k2048.m3.gated=r2.kw1,k2048.m4.gated=r2.kw1,k8192.m3=r2.kw1,k8192.m4=r2.kw1; do
              n=$(echo "$p" | md5sum | cut -c1-6); [ "$p" = none ] && n=none
              run i8b-$n-$round 80 env FUSEFORMER_INT8_PLAN=${p#none} node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int8-head --batches 1,2,3,4 --json "$out/i8b-$n-$round.json"
            done
          done ;;
    s34-int8-plans) # (session 34) W8A8 plans in the step (FUSEFORMER_INT8_PLAN, a new probe with FUSEFORMER_GEMV_PLAN's syntax): Llama INT8 + head b1 0.500 against 0.45; its batch-1 timeline has the gated GEMV at 12.1 µs (66% of copy; 1024 blocks of one feature a warp, four rounds each running the norm + quantize prologue) and the down product at 4.6 (87%); r2.kw1 halves the gated grid. Decode Llama INT8 + head at batches 1 and 4 with each, twice
          for round in 1 2; do
            for p in none k2048.gated=r2.kw1 k2048.gated=r2.kw2 k8192=r2.kw1 k8192=r1.kw2 k2048.n2048.plain=r2.kw1 k2048.n3072=r1.kw1; do
              run i8-${p//[=.]/_}-$round 60 env FUSEFORMER_INT8_PLAN=${p#none} node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int8-head --batches 1,4 --json "$out/i8-${p//[=.]/_}-$round.json"
            done
          done ;;
    s34-int4) # (session 34) after the INT4 dequantization lost half its LOP3s: every plan of the tensor-core INT4 GEMV at 1 and 4 rows (does the planner's pick still win with cheaper dequantization?), and the batch-1 kernel timelines of Llama INT4 + head / INT8 + head / bf16 (where the 0.450 ms step goes against the 0.30 target)
          run sweep-int4 300 node dist/bench/gemv-sweep.js --rows 1,4 --mma-only --json "$out/sweep-int4.json"
          run timeline-b1 120 node dist/bench/decode-timeline.js --models llama --quant bf16,int4-head,int8-head --batch 1 --steps 8 --json "$out/timeline-b1.json" ;;
    int4-dequant) # (session 34, never run) the INT4 dequantization in fewer instructions (gemv-int4-mma.ts int4MmaDequantCode, shared by the mma GEMV, the streaming GEMV and the streamed GEMM's INT4 form): (w >> 4e) & mask | magic as one LOP3 with the magic in a register (ptxas had split it into two, 8 LOP3s a packed word instead of 4) and −(magic + z) by integer ops instead of a float round trip; the INT4 gated GEMV's SASS 2173 -> 1901 instructions (ncu, session 34 call 3: it issued every 2.2 cycles, LOP3 33% and HADD2 17% of 3.36M warp instructions). The quantized op cases and engines, then decode old / new twice (old: dist-old, the previous gemv-int4-mma.js from bench/ab/, untracked), then ncu on the new gated / down kernels
          run quant-tests 300 node --test --test-concurrency=1 dist/test/gpu/quant.test.js dist/test/gpu/infer-quantized.test.js
          if [ -f bench/ab/gemv-int4-mma.old.js ]; then rm -rf dist-old; cp -r dist dist-old; cp bench/ab/gemv-int4-mma.old.js dist-old/src/backend/cuda/kernels/gemv-int4-mma.js; fi
          for round in 1 2; do
            for v in old new; do
              d=dist; [ $v = old ] && d=dist-old
              [ -d $d ] && run dq-$v-$round 70 node $d/bench/decode.js --no-torch --reps 3 --models llama,gpt2 --quant int4-head,int4 --batches 1,32 --json "$out/dq-$v-$round.json"
            done
          done
          run ncu-int4 120 bash bench/ncu.sh "$out/ncu-int4" gated='int4_gemv_mma_bf16_nt1_.*gated' down='int4_gemv_mma_bf16_nt1_k8192' -- node dist/bench/decode-drive.js --steps 2 --model llama --quant int4-head ;;
    one-pass) # (session 33, never run) the LayerNorm prologues of the three GEMV families in one pass (FUSEFORMER_NORM_ONE_PASS=1, GemvNorm.onePass: Σv and Σv² by one block reduction; GPT-2's batch-1 QKV 7 -> 4 block barriers and 1389 -> 1226 instructions in the SASS read here; ncu had GPT-2's norm GEMVs 40% of their cycles at barriers): the normLinear op cases of the bf16 and quantized GEMVs and the engines under it, then GPT-2 decode (bf16, INT4 + head, INT8 + head) off / on twice; default it if GPT-2 b1 gains
          run op-tests 200 env FUSEFORMER_NORM_ONE_PASS=1 node --test-name-pattern='normLinear' dist/test/gpu/decode-gemv.test.js
          run op-quant 200 env FUSEFORMER_NORM_ONE_PASS=1 node --test-name-pattern='normLinear' dist/test/gpu/quant.test.js
          run engines 150 env FUSEFORMER_NORM_ONE_PASS=1 node --test --test-concurrency=1 --test-name-pattern='gpt2' dist/test/gpu/infer-quantized.test.js dist/test/gpu/infer-engine.test.js
          for round in 1 2; do
            for f in 0 1; do run onepass-$f-$round 40 env FUSEFORMER_NORM_ONE_PASS=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2 --quant int4-head,int8-head --batches 1,4 --json "$out/onepass-$f-$round.json"; done
          done ;;
    ncu-src) # (session 33, not run) Nsight Compute's per-instruction stall samples (bench/ncu.sh NCU_SOURCE=1: the SASS source page as CSV, ranked by bench/ncu-stalls.py) for the kernels behind the misses: Llama b1 bf16 gated (looping) and down, the INT4 + head b1 gated and down (nt1: the decode step's, not the 32-row prefill that session 33's regex caught), the INT4 + head b32 down (27% of that step), GPT-2's QKV with its LayerNorm prologue (40% of its cycles at barriers)
          drive="node dist/bench/decode-drive.js --steps 2"
          run src-llama 150 env NCU_SOURCE=1 bash bench/ncu.sh "$out/src-llama" gated='gemv_bf16_m1_k2048_.*gated' down='gemv_bf16_m1_k8192' -- $drive --model llama
          run src-int4 150 env NCU_SOURCE=1 bash bench/ncu.sh "$out/src-int4" gated='int4_gemv_mma_bf16_nt1_.*gated' down='int4_gemv_mma_bf16_nt1_k8192' -- $drive --model llama --quant int4-head
          run src-int4-b32 100 env NCU_SOURCE=1 bash bench/ncu.sh "$out/src-int4-b32" down='int4_gemv_mma_bf16_nt4_k8192' -- $drive --model llama --quant int4-head --batch 32
          run src-gpt2 100 env NCU_SOURCE=1 bash bench/ncu.sh "$out/src-gpt2" qkv='gemv_bf16_m1_k768_.*none_norm_layer_res' -- $drive --model gpt2 ;;
    s33-verify) # (session 33, not run: the device time ran out) the down product at r4.kw4 (FUSEFORMER_GEMV_PLAN=k8192.n2048.plain=r4.kw4: 256 blocks against the planner's 512 of r1.kw2; probed in the step in s33-plans, Llama b1 0.756 -> 0.749, b4 1.078 -> 0.989, never checked for correctness): the decode GEMM op cases (their 4x2048x8192 case takes it) and the decode engines with it, then decode at batches 1 and 4 with / without it, twice; if all pass, make it gemv.ts's default (GEMV_PLAN_DEFAULT)
          plan=k8192.n2048.plain=r4.kw4
          run verify-ops 240 env FUSEFORMER_GEMV_PLAN=$plan node --test-name-pattern='decode GEMMs on the GEMV kernel' dist/test/gpu/decode-gemv.test.js
          run verify-engines 90 env FUSEFORMER_GEMV_PLAN=$plan node --test-name-pattern='the decode engine with the GEMV kernel' dist/test/gpu/decode-gemv.test.js
          for round in 1 2; do
            run verify-planner-$round 30 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --batches 1,4 --json "$out/verify-planner-$round.json"
            run verify-r4kw4-$round 30 env FUSEFORMER_GEMV_PLAN=$plan node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --batches 1,4 --json "$out/verify-r4kw4-$round.json"
            # decode attention split at the bench's 160-position caches (two or three splits of >= 64 keys at batch 1;
            # slower in session 12, before the tensor-core, pipelined and append-fused kernels)
            run verify-split128-$round 30 env FUSEFORMER_DECODE_MIN_SPLIT_CAPACITY=128 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --batches 1,4 --json "$out/verify-split128-$round.json"
          done ;;
    s33-plans) # (session 33) the bf16 GEMV plans in the step (FUSEFORMER_GEMV_PLAN, a probe): s33-sweeps timed every plan alone — Llama's down product 10.6 µs planned against 9.3 at r4.kw4 (m4: 15.4 against 11.1), the gated one 18.1 against 16.2 at r1.kw8, O 3.42 against 3.15 — but the step overlaps each GEMV's first loads with its predecessor: decode (Llama bf16, batches 1 and 4) with each alternative, twice
          for round in 1 2; do
            for p in none k8192=r4.kw4 k8192=r2.kw2 k2048.gated=r1.kw8 k2048.gated=r1.kw2 k2048.n2048.plain=r2.kw8 k2048.n3072.norm=r4.kw4; do
              run plan-${p//[=.]/_}-$round 30 env FUSEFORMER_GEMV_PLAN=${p#none} node dist/bench/decode.js --no-torch --reps 3 --models llama --batches 1,4 --json "$out/plan-${p//[=.]/_}-$round.json"
            done
          done ;;
    weight-prefetch) # (session 32, never run) each decode GEMV block requesting its whole slab of weight rows into L2 first (FUSEFORMER_WEIGHT_PREFETCH, weight-stream.ts: one cp.async.bulk.prefetch.L2 from one thread, before the wait; the SASS here puts the INT4 gated GEMV's 16 weight loads a lane after the wait, spread among its HMMAs — 42% of copy in the step): the GEMV and INT4 op cases and the quantized engines under it, then decode none / int4 / all families twice with the quant rows
          run pf-tests-gemv 120 env FUSEFORMER_WEIGHT_PREFETCH=1 node --test-name-pattern='decode GEMMs on the GEMV kernel|gatedLinear on the gated GEMV|normLinear on the GEMV|looping GEMV' dist/test/gpu/decode-gemv.test.js
          run pf-tests-quant 150 env FUSEFORMER_WEIGHT_PREFETCH=1 FUSEFORMER_QUANT_CASES='int4Linear bf16|int4Linear f16|int8Linear' node --test --test-concurrency=1 dist/test/gpu/quant.test.js dist/test/gpu/infer-quantized.test.js
          for round in 1 2; do
            for f in 0 int4 1; do run pf-$f-$round 80 env FUSEFORMER_WEIGHT_PREFETCH=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --quant int4-head,int8-head --json "$out/pf-$f-$round.json"; done
          done ;;
    gemv-loop) # (session 32, never run) the 16-bit GEMVs' looping form (FUSEFORMER_GEMV_LOOP, gemv.ts GemvSpec.loop: a grid past the resident blocks becomes 264 blocks looping over its tiles, the prologue once a block, each next tile's first loads issued before the previous tile's reduction) — Llama b1's gated product is 1024 blocks of 8 columns, four rounds each running the norm prologue, at 81% of copy (down, no prologue: 92%): its op cases, the engines with every family looping, then decode none / gated / gated + wide norm (Llama's QKV: one tile a block, its loads all ahead of the wait) / all families twice, and the b1 timelines with it
          run loop-tests 200 node --test-name-pattern='looping GEMV' dist/test/gpu/decode-gemv.test.js
          run loop-engines 150 env FUSEFORMER_GEMV_LOOP=1 node --test-name-pattern='the decode engine with the GEMV kernel' dist/test/gpu/decode-gemv.test.js
          for round in 1 2; do
            for f in 0 gated-gemv gated-gemv,wide-norm-gemv 1; do run loop-${f//,/+}-$round 70 env FUSEFORMER_GEMV_LOOP=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/loop-${f//,/+}-$round.json"; done
          done
          run loop-timeline 60 env FUSEFORMER_GEMV_LOOP=1 node dist/bench/decode-timeline.js --models gpt2,llama --quant bf16 --batch 1 --steps 8 --json "$out/loop-timeline.json" ;;
    ncu) # (session 32, never run) Nsight Compute on the kernels behind the targets' gaps (bench/ncu.sh: one launch each, timed alone; DRAM / SM throughput, stall reasons, occupancy; ncu and profiling rights checked present on the lent H200 in session 32): Llama b1 bf16 (gated at 81% of copy in the step, QKV / O ~50%, attention), Llama INT4 + head b1 (gated at 42%, down), GPT-2 b1 (four of its five kernels), and #2's LayerNorm backward at BERT size (71-78% of a same-size copy)
          drive="node dist/bench/decode-drive.js --steps 2"
          run ncu-llama 180 bash bench/ncu.sh "$out/ncu-llama" gated='gemv_bf16_m1_k2048_.*gated' down='gemv_bf16_m1_k8192' qkv='gemv_bf16_m1_k2048_.*none_norm_rms_res' o='gemv_bf16_m1_k2048_r2_kw1_none$' attn='decode_attention' -- $drive --model llama
          run ncu-llama-int4 100 bash bench/ncu.sh "$out/ncu-llama-int4" gated='int4_gemv_mma.*gated' down='int4_gemv_mma.*k8192' -- $drive --model llama --quant int4-head
          run ncu-gpt2 140 bash bench/ncu.sh "$out/ncu-gpt2" qkv='gemv_bf16_m1_k768_.*none_norm_layer_res' attn='decode_attention' fc='gemv_bf16_m1_k768_.*gelu' proj='gemv_bf16_m1_k3072' -- $drive --model gpt2
          run ncu-norm 90 bash bench/ncu.sh "$out/ncu-norm" lnb='norm_backward_layer_bf16' cols='norm_column_sums_layer_bf16' -- node dist/bench/kernels.js --no-torch --only 'BERT-base bf16 layerNormBackward' ;;
    s33-sweeps) # (session 32, never run) every plan of the 16-bit GEMV at Llama's and GPT-2's products (gemv-sweep --bf16: does planGemv pick the fastest weight stream? Llama b1's gated product runs at 81% of copy, its QKV / O at ~50%), the INT4 kernels at the row counts between s32-check's points (the routing's crossovers), and the batch-32 timelines of Llama bf16 / INT8 + head / INT4 + head (the b32 target: 1.023 ms a step against 0.914; INT8 + head 1.226; INT4 + head 1.088 with the shape routing)
          run bf16-sweep 150 node dist/bench/gemv-sweep.js --bf16 --rows 1,2,4 --json "$out/bf16-sweep.json"
          run int4-paths-2 100 node dist/bench/gemv-sweep.js --paths --rows 12,20,24,28 --json "$out/int4-paths-2.json"
          run timelines-b32 120 node dist/bench/decode-timeline.js --models llama --quant bf16,int8-head,int4-head --batch 32 --steps 8 --json "$out/timelines-b32.json" ;;
    s32-route) # (session 32) INT4 routing by shape (quant-int4.ts int4TmaRoutes, from s32-check's --paths sweep): the gated product to the streamed GEMM from 17 rows (was 5), projections of >= 3072 features and K <= 2048 (QKV, the LM heads, GPT-2's fc) from 9 rows (were never) — the streamed-GEMM and 'auto' op cases, the quantized engines, then INT4 decode new / old routing (FUSEFORMER_INT4_TMA_GATED_ONLY=1 FUSEFORMER_INT4_TMA_MIN_ROWS=5) twice
          run route-tests 150 env FUSEFORMER_QUANT_CASES='\(tma\)|N=50257|M=9 K=2048 N=3072 G=128$' node --test --test-concurrency=1 dist/test/gpu/quant.test.js dist/test/gpu/infer-quantized.test.js
          for round in 1 2; do
            run route-new-$round 60 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --quant int4-head --json "$out/route-new-$round.json"
            run route-old-$round 60 env FUSEFORMER_INT4_TMA_GATED_ONLY=1 FUSEFORMER_INT4_TMA_MIN_ROWS=5 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --quant int4-head --json "$out/route-old-$round.json"
          done ;;
    s32-check) # (session 32) int4Linear through each kernel at 8-32 rows (gemv-sweep --paths: the mma GEMV, the INT4 streamed GEMM, the tiled INT4 GEMM; the batch-32 INT4 timeline has the LM head's mma GEMV at 205 µs, 6.8x its weight bytes at copy speed: every block re-reads the 32 rows of x), then the op table, GEMM, runtime, graph and training GPU suites on the restrict-free build (session 30's compile change; only the decode and model suites ran on it)
          run int4-paths 100 node dist/bench/gemv-sweep.js --paths --rows 8,16,32 --json "$out/int4-paths.json"
          run regress-ops 300 node --test --test-concurrency=1 dist/test/gpu/ops.test.js dist/test/gpu/gemm.test.js dist/test/gpu/runtime.test.js dist/test/gpu/graph.test.js
          run regress-train 150 node --test --test-concurrency=1 dist/test/gpu/gpt2-train.test.js dist/test/gpu/bert.test.js dist/test/gpu/models-train.test.js ;;
    chain) # (session 31; run in session 32) bench/chain-latency.ts: the µs a dependent kernel costs on a graph-replayed chain — stream order, griddepcontrol.wait (trigger late / early), and flag release (ld.acquire spin on a release counter, trigger after / before the spin) — at 1-264 blocks, with no weights and with 1.2 / 4.7 MB a kernel streamed ahead of the wait (GPT-2 GEMV sizes); every row checks the chain read no stale data
          run chain 120 node dist/bench/chain-latency.js --json "$out/chain-latency.json" ;;
    s31-verify) # (session 31, call 4) the defaults after call 3: coherent weight loads for the plain and narrow-norm bf16 GEMVs and the W8A8 GEMV (not the wide-norm, gated or INT4 ones), the quantized norm prologue at K <= 2048; the INT4 scales' __ldg withdrawn (slower: INT4 b32 1.191 -> 1.291) — the GEMV op cases and engines, the quantized norm op cases, then decode default twice and with no family coherent once
          run v31-tests-gemv 100 node --test-name-pattern='decode GEMMs on the GEMV kernel|gatedLinear on the gated GEMV|normLinear on the GEMV|the decode engine with the GEMV kernel' dist/test/gpu/decode-gemv.test.js
          run v31-tests-quant 60 node --test-name-pattern='normLinear|GPT-2 with INT4' dist/test/gpu/quant.test.js
          run v31-default-1 90 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --quant int4-head,int8-head --json "$out/v31-default-1.json"
          run v31-loads0 60 env FUSEFORMER_WEIGHT_LOAD_COHERENT=0 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --quant int4-head,int8-head --json "$out/v31-loads0.json"
          run v31-default-2 60 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --quant int4-head,int8-head --json "$out/v31-default-2.json" ;;
    s31-families) # (session 31, call 3) the defaults after calls 1-2 (never run): the W8A8 GEMV's weights by coherent loads (FUSEFORMER_WEIGHT_LOAD_COHERENT now a list of families, default int8), the quantized GEMVs' norm prologue at K <= 2048 (was 1024), INT4 scales and zeros by __ldg (the restrict-free build read them coherently: INT4 b32 1.140 -> 1.191) — the quantized op cases and engines, then decode new defaults / no family coherent, and the bf16 families coherent one at a time (plain, norm, gated GEMVs: GPT-2 b1 0.219 -> 0.192 with all, Llama 0.769 -> 0.787), two rounds
          run f31-tests-quant 150 env FUSEFORMER_QUANT_CASES='int4Linear|int4 mma GEMV' node --test-name-pattern='quantized ops|normLinear|GPT-2 with INT4' dist/test/gpu/quant.test.js
          run f31-tests-engines 90 node dist/test/gpu/infer-quantized.test.js
          for round in 1 2; do
            run f31-default-$round 100 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --quant int4-head,int8-head --json "$out/f31-default-$round.json"
            run f31-loads0-$round 70 env FUSEFORMER_WEIGHT_LOAD_COHERENT=0 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --quant int4-head,int8-head --json "$out/f31-loads0-$round.json"
            for fam in gemv norm-gemv gated-gemv gemv,norm-gemv,gated-gemv; do
              tag=$(echo $fam | tr ',' '+')
              run f31-bf16-$tag-$round 45 env FUSEFORMER_WEIGHT_LOAD_COHERENT=int8,$fam node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/f31-bf16-$tag-$round.json"
            done
          done ;;
    s30-engines) # (session 30) whole-model decode with the new norm GEMV defaults (per-family write forms, one-wave bf16 plans): the engines with the GEMV kernel against without, the CUDA engine against the CPU one, and the quantized engines (INT4 early / W8A8 deferred norm GEMVs) against the CPU quantized engine
          run e30-gemv-engines 120 node --test-name-pattern='the decode engine with the GEMV kernel' dist/test/gpu/decode-gemv.test.js
          run e30-infer-engine 90 node dist/test/gpu/infer-engine.test.js
          run e30-infer-quantized 120 node dist/test/gpu/infer-quantized.test.js ;;
    s30-defaults) # (session 30) the per-family norm-write defaults (INT4 early, W8A8 deferred, bf16 late) and the bf16 norm GEMV's one-wave plan, now defaults: the norm-prologue op cases under them, then bench:decode in full beside HF eager and static cache with the quantized rows (decode.json)
          run d30-tests-gemv 150 node --test-name-pattern='normLinear' dist/test/gpu/decode-gemv.test.js
          run d30-tests-quant 100 node --test-name-pattern='normLinear' dist/test/gpu/quant.test.js
          run d30-decode-full 330 node dist/bench/decode.js --reps 3 --torch-modes eager,static --quant int4,int8,int4-head,int8-head --json "$out/decode.json" ;;
    early-write) # (session 29; built in session 28, never run) the norm GEMVs' last block found and writing sooner (FUSEFORMER_NORM_WRITE): deferred — thread 0 reads its block's count after the main loop instead of waiting for the atomic at once; early — counted at the first reduction, and the last block writes x and h before its main loop from registers instead of re-reading x, y and bias after it. The norm-prologue op cases of the three GEMV families under each (in-process: TAP streams), then decode late / deferred / early twice (bf16, INT4 + head, INT8 + head at b1) and with the bf16 norm GEMVs planned within one wave of resident blocks (FUSEFORMER_NORM_GEMV_ONE_WAVE=1: GPT-2's QKV 288 → 144 blocks, Llama's 384 → 192), the b1 timelines; default the winners
          for w in deferred early; do
            run ew-tests-gemv-$w 150 env FUSEFORMER_NORM_WRITE=$w node --test-name-pattern='normLinear' dist/test/gpu/decode-gemv.test.js
            run ew-tests-quant-$w 200 env FUSEFORMER_NORM_WRITE=$w node --test-name-pattern='normLinear' dist/test/gpu/quant.test.js
          done
          run ew-tests-gemv-wave 150 env FUSEFORMER_NORM_GEMV_ONE_WAVE=1 node --test-name-pattern='normLinear' dist/test/gpu/decode-gemv.test.js
          for round in 1 2; do
            for w in late deferred early; do run ew-$w-$round 60 env FUSEFORMER_NORM_WRITE=$w node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --quant int4-head,int8-head --json "$out/ew-$w-$round.json"; done
            run ew-wave-$round 60 env FUSEFORMER_NORM_GEMV_ONE_WAVE=1 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/ew-wave-$round.json"
          done
          run ew-timelines 90 env FUSEFORMER_NORM_WRITE=early node dist/bench/decode-timeline.js --models gpt2,llama --quant bf16,int4-head --batch 1 --steps 8 --json "$out/ew-timelines.json" ;;
    sample-wave) # (session 28; built in session 27, never run) sampleTokens' splits capped at one wave (FUSEFORMER_SAMPLE_WAVE=1: Llama at 32 rows 8 → 4 splits; sampling took 19–20 µs of a batch-32 step): its op cases with it on, then decode off / on, one process each, two rounds; default it on if batch 32 gains and batch 1 holds
          run sample-wave-ops 200 env FUSEFORMER_SAMPLE_WAVE=1 FUSEFORMER_TEST_OPS=sampleTokens node --test --test-concurrency=1 dist/test/gpu/infer-ops.test.js
          for round in 1 2; do
            for f in 0 1; do run sample-wave$f-$round 60 env FUSEFORMER_SAMPLE_WAVE=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/sample-wave$f-$round.json"; done
          done ;;
    l2-verify) # (session 28) the L2 hint's op cases with room to finish, and GPT-2 bf16 b1 off / on in the plain and the timeline build
          for round in 1 2; do
            for f in 0 1; do
              run l2v-gpt2-$f-$round 40 env FUSEFORMER_WEIGHT_EVICT_FIRST=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/l2v-gpt2-$f-$round.json"
              [ $round = 1 ] && run l2v-gpt2-stamped-$f 40 env FUSEFORMER_TIMELINE=1 FUSEFORMER_WEIGHT_EVICT_FIRST=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2 --json "$out/l2v-gpt2-stamped-$f.json"
            done
          done
          # Run in-process (no --test): its TAP lines then stream as each test ends, so a cut run shows where it was.
          run l2v-tests-gemv 300 env FUSEFORMER_WEIGHT_EVICT_FIRST=1 node dist/test/gpu/decode-gemv.test.js
          run l2v-tests-quant 300 env FUSEFORMER_WEIGHT_EVICT_FIRST=1 node dist/test/gpu/quant.test.js ;;
    l2-hint) # (session 27, call 1) the decode kernels' weights loaded evict-first in L2 (kernels/weight-stream.ts; FUSEFORMER_WEIGHT_EVICT_FIRST, on by default, never run): the GEMV / streamed GEMM and quantized op cases against the CPU, then decode off / on, one process each, two rounds (round 1 GPT-2 and Llama with INT4 + head and INT8 + head, round 2 Llama)
          run l2-tests 200 node --test --test-concurrency=1 dist/test/gpu/decode-gemv.test.js dist/test/gpu/quant.test.js
          for round in 1 2; do
            models=gpt2,llama; [ $round = 2 ] && models=llama
            for f in 0 1; do run decode-l2-$f-$round 110 env FUSEFORMER_WEIGHT_EVICT_FIRST=$f node dist/bench/decode.js --no-torch --reps 3 --models $models --quant int4-head,int8-head --json "$out/decode-l2-$f-$round.json"; done
          done ;;
    l2-check) # (session 27, call 2) call 1 left GPT-2 bf16 b1 0.219 → 0.238 with the hint (one round; every Llama row and GPT-2's quantized rows faster): GPT-2 off / on twice more; then the op cases call 1's 200 s did not finish (compiles), one file at a time
          for round in 3 4; do
            for f in 0 1; do run decode-l2-gpt2-$f-$round 60 env FUSEFORMER_WEIGHT_EVICT_FIRST=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2 --json "$out/decode-l2-gpt2-$f-$round.json"; done
          done
          run l2-tests-gemv 200 node --test --test-concurrency=1 dist/test/gpu/decode-gemv.test.js
          run l2-tests-quant 150 node --test --test-concurrency=1 dist/test/gpu/quant.test.js ;;
    l2-gpt2) # (session 27, call 3) GPT-2 bf16 b1 is the one row the hint slows (0.218 → 0.236–0.238, three rounds): its batch-1 timelines off / on, then the op cases with longer bounds (calls 1–2 cut them at 200 s while compiling)
          for f in 0 1; do run timeline-gpt2-l2-$f 60 env FUSEFORMER_WEIGHT_EVICT_FIRST=$f node dist/bench/decode-timeline.js --models gpt2 --quant bf16,int8-head --batch 1 --steps 8 --json "$out/timeline-gpt2-l2-$f.json"; done
          run l2-tests-gemv 280 node --test --test-concurrency=1 dist/test/gpu/decode-gemv.test.js
          run l2-tests-quant 200 node --test --test-concurrency=1 dist/test/gpu/quant.test.js ;;
    l2-timelines) # (session 27) batch-1 and batch-32 timelines by role (decode-timeline's second table: the output and down projections apart) with the L2 hint off and on
          for f in 0 1; do
            run timeline-b1-l2-$f 100 env FUSEFORMER_WEIGHT_EVICT_FIRST=$f node dist/bench/decode-timeline.js --models llama --quant bf16,int4-head,int8-head --batch 1 --steps 8 --json "$out/timeline-b1-l2-$f.json"
            run timeline-b32-l2-$f 100 env FUSEFORMER_WEIGHT_EVICT_FIRST=$f node dist/bench/decode-timeline.js --models llama --quant bf16 --batch 32 --steps 8 --json "$out/timeline-b32-l2-$f.json"
          done ;;
    timelines-b1) # (session 26, call 4) batch-1 kernel timelines on the H200 of the quantized Llama steps whose targets are missed (INT4 + head 0.469 against 0.30, INT8 + head 0.523 against 0.45) and bf16 beside them, for the next session's choice; prefetch-l2's GPU test (quantized models; not run since the INT4 default changed)
          run timeline-b1 120 node dist/bench/decode-timeline.js --models llama --quant bf16,int4-head,int8-head --batch 1 --steps 8 --json "$out/timeline-b1.json"
          run timeline-b1-gpt2 90 node dist/bench/decode-timeline.js --models gpt2 --quant bf16 --batch 1 --steps 8 --json "$out/timeline-b1-gpt2.json" ;;
    int4-default) # (session 26, call 3) the INT4 streamed GEMM as the default for the gated product at 5–32 rows with 4 consumer warps: every quantized op case and the quantized engines under the default routing, then bench:decode's quantized rows (no HF) twice
          run int4-default-tests 300 node --test --test-concurrency=1 dist/test/gpu/quant.test.js dist/test/gpu/infer-quantized.test.js
          for round in 1 2; do run decode-quant-$round 90 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4,int8,int4-head,int8-head --json "$out/decode-quant-$round.json"; done
          run decode-quant-tma-off 90 env FUSEFORMER_INT4_TMA=0 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4,int4-head --json "$out/decode-quant-tma-off.json" ;;
    int4-tma-b1) # (session 26, call 2) the INT4 streamed GEMM routed from 1 row (FUSEFORMER_INT4_TMA_MIN_ROWS=1) and for the gated product alone (FUSEFORMER_INT4_TMA_GATED_ONLY=1; call 1: at 32 rows it beat the mma GEMV there, 23.0 against 28.6 µs, and lost on down 25.4 / 15.1 and O 11.3 / 6.8): the 1–3-row op cases and the engine test, then decode b1 / b32 per setting and the b1 profile
          run int4-b1-tests 240 env FUSEFORMER_QUANT_CASES='\(tma\)|Llama' node --test --test-concurrency=1 dist/test/gpu/quant.test.js dist/test/gpu/infer-quantized.test.js
          run decode-b1-off 60 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4,int4-head --json "$out/decode-b1-off.json"
          for shape in 8,1 4,1; do
            run decode-b1-all-$shape 60 env FUSEFORMER_INT4_TMA=1 FUSEFORMER_INT4_TMA_MIN_ROWS=1 FUSEFORMER_INT4_TMA_SHAPE=$shape node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4,int4-head --json "$out/decode-b1-all-$shape.json"
            run decode-b1-gated-$shape 60 env FUSEFORMER_INT4_TMA=1 FUSEFORMER_INT4_TMA_MIN_ROWS=1 FUSEFORMER_INT4_TMA_GATED_ONLY=1 FUSEFORMER_INT4_TMA_SHAPE=$shape node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4,int4-head --json "$out/decode-b1-gated-$shape.json"
          done
          run profile-b1-tma 60 env FUSEFORMER_INT4_TMA=1 FUSEFORMER_INT4_TMA_MIN_ROWS=1 FUSEFORMER_PDL=0 node dist/src/cli/main.js profile --model llama-1.2B --mode decode --batch 1 --seq 96 --quantize rtn4 --top 10 --out /tmp/p-b1-tma
          run profile-b1-off 60 env FUSEFORMER_PDL=0 node dist/src/cli/main.js profile --model llama-1.2B --mode decode --batch 1 --seq 96 --quantize rtn4 --top 10 --out /tmp/p-b1-off ;;
    int4-tma) # (session 26) the INT4 form of the streamed GEMM (FUSEFORMER_INT4_TMA=1, opt-in; session 25's last minutes: 7/7 op cases, Llama INT4 b32 1.172 → 1.108 ms/token, still behind bf16's 1.021): the quantized engines forced on, where its b32 step goes (profiles off / on), decode at the block shapes 8,1 (planner) 4,1 4,2
          run int4-tma-tests 240 env FUSEFORMER_INT4_TMA=1 FUSEFORMER_QUANT_CASES='\(tma\)|GPT-2|Llama' node --test --test-concurrency=1 dist/test/gpu/quant.test.js dist/test/gpu/infer-quantized.test.js
          for v in 0 1; do run profile-int4-b32-tma$v 60 env FUSEFORMER_INT4_TMA=$v FUSEFORMER_PDL=0 node dist/src/cli/main.js profile --model llama-1.2B --mode decode --batch 32 --seq 96 --quantize rtn4 --top 10 --out /tmp/p-int4-tma$v; done
          for v in 0 1; do run timeline-int4-b32-tma$v 60 env FUSEFORMER_INT4_TMA=$v node dist/bench/decode-timeline.js --models llama --quant bf16,int4-head --batch 32 --steps 8 --json "$out/timeline-int4-b32-tma$v.json"; done
          run decode-int4-tma-off 60 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4,int4-head --json "$out/decode-int4-tma-off.json"
          for shape in 8,1 4,1 4,2; do run decode-int4-tma-$shape 60 env FUSEFORMER_INT4_TMA=1 FUSEFORMER_INT4_TMA_SHAPE=$shape node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4,int4-head --json "$out/decode-int4-tma-$shape.json"; done ;;
    refresh-decode) # (session 25) the mma GEMV's and skinny GEMM's GPU tests with the streamed GEMM off (it routes 5–32 rows first, so they had stopped reaching their kernels), then bench:decode in full beside HF eager and static cache, with the quantized rows (decode.json was session 9's)
          run gemv-others-tests 120 node --test --test-concurrency=1 --test-name-pattern='mma GEMV|skinny' dist/test/gpu/decode-gemv.test.js
          run decode-full 420 node dist/bench/decode.js --reps 3 --torch-modes eager,static --quant int4,int8,int4-head,int8-head --json "$out/decode.json" ;;
    refresh-serve) # (session 25) bench:serve-speed in full beside HF generate batched (serve-speed.json was session 10's)
          run serve-full 560 node dist/bench/serve-speed.js --json "$out/serve-speed.json" ;;
    mma-shape) # (for session 24; built after session 23's last device call, never run) the tensor-core decode attention's other shapes (FUSEFORMER_DECODE_MMA_SHAPE=tile,stages[,blocksPerSm]): their forced op cases, then the serving step at 100 rows × 384 (808 blocks: 3 rounds at 3 blocks an SM, 2 at 4) and decode, per shape
          run mma-shape-ops 200 node --test --test-concurrency=1 --test-name-pattern='other shapes' dist/test/gpu/infer-ops.test.js
          for shape in 32,2 16,3,4 16,2,4 32,3; do
            run profile-b100-$shape 30 env FUSEFORMER_DECODE_MMA_SHAPE=$shape node dist/src/cli/main.js profile --model llama-1.2B --mode serve-decode --batch 100 --seq 384 --top 4 --out /tmp/p-b100-$shape
          done
          for shape in 32,2 16,3,4; do run serve-mma-$shape 60 env FUSEFORMER_DECODE_MMA_SHAPE=$shape node dist/bench/serve-speed.js --no-torch --no-prefix --concurrency 64,256 --json "$out/serve-mma-$shape.json"; done
          for shape in 32,2 16,3,4; do run decode-mma-$shape 40 env FUSEFORMER_DECODE_MMA_SHAPE=$shape node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/decode-mma-$shape.json"; done ;;
    attn-mma3) # (session 23, call 6) decode attention's cp.async row copies shared by the pipelined and tensor-core variants (one copy_rows helper; the fused-append kernels' code changed): their forced op cases, fused append on and off, then decode
          run mma3-ops 200 node --test --test-concurrency=1 --test-name-pattern='tensor-core|appendDecodeAttention is one kernel|pipelined variant forced' dist/test/gpu/infer-ops.test.js
          run mma3-decode 40 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/decode-mma3.json" ;;
    attn-mma2) # (session 23, call 5) the tensor-core decode attention as the default: the serving engine's GPU suite on it; the split count of big serving grids (one wave of 396 blocks by default; 808 blocks at 100 rows run in 3 rounds) swept through the serving step's profile, then serving at 64 / 256 clients with two targets
          run mma-serve-tests 120 node --test --test-concurrency=1 dist/test/gpu/serve-engine.test.js
          for target in 396 800 1200 2400; do
            run profile-b100-t$target 30 env FUSEFORMER_DECODE_SPLIT_TARGET=$target node dist/src/cli/main.js profile --model llama-1.2B --mode serve-decode --batch 100 --seq 384 --top 4 --out /tmp/p-b100-t$target
          done
          for target in 396 1200; do
            run profile-b200-t$target 30 env FUSEFORMER_DECODE_SPLIT_TARGET=$target node dist/src/cli/main.js profile --model llama-1.2B --mode serve-decode --batch 200 --seq 640 --top 4 --out /tmp/p-b200-t$target
          done
          run decode-default 40 node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/decode-default.json"
          for target in 396 1200; do run serve-t$target 60 env FUSEFORMER_DECODE_SPLIT_TARGET=$target node dist/bench/serve-speed.js --no-torch --no-prefix --concurrency 64,256 --json "$out/serve-t$target.json"; done ;;
    attn-mma) # (session 23, call 3) decode attention on tensor cores (FUSEFORMER_DECODE_MMA=1, opt-in, never run): its forced GPU op cases, the engines against the CPU with it on, the serving step's profile (attention was 46.8 µs of 2.375 ms a layer at 100 rows × 384), decode and serving off / on
          run mma-ops 200 node --test --test-concurrency=1 --test-name-pattern='tensor-core' dist/test/gpu/infer-ops.test.js
          run mma-engines 200 env FUSEFORMER_DECODE_MMA=1 node --test --test-concurrency=1 dist/test/gpu/infer-engine.test.js dist/test/gpu/paged-attention.test.js
          run profile-serve-b100-mma 90 env FUSEFORMER_DECODE_MMA=1 node dist/src/cli/main.js profile --model llama-1.2B --mode serve-decode --batch 100 --seq 384 --top 12 --out /tmp/p-serve-b100-mma
          run profile-llama-b32-mma 90 env FUSEFORMER_DECODE_MMA=1 node dist/src/cli/main.js profile --model llama-1.2B --mode decode --batch 32 --seq 96 --top 12 --out /tmp/p-llama-b32-mma
          for f in 0 1; do run decode-mma$f 60 env FUSEFORMER_DECODE_MMA=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/decode-mma$f.json"; done
          run serve-mma1 100 env FUSEFORMER_DECODE_MMA=1 node dist/bench/serve-speed.js --no-torch --no-prefix --concurrency 64,256 --json "$out/serve-mma1.json" ;;
    serve-stream) # (session 23, call 2) where batch-32 decode and serving steps spend their time with the streamed GEMM (op-by-op profiles: Llama decode b32, serving decode-only at 100 rows × 384 cached, serving mixed), then serving with the streamed GEMM on / off (#6: never measured with it)
          run profile-llama-b32 120 node dist/src/cli/main.js profile --model llama-1.2B --mode decode --batch 32 --seq 96 --top 40 --out /tmp/p-llama-b32
          run profile-serve-b100 120 node dist/src/cli/main.js profile --model llama-1.2B --mode serve-decode --batch 100 --seq 384 --top 40 --out /tmp/p-serve-b100
          run profile-serve-mixed 120 node dist/src/cli/main.js profile --model llama-1.2B --mode serve-mixed --batch 64 --seq 384 --chunk 256 --top 40 --out /tmp/p-serve-mixed
          for p in llama-b32 serve-b100 serve-mixed; do cp /tmp/p-$p/profile.json "$out/profile-$p.json" 2>/dev/null; done
          for f in 1 0; do run serve-stream$f 150 env FUSEFORMER_STREAM_GEMM=$f node dist/bench/serve-speed.js --no-torch --no-prefix --concurrency 64,256 --json "$out/serve-stream$f.json"; done ;;
    norm-tma) # (session 23, call 1) the LayerNorm/RMSNorm backward on tensor-map TMA: 58/58 + 8/8 checks but slower (BERT bf16 14.9 → 20.9 µs, GPT-2 25.6 → 34.5): removed, commit 0b58bbe has it
          say "norm-tma: the TMA norm backward was removed after session 23's call 1 (commit 0b58bbe has it)" ;;
    stream4) # (session 22, call 7) the streamed GEMM's planner from call 6 (splits of 8/6/4/2 for grids under a quarter of the SMs, 64 k where that allows more, shallow rings for split or multi-wave grids) and its routing (5–32 rows, default on): GPU checks, decode off / on
          run stream-tests 150 node --test --test-concurrency=1 --test-name-pattern='streamed' dist/test/gpu/decode-gemv.test.js
          for f in 0 1; do run decode-stream$f 60 env FUSEFORMER_STREAM_GEMM=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/decode-stream$f.json"; done ;;
    stream3) # (session 22, call 6) data for the streamed GEMM's planner: Llama's planned plans at 8–64 rows beside cuBLASLt (LM head included), every plan at GPT-2's products at 32 rows (its b32 decode was 0.343 ms/token with call 2's 8-warp plans, 0.381 with call 5's)
          run stream-planned 150 node dist/bench/skinny-sweep.js --kernels stream --stream-planned --rows 8,16,32,64 --shapes 'QKV,out,gate/up (gated),down,LM head' --json "$out/stream-planned.json"
          run stream-gpt2 200 node dist/bench/skinny-sweep.js --model gpt2 --kernels stream --rows 32 --shapes 'QKV,out,fc,proj,LM head' --json "$out/stream-gpt2.json" ;;
    stream2) # (session 22, call 5) the streamed GEMM on tensor-map TMA with the planner from call 4's sweep (4 warps, splits of 4 or none): its GPU checks again, the planned plans at 8–64 rows beside cuBLASLt (LM head included), decode off / on
          run stream-tests 200 node --test --test-concurrency=1 --test-name-pattern='streamed' dist/test/gpu/decode-gemv.test.js
          run stream-planned 200 node dist/bench/skinny-sweep.js --kernels stream --stream-planned --rows 8,16,32,64 --shapes 'QKV,out,gate/up (gated),down,LM head' --json "$out/stream-planned.json"
          for f in 0 1; do run decode-stream$f 100 env FUSEFORMER_STREAM_GEMM=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --json "$out/decode-stream$f.json"; done ;;
    skinny-recheck) # (session 22) the skinny and streamed GEMMs' GPU checks after their output code was shared (gemm-skinny.ts skinnyOutputCode)
          run skinny-recheck 240 node --test --test-concurrency=1 --test-name-pattern='skinny' dist/test/gpu/decode-gemv.test.js ;;
    stream-probe) # (session 22, call 3) why the streamed skinny GEMM streams at 8–22% of copy (call 2): its plans at the down product beside two timing probes each — the ring without the math, and each stage's weights as one contiguous bulk copy instead of BN row segments
          say "stream-probe: the probes and the 1-D row copies they timed were removed after session 22 (commit 36c445b has them)" ;;
    bf16-pairs) # (for session 22; built after session 21's last device call, never run) the bf16 activation forward reading x and bias a 32-bit pair at a time (FUSEFORMER_BF16_PAIRS=1, opt-in): op checks, then bench:kernels' forward cases off / on, two rounds; default it on if BERT bf16 erf gains (37.4 µs; ≤ 36.8 is 85% of a same-size copy)
          run bf16-pairs-ops 150 env FUSEFORMER_BF16_PAIRS=1 FUSEFORMER_TEST_OPS=biasActivationDropout node --test --test-concurrency=1 dist/test/gpu/ops.test.js
          for round in 1 2; do
            for f in 0 1; do run bf16-pairs$f-$round 90 env FUSEFORMER_BF16_PAIRS=$f node dist/bench/kernels.js --only 'bf16 biasActivationDropout' --no-torch --json "$out/bf16-pairs$f-$round.json"; done
          done ;;
    kernels-s21) # (session 21) the erf GELU forward's new default (two rows a thread, the second staged; 1/√2 folded into A&S's p): its op checks, then the whole bench:kernels with PyTorch eager (issue #2's table)
          run kernels-s21-ops 150 env FUSEFORMER_TEST_OPS=biasActivationDropout node --test --test-concurrency=1 dist/test/gpu/ops.test.js
          run kernels-s21 420 node dist/bench/kernels.js --json "$out/kernels-s21.json" ;;
    act-rows) # (session 21) the activation forward with 2 / 4 rows' loads a thread in flight (FUSEFORMER_ACTIVATION_ROWS, opt-in): op checks, then bench:kernels' forward cases at 1 / 2 / 4, two rounds (issue #2: erf-GELU + dropout forward at BERT size, 73% of a same-size copy)
          for r in ${ACT_ROWS_CHECK:-2 4}; do run act-rows-ops$r 120 env FUSEFORMER_ACTIVATION_ROWS=$r FUSEFORMER_TEST_OPS=biasActivationDropout node --test --test-concurrency=1 dist/test/gpu/ops.test.js; done
          for round in 1 2; do
            for r in ${ACT_ROWS:-1 2 4}; do run act-rows$r-$round 90 env FUSEFORMER_ACTIVATION_ROWS=$r node dist/bench/kernels.js --only 'biasActivationDropout(' --no-torch --json "$out/act-rows$r-$round.json"; done
          done ;;
    gemv-preload-ab) # (session 21 call 2) only gemv-preload's decode A/B, two rounds (call 1's passed --quant bf16, which decode.js refuses: bf16 rows are always there)
          for round in 1 2; do
            for f in 0 1; do run decode-gemv-preload$f-$round 90 env FUSEFORMER_NORM_GEMV_PRELOAD=$f node dist/bench/decode.js --no-torch --reps 3 --models gpt2,llama --quant int4-head,int8-head --json "$out/decode-gemv-preload$f-$round.json"; done
          done ;;
    gemv-sweep-mma) run gemv-sweep-mma 300 node dist/bench/gemv-sweep.js --rows 32 --mma-only --json "$out/gemv-sweep-mma.json" ;;
    gemv-sweep) run gemv-sweep 420 node dist/bench/gemv-sweep.js --json "$out/gemv-sweep.json" ;;
    quant-tests) run quant-tests 300 node --test --test-concurrency=1 dist/test/gpu/quant.test.js dist/test/gpu/infer-quantized.test.js ;;
    decode-quant-gated) # the gated INT4 MLP op (the default since session 18) beside the two-op MLP, one process each
          run decode-int4 150 env FUSEFORMER_INT4_GATED=0 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4,int4-head --json /tmp/decode-int4.json
          run decode-int4-gated 150 env FUSEFORMER_INT4_GATED=1 node dist/bench/decode.js --no-torch --reps 3 --models llama --quant int4,int4-head --json /tmp/decode-int4-gated.json ;;
    serve-tests) run serve-tests 300 node --test --test-concurrency=1 dist/test/gpu/gemm.test.js dist/test/gpu/serve-engine.test.js dist/test/gpu/decode-gemv.test.js ;;
    profile-train) # issue #9's GPT-2 124M training-step profile (and BERT's, LightSeq attention's), kept as profiles for the rooflines (bench/results/profile/*.profile.json)
          run profile-train 300 node dist/bench/profile-check.js --only train --out /tmp/fuseformer-profile-train
          cp /tmp/fuseformer-profile-train/check.json "$out/profile-check-train.json" 2>/dev/null
          for m in gpt2-124M bert-base gpt2-124M-lightseq-attention; do cp /tmp/fuseformer-profile-train/$m/profile.json "$out/$m-train.profile.json" 2>/dev/null; done ;;
    profile) run profile 200 node dist/bench/profile-check.js --only decode --out /tmp/fuseformer-profile
             cp /tmp/fuseformer-profile/check.json "$out/profile-check.json" 2>/dev/null
             for m in gpt2-124M llama-1.2B; do cp /tmp/fuseformer-profile/$m-decode/profile.json "$out/profile-$m.json" 2>/dev/null; done ;;
    profile-fast) run profile-fast 200 env FUSEFORMER_DECODE_GEMV=1 FUSEFORMER_PDL=1 node dist/bench/profile-check.js --only decode --out /tmp/fuseformer-profile-fast
             for m in gpt2-124M llama-1.2B; do cp /tmp/fuseformer-profile-fast/$m-decode/profile.json "$out/profile-fast-$m.json" 2>/dev/null; done ;;
    gemv) run gemv 200 node --test --test-concurrency=1 dist/test/gpu/decode-gemv.test.js dist/test/gpu/runtime.test.js ;;
    decode-modes) run decode-modes 200 node dist/bench/decode.js --no-torch --reps 3 --modes default,cublas,gemv --json "$out/decode-modes.json" ;;
    tokenizer) run tokenizer 120 node dist/bench/tokenizer-parity.js --json "$out/tokenizer-parity.json" ;;
    infer) run infer 300 node dist/bench/infer-parity.js --json "$out/infer-parity.json" ;;
    decode) run decode 300 node dist/bench/decode.js --no-torch --reps 3 --quant int4,int8,int4-head,int8-head --modes default,cublas --json "$out/decode.json" ;;
    beam) run beam 300 node dist/bench/beam-parity.js --json "$out/beam-parity.json" ;;
    serve) run serve 400 node dist/bench/serve-speed.js --json "$out/serve-speed.json" ;;
    serve-eager) run serve-eager 180 node dist/bench/serve-speed.js --no-graphs --concurrency 16,64 --no-torch --no-prefix --json "$out/serve-speed-eager.json" ;;
    *) echo "unknown step '$step' (int8-norm gemv-sweep tests infer-tests profile-shapes decode-hf decode-hf-static decode-norm infer-ops decode-fusions decode-quant spec profile-serve serve-cpuprof profile-quant serve-tests gemv-sweep quant-tests decode-int4 decode-int8 decode-quant-gated mma-tests decode-mma serve-mma gemv profile profile-fast tokenizer infer decode decode-modes beam serve serve-eager)"; exit 2 ;;
  esac
done
say "summary"
# A file cut by its bound has no totals: its results so far (each test is reported as it ends) are counted instead.
for f in "$out"/suite-*.log; do [ -f "$f" ] || continue
  totals=$(grep -E '^# (pass|fail|skipped) ' "$f" | tr '\n' ' ')
  [ -z "$totals" ] && totals="cut: $(grep -cE '^ *ok ' "$f") ok, $(grep -cE '^ *not ok ' "$f") not ok so far (last: $(grep -E '^ *(not )?ok ' "$f" | tail -1 | sed -E 's/^ *//' | cut -c1-80)) "
  echo "$(basename "$f" .log): $totals$(tail -1 "$f")"
  grep -E '^ *not ok ' "$f" | head -5
done
[ -f "$out/py-modules.log" ] && grep -vE '^\[' "$out/py-modules.log" | head -6
[ -f "$out/check-tokenizer.log" ] && grep -E '^\||MISMATCH|skipped|check:tokenizer|Marian|model-directory|refused' "$out/check-tokenizer.log" | head -40
[ -f "$out/cli-smoke.log" ] && grep -E '^\| |^failures' "$out/cli-smoke.log"
[ -f "$out/engines.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/engines.log" | head -12
[ -f "$out/serve-load.log" ] && tail -12 "$out/serve-load.log"
for f in "$out"/argmax-b4-*.log; do [ -f "$f" ] && { echo "$(basename "$f" .log):"; grep -E '^\| (GPT|Llama)' "$f"; }; done
[ -f "$out/quant-tests.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/quant-tests.log" | head -20
[ -f "$out/int4-sweep.log" ] && grep -E '^\|' "$out/int4-sweep.log"
for f in decode-int4-stream decode-int4-mma decode-int4-fold decode-int4-nofold decode-int4-plan decode-int8-narrow decode-int8-wide decode-int4-rows; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^\| (GPT|Llama)' "$out/$f.log"; }; done
[ -f "$out/infer-parity.log" ] && grep -E 'FAIL|teacher|failed' "$out/infer-parity.log" | head -12
[ -f "$out/spec-tests.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/spec-tests.log" | head -20
for f in train-target train-draft train-medium train-medium-draft; do [ -f "$out/$f.log" ] && grep -E 'eval|tokens/s|loss' "$out/$f.log" | tail -3; done
[ -f "$out/prefetch-tests.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/prefetch-tests.log" | head -20
for f in decode-prefetch decode-noprefetch; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^\| (GPT|Llama)' "$out/$f.log"; }; done
for f in serve-prefetch serve-noprefetch; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^C ' "$out/$f.log"; }; done
[ -f "$out/beam-speed.log" ] && tail -25 "$out/beam-speed.log"
[ -f "$out/quant-bench.log" ] && tail -25 "$out/quant-bench.log"
[ -f "$out/quant-quality.log" ] && tail -15 "$out/quant-quality.log"
[ -f "$out/skinny-tests.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/skinny-tests.log" | head -20
for f in decode-noskinny decode-skinny; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^\| (GPT|Llama)' "$out/$f.log"; }; done
[ -f "$out/profile-skinny-b32.log" ] && grep -E 'graph replay\)|op launches|^\| (gemm|normLinear|gated)' "$out/profile-skinny-b32.log" | head -14
for c in 256 128 64; do [ -f "$out/decode-split$c.log" ] && { echo "decode-split$c:"; grep -E '^\| (GPT|Llama)' "$out/decode-split$c.log"; }; done
for f in multi-tests multi-serve-tests; do [ -f "$out/$f.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/$f.log" | head -10; done
for f in serve-steps1 serve-steps4 serve-steps8 serve-steps4-async; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^C ' "$out/$f.log"; }; done
[ -f "$out/async-tests.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/async-tests.log" | head -20
for f in serve-async serve-sync; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^C ' "$out/$f.log"; }; done
for f in sampled-serve-tests picks-serve-tests picks-spec-tests; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^# (pass|fail)|^not ok' "$out/$f.log" | head -10; }; done
for f in profile-gpt2-b1 profile-llama-b1; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E 'graph replay\)|op launches|^\| [a-zA-Z]' "$out/$f.log" | head -16; }; done
[ -f "$out/spec-medium-hf.log" ] && grep -E '^\| ' "$out/spec-medium-hf.log" | cut -d'|' -f3-14
[ -f "$out/spec-trained-hf.log" ] && grep -E '^\| ' "$out/spec-trained-hf.log" | cut -d'|' -f3-14
[ -f "$out/skinny-sweep.log" ] && grep -E '^\|' "$out/skinny-sweep.log"
[ -f "$out/spec-sample-tests.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/spec-sample-tests.log" | head -20
for f in spec-sample-1 spec-sample-0; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^\| ' "$out/$f.log" | cut -d'|' -f3-11; }; done
for f in spec-async spec-sync; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^\| ' "$out/$f.log" | cut -d'|' -f3-11; }; done
[ -f "$out/serve-skinny.log" ] && grep -E '^C ' "$out/serve-skinny.log"
[ -f "$out/split-tests.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/split-tests.log" | head -20
[ -f "$out/tune-tests.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/tune-tests.log" | head -20
for f in decode-tuned decode-untuned decode-default decode-pipe; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^\| (GPT|Llama)' "$out/$f.log"; }; done
[ -f "$out/serve-tuned.log" ] && grep -E '^C |^\|' "$out/serve-tuned.log" | tail -14
[ -f "$out/pipelined-tests.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/pipelined-tests.log" | head -20
for t in 0 1; do [ -f "$out/profile-pipelined$t.log" ] && { echo "profile-pipelined$t:"; grep -iE 'decodeAttention|step|total' "$out/profile-pipelined$t.log" | head -8; }; done
[ -f "$out/serve-pipelined.log" ] && grep -E '^C |^\|' "$out/serve-pipelined.log" | tail -12
[ -f "$out/varlen-tests.log" ] && { grep -E '^# (pass|fail)' "$out/varlen-tests.log"; grep -E '^not ok' "$out/varlen-tests.log" | head; }
for f in varlen-bench-on varlen-bench-off; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^\|' "$out/$f.log" | tail -4; }; done
[ -f "$out/infer-tests.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/infer-tests.log" | head -20
[ -f "$out/decode-hf.log" ] && grep -E '^\|' "$out/decode-hf.log"
[ -f "$out/decode-hf-static.log" ] && grep -E "^\\|" "$out/decode-hf-static.log"
[ -f "$out/infer-ops.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/infer-ops.log" | head -20
for f in decode-base decode-norm decode-cluster decode-both; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^\| (GPT|Llama)' "$out/$f.log"; }; done
[ -f "$out/decode-quant.log" ] && grep -E '^\|' "$out/decode-quant.log"
for f in spec-trained spec-trained-medium spec-ours-gpt2 spec-ours-llama spec-gpt2 spec-llama; do [ -f "$out/$f.log" ] && tail -15 "$out/$f.log"; done
[ -f "$out/serve-cpuprof-top.txt" ] && head -30 "$out/serve-cpuprof-top.txt"
for f in profile-serve-decode profile-serve-mixed profile-serve-decode256 profile-int4 profile-int8; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E 'graph replay\)|op launches|^\| (decodeAttention|normLinear|gemm|flash|qkvRope)' "$out/$f.log" | head -12; }; done
[ -f "$out/serve-tests.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/serve-tests.log" | head -20
[ -f "$out/gemv-sweep.log" ] && grep -E '^\|' "$out/gemv-sweep.log"
[ -f "$out/quant-tests.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/quant-tests.log" | head -20
[ -f "$out/mma-tests.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/mma-tests.log" | head -20
for f in decode-cublas-b32 decode-mma-b32; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^\| (GPT|Llama)' "$out/$f.log"; }; done
[ -f "$out/serve-mma.log" ] && grep -E '^C ' "$out/serve-mma.log"
[ -f "$out/int8-norm-tests.log" ] && grep -E '^# (pass|fail)|not ok' "$out/int8-norm-tests.log" | head -20
for f in decode-quant-s8 decode-int8-off decode-int4-mma decode-int4-simt decode-int8-base decode-int8-norm; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^\| (GPT|Llama)' "$out/$f.log"; }; done
for f in decode-int4 decode-int4-gated; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^\| Llama' "$out/$f.log"; }; done
[ -f "$out/gemv.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/gemv.log" | head -20
[ -f "$out/profile-fast.log" ] && grep -E '^(PASS|FAIL)' "$out/profile-fast.log"
[ -f "$out/decode-modes.log" ] && grep -E '^\|' "$out/decode-modes.log"
[ -f "$out/tests.log" ] && grep -E '^# (pass|fail)|^not ok' "$out/tests.log" | head -20
[ -f "$out/profile.log" ] && grep -E '^(PASS|FAIL)' "$out/profile.log"
[ -f "$out/profile-train.log" ] && grep -E '^(PASS|FAIL)' "$out/profile-train.log"
[ -f "$out/tokenizer.log" ] && tail -8 "$out/tokenizer.log"
[ -f "$out/infer.log" ] && grep -E 'FAIL|parity:' "$out/infer.log"
[ -f "$out/decode.log" ] && grep -E '^\|' "$out/decode.log"
[ -f "$out/beam.log" ] && tail -12 "$out/beam.log"
[ -f "$out/serve.log" ] && tail -20 "$out/serve.log"
[ -f "$out/serve-eager.log" ] && tail -12 "$out/serve-eager.log"
[ -f "$out/varlen-tests.log" ] && { grep -E '^# (pass|fail)' "$out/varlen-tests.log"; grep -E '^not ok' "$out/varlen-tests.log" | head; }
for f in varlen-bench-on varlen-bench-off; do [ -f "$out/$f.log" ] && { echo "$f:"; grep -E '^\|' "$out/$f.log" | tail -4; }; done
[ -f "$out/infer-tests.log" ] && { grep -E '^# (pass|fail)' "$out/infer-tests.log"; grep -E '^not ok' "$out/infer-tests.log" | head; }
[ -f "$out/infer-parity.log" ] && grep -E 'FAIL|parity' "$out/infer-parity.log" | head
[ -f "$out/long-context.log" ] && grep -E '^\|' "$out/long-context.log" | head -12
[ -f "$out/train-bench.log" ] && grep -E '^\|' "$out/train-bench.log" | head -30
[ -f "$out/train-parity.log" ] && tail -15 "$out/train-parity.log"
[ -f "$out/train-tests.log" ] && { grep -E '^# (pass|fail)' "$out/train-tests.log"; grep -E '^not ok' "$out/train-tests.log" | head; }
[ -f "$out/wgmma-tests.log" ] && { grep -E '^# (pass|fail)' "$out/wgmma-tests.log"; grep -E '^not ok|rel err' "$out/wgmma-tests.log" | head -20; }
[ -f "$out/attention-bench.log" ] && grep -E '^\|' "$out/attention-bench.log" | head -80
for f in "$out"/profile-b*-t*.log "$out"/profile-b100-[0-9]*.log; do [ -f "$f" ] && echo "$(basename $f .log): $(grep -E "^serving step" $f | head -1)"; done
# GPU_PENDING_TAR=1: everything in one archive (the device tool brings back only a few files a call).
if [ "${GPU_PENDING_TAR:-0}" = 1 ]; then
  (cd "$out" && files=$(ls -A | grep -v '^results.tgz$') && [ -n "$files" ] && tar czf results.tgz $files && rm -f $files)
fi
exit 0
