// GPU suites run on the kernel emulator in `npm test`: their CudaBackend (test/gpu/device.ts) is the emulated
// one, so the CUDA paths they drive are held to the CPU reference without a GPU —
//   the engines: infer-engine (decode against the CPU engine), serve-engine (continuous batching against
//   one-at-a-time decoding, pipelined steps, preemption), speculative, beam (HARS, beamAdvance, a Marian);
//   the fused MLP at 2–4 rows, the default since session 40, in every GPT-2 step of them;
//   training: gpt2-train, models-train, bert (full steps on the fused kernels, the GEMMs on the CPU backend);
//   and graph, paged-attention, vocab-shard, sum-squares (offsets past 2³¹ bytes), head-argmax (the
//   LM head's greedy picks in the 16-bit and W8A8 GEMVs); decoder-embed and decoder-rerank (the Qwen3 embedding and
//   reranker fixtures against sentence-transformers through packed passes and the shared prefix).
// Not here: the op tables (infer-ops, train-ops in this folder run them case by case), the quantized suites
// (their TMA GEMM), multi-GPU and timing suites.
// Each test file runs in its own process, so setting the switch before the suites are imported is enough.
// Skips where the emulator cannot compile (no g++ or CUDA headers: device.ts's gpuSkip says so).

process.env['FUSEFORMER_TEST_EMULATE'] = '1';
for (const suite of [
  'infer-engine', 'serve-engine', 'speculative', 'beam',
  'gpt2-train', 'models-train', 'bert',
  'graph', 'paged-attention', 'vocab-shard', 'sum-squares', 'head-argmax',
  'decoder-embed', 'decoder-rerank',
]) {
  await import(`../../gpu/${suite}.test.js`);
}
