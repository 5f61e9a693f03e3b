// The GPU suites of the engines (test/gpu/infer-engine, serve-engine, speculative, beam) run on the kernel
// emulator in `npm test`: their CudaBackend (test/gpu/device.ts) is the emulated one, so the engines' CUDA
// paths — the kernels each step routes to (the fused MLP at 2–4 rows among them), graph capture and replay,
// the paged cache, preemption, speculative rounds, beam search — are held to the CPU engine and to
// one-at-a-time decoding without a GPU.
// Each test file runs in its own process, so setting the switch before the suites are imported is enough.
// Skips where the emulator cannot compile (no g++ or CUDA headers: device.ts's gpuSkip says so).

process.env['FUSEFORMER_TEST_EMULATE'] = '1';
await import('../../gpu/infer-engine.test.js');
await import('../../gpu/serve-engine.test.js');
await import('../../gpu/speculative.test.js');
await import('../../gpu/beam.test.js');
