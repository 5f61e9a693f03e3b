// The CUDA backend: the Backend contract met by generated kernels (kernels/*), cuBLASLt (gemm.ts) and
// the runtime (runtime/*). Every op is queued on the runtime's current stream; only download() and
// synchronize() wait for the GPU.

import { envFlag, envSwitch } from './env-switch.js';
import { appendDecodeAttentionParts, normLinearProduct } from '../backend.js';
import { Event } from './runtime/device.js';
import { byteSize, encodeFloats, isFloat, widenHalvesInPlace } from '../../dtype.js';
import type { DType, FloatDType } from '../../dtype.js';
import { ArgumentError, LayoutError, ShapeError } from '../../errors.js';
import type { HostArray, Tensor } from '../../tensor.js';
import { formatShape, shapeNumel } from '../../tensor.js';
import type {
  AdamWArgs, Backend, BatchedGemmArgs, BiasActivationDropoutArgs, BiasActivationDropoutBackwardArgs,
  BiasDropoutResidualArgs, BiasDropoutResidualBackwardArgs, BiasQkvSplitArgs, BiasQkvSplitBackwardArgs,
  CrossEntropyBackwardArgs, CrossEntropyForwardArgs, EmbeddingBackwardArgs, EmbeddingForwardArgs, GemmArgs,
  Graph, LayerNormBackwardArgs, LayerNormForwardArgs, MemoryStats, PendingDownload, Permute0213Args, RandomFillArgs, RmsNormBackwardArgs,
  RmsNormForwardArgs, SoftmaxBackwardArgs, SoftmaxForwardArgs, SumSquaresArgs, DropoutOpArgs, TimeMarker,
  FlashAttentionBackwardArgs, FlashAttentionForwardArgs } from '../backend.js';
import type {
  AppendDecodeAttentionArgs, DecodeAdvanceArgs, FeedTokensArgs, GatherColumnsArgs, MaskLogitsArgs, BiasLogitsArgs, GptqRoundBlockArgs, Int4ClipGroupsArgs, ScaleColumnsArgs, DecodeAttentionArgs, EmbedTokensArgs, GatedActivationArgs, GatedLinearArgs, NormLinearArgs, NormMlpArgs, QkvRopeAppendArgs, ResidualNormArgs, SampleTokensArgs, SpeculativeSampleArgs, TanhActivationArgs, TokenProbabilitiesArgs,
} from '../backend.js';
import { decodeAttention, fusedAppendDecodeAttention, headsPerBlock as attentionHeadsPerBlock, PROJECTION_MAX_BYTES, projectionChunks, projectionFits } from './kernels/decode-attention.js';
import { embedTokens } from './kernels/embed-tokens.js';
import { gatedActivation } from './kernels/gated-activation.js';
import { qkvRopeAppend } from './kernels/qkv-rope-append.js';
import { residualNorm } from './kernels/residual-norm.js';
import { sampleTokens, speculativeSample, tokenProbabilities } from './kernels/sample-tokens.js';
import { tanhActivation } from './kernels/tanh-activation.js';
import { decodeAdvance } from './kernels/decode-advance.js';
import { feedTokens } from './kernels/feed-tokens.js';
import { gatherColumns } from './kernels/gather-columns.js';
import { biasLogits, maskLogits } from './kernels/mask-logits.js';
import { gptqRoundBlock } from './kernels/gptq-round-block.js';
import { int4ClipGroups } from './kernels/int4-clip-groups.js';
import { scaleColumns } from './kernels/scale-columns.js';
import type { BeamAdvanceArgs, BeamCrossAttentionArgs, BeamSelfAttentionArgs, BeamTopKArgs } from '../backend.js';

import { beamCrossAttention, beamSelfAttention } from './kernels/beam-attention.js';
import { beamAdvance, beamTopK } from './kernels/beam-topk.js';
import type { Int4LinearArgs, Int4QuantizeWeightsArgs, Int8DequantizeArgs, Int8GemmArgs, Int8LinearArgs, Int8QuantizeRowsArgs } from '../backend.js';
import { checkInt8Linear } from '../op-checks/quant.js';
import type { Int8GemvLaunch } from './kernels/gemv-int8.js';
import { int8GemvApplies, int8NormGemvApplies, launchInt8Gemv } from './kernels/gemv-int8.js';
import { devicePtr } from './kernels/row-kernels.js';
import { Int8GemmRunner } from './int8-gemm.js';
import { int4Linear, int4NormLinear, int4QuantizeWeights } from './kernels/quant-int4.js';
import { int8Dequantize, int8QuantizeRows } from './kernels/quant-int8.js';
import { GemmRunner } from './gemm.js';
import { adamW } from './kernels/adam.js';
import { flashAttentionBackward, flashAttentionForward } from './kernels/attention.js';
import { crossEntropyBackward, crossEntropyForward } from './kernels/cross-entropy.js';
import type { VocabShardCrossEntropyBackwardArgs, VocabShardLossArgs, VocabShardMaxArgs, VocabShardSumsArgs } from '../backend.js';
import { vocabShardCrossEntropyBackward, vocabShardLoss, vocabShardMax, vocabShardSums } from './kernels/vocab-shard.js';
import * as elementwise from './kernels/elementwise.js';
import { embeddingBackward, embeddingForward } from './kernels/embedding.js';
import { copy, fill } from './kernels/fill-copy.js';
import { layerNormBackward, layerNormForward, rmsNormBackward, rmsNormForward } from './kernels/layernorm.js';
import { dropout } from './kernels/dropout.js';
import { permute0213 } from './kernels/permute.js';
import { randomFill } from './kernels/random.js';
import { softmaxBackward, softmaxForward } from './kernels/softmax.js';
import { sumSquares } from './kernels/sum-squares.js';
import { GEMV_MAX_ROWS, gatedGemvApplies, gemvApplies, launchGatedGemv, launchGemv, launchNormGemv, normGemvApplies, prologueNorm, QUANT_NORM_PROLOGUE_AUTO_MAX_K } from './kernels/gemv.js';
import { fusedMlpFromEnv, launchMlpGemv, mlpGemvApplies, mlpGemvTakes } from './kernels/gemv-mlp.js';
import { launchMmaGatedGemv, launchMmaGemv, MMA_GEMV_MAX_ROWS, mmaGatedGemvApplies, mmaGemvApplies } from './kernels/gemv-mma.js';
import { launchSkinnyGated, launchSkinnyGemm, SKINNY_MAX_ROWS, skinnyGatedApplies, skinnyGemmApplies } from './kernels/gemm-skinny.js';
import { launchStreamGated, launchStreamGemm, STREAM_ROUTED_MAX_ROWS, streamGatedApplies, streamGemmApplies } from './kernels/gemm-stream.js';
import type { NormGemvLinear } from './kernels/gemv.js';
import { checkGatedLinear, checkNormMlp, checkResidualNorm } from '../op-checks/index.js';
import { OpCheck } from '../validate.js';
import { checkGemm } from './gemm-plan.js';
import { CudaArena } from './runtime/arena.js';
import { CudaRuntime } from './runtime/runtime.js';
import { CudaTensor } from './runtime/tensor.js';

/** cuBLASLt's scratch: 32 MiB lets it pick every Hopper kernel it has (split-K, stream-K). */
const GEMM_WORKSPACE_BYTES = 32 << 20;

/** FUSEFORMER_FUSED_MLP, read once (CudaBackend.fusedMlp / fusedMlpMinRows). */
const FUSED_MLP_ENV = fusedMlpFromEnv(process.env['FUSEFORMER_FUSED_MLP']);

export class CudaBackend implements Backend {
  readonly name = 'cuda' as const;
  readonly description: string;
  readonly gemmRunner: GemmRunner;
  /**
   * GEMMs of at most 4 rows with [N, K] weights (small-batch decode steps) on fuseformer's own kernel
   * (kernels/gemv.ts) instead of cuBLASLt; default on (FUSEFORMER_DECODE_GEMV=0 turns it off). Takes
   * effect for launches and captures made after it is set.
   */
  decodeGemv = process.env['FUSEFORMER_DECODE_GEMV'] !== '0';
  /** GEMMs run on the GEMV kernel so far (decodeGemv). */
  gemvLaunches = 0;
  /**
   * normLinear of ≤ 4 rows (with decodeGemv) as one GEMV kernel with the residual norm in its prologue
   * (kernels/gemv.ts) instead of residualNorm + the GEMV; default on (FUSEFORMER_NORM_GEMV=0 turns it
   * off; measured 2026-12-01: GPT-2 b1 0.255 → 0.243 ms/token, Llama 1.2B unchanged). Takes effect for
   * launches and captures made after it is set.
   */
  normGemv = process.env['FUSEFORMER_NORM_GEMV'] !== '0';
  /**
   * normMlp of fusedMlpMinRows–4 rows (with decodeGemv) as one kernel (kernels/gemv-mlp.ts), which fusesMlp offers
   * the decode forward in place of normLinear + the down GEMV. Default on from 2 rows (FUSED_MLP_MIN_ROWS_DEFAULT
   * says what was measured); FUSEFORMER_FUSED_MLP=1 from one row, =0 off. Its proj adds partial sums by f32
   * atomics in an order that varies from run to run, so 16-bit decode steps of those rows are not bit-for-bit
   * reproducible (=0 makes them so). Takes effect for forwards launched or captured after it is set.
   */
  fusedMlp = FUSED_MLP_ENV.on;
  /** The fewest rows fusesMlp fuses (see fusedMlp). */
  fusedMlpMinRows = FUSED_MLP_ENV.minRows;
  /** normMlp calls run so far. */
  mlpGemvLaunches = 0;
  /**
   * decodeAttention's `project` offered to the decode forward (projectsAttention) at 1–4 rows, for models whose
   * O weight a block reads is at most PROJECTION_MAX_BYTES (GPT-2's 98 KB a head, 6 KB in 16 output chunks): the O
   * GEMV becomes the attention kernel's epilogue. Opt-in (FUSEFORMER_FUSED_O=1): the one-chunk form was slower where
   * measured (2026-12-05, H100, GPT-2 ms/token with the fused MLP: b1 0.217 → 0.275, b4 0.295 → 0.355 — the
   * attention kernel 2.8 → 11.6 µs a layer, its 12 blocks each streaming 98 KB of W_O, against the O GEMV's 4.2);
   * the chunked form (projectionChunks, session 59) spreads W_O over 8–16 times the blocks and is not yet measured.
   * The forward takes it with the fused MLP or alone (projectedAttentionOptions). Takes effect for forwards launched or captured after it is set.
   */
  fusedAttentionProjection = process.env['FUSEFORMER_FUSED_O'] === '1';
  /**
   * GemmArgs.argmax offered to the decode forward (argmaxInProduct) at 1–4 rows: the LM head's GEMV packs each row's
   * greedy pick as it writes the logits, and sampleTokens reads that word instead of the row for greedy rows
   * without a repetition penalty (kernels/gemv.ts GemvSpec.argmax; W8A8 and INT4 heads in their GEMVs too). Default on
   * (FUSEFORMER_HEAD_ARGMAX=0 turns it off): measured 2026-12-05 on an H100, ms/token off → on, two rounds — GPT-2 b1
   * 0.208 / 0.207 → 0.203 / 0.203, b4 0.294 → 0.290; Llama 1.2B b1 0.967 → 0.961, b4 1.126 → 1.121; Llama INT4 + head b1
   * 0.502 → 0.493, INT8 + head b1 0.607 → 0.601 (GPT-2's sampler 7.97 → 3.74 µs a step, its head 21.2 → 22.3).
   * Takes effect for forwards launched or captured after it is set.
   */
  headArgmax = envFlag('FUSEFORMER_HEAD_ARGMAX', process.env['FUSEFORMER_HEAD_ARGMAX'], true);
  /** appendDecodeAttention calls run as one kernel so far. */
  fusedAppendLaunches = 0;
  /** normLinear calls run as the fused kernel so far. */
  normGemvLaunches = 0;
  /**
   * GEMMs (and gatedLinear) of 5–64 rows (gated: 32) with [N, K] bf16/f16 weights on the tensor-core
   * GEMV (kernels/gemv-mma.ts) instead of cuBLASLt: a batch of decode rows streaming the weights once.
   * Opt-in (FUSEFORMER_MMA_GEMV=1; needs decodeGemv): correct on the H200 but slower than cuBLASLt at
   * batch 32 (2026-12-01: Llama 1.2B 1.304 against 1.108 ms/token). On Llama's QKV and O projections alone
   * it is slower too, even launched programmatically after the latency-bound kernels before them
   * (session 18, docs/perf.md: b32 1.161 against 1.103 ms/token).
   */
  mmaGemv = process.env['FUSEFORMER_MMA_GEMV'] === '1';
  /** GEMMs run on the mma GEMV so far. */
  mmaGemvLaunches = 0;
  /**
   * GEMMs and gatedLinear of 5–64 rows with [N, K] bf16/f16 weights on the skinny GEMM
   * (kernels/gemm-skinny.ts: the weights streamed through a cp.async pipeline, x staged in shared memory
   * once per block, split-K within a cluster) instead of cuBLASLt (or the mma GEMV). Opt-in
   * (FUSEFORMER_SKINNY_GEMM=1; needs decodeGemv): correct on the H200 but slower than cuBLASLt at 32 rows
   * (session 11: Llama 1.2B b32 1.262 against 1.109 ms/token; docs/perf.md).
   */
  skinnyGemm = process.env['FUSEFORMER_SKINNY_GEMM'] === '1';
  /** GEMMs run on the skinny GEMM so far. */
  skinnyGemmLaunches = 0;
  /**
   * GEMMs and gatedLinear of 5–32 rows with [N, K] bf16/f16 weights (K a multiple of 64) on the streamed
   * skinny GEMM (kernels/gemm-stream.ts: a producer lane streaming the weights by tensor-map TMA into an
   * mbarrier ring, mma.sync consumers, split-K within a cluster) instead of cuBLASLt: batched decode
   * steps and serving's decode buckets. Default on where decodeGemv is (FUSEFORMER_STREAM_GEMM=0 turns
   * it off): on the H200 (session 22) as fast as or faster than cuBLASLt on every Llama 1.2B and GPT-2
   * product at 8–32 rows (gate/up 18.1 against 20.6 µs at 32 rows, GPT-2's LM head 22.8–24.1 against 111).
   * Taken only where the runtime has tensor maps (Hopper or newer, a CUDA 12 driver); elsewhere cuBLASLt.
   */
  streamGemm = process.env['FUSEFORMER_STREAM_GEMM'] !== '0';
  /** GEMMs run on the streamed skinny GEMM so far. */
  streamGemmLaunches = 0;
  /**
   * int8Linear of 1–4 rows as one W8A8 GEMV kernel (kernels/gemv-int8.ts: activations quantized in its
   * prologue, dp4a products, the dequantizing epilogue) instead of quantize → cuBLASLt int8 GEMM →
   * dequantize; default on (FUSEFORMER_INT8_GEMV=0 turns it off). Takes effect for launches and captures
   * made after it is set.
   */
  int8Gemv = process.env['FUSEFORMER_INT8_GEMV'] !== '0';
  /** int8Linear calls run as the GEMV so far. */
  int8GemvLaunches = 0;
  /**
   * normLinear of an int8Linear (≤ 4 rows) as one W8A8 GEMV with the residual norm in its prologue
   * (kernels/gemv-int8.ts with gemv.ts's norm prologue) instead of residualNorm + the GEMV; needs int8Gemv.
   * 'auto' (default) takes it for rows of at most QUANT_NORM_PROLOGUE_AUTO_MAX_K: every block re-reads
   * and re-normalises the rows, which the saved launch pays for at GPT-2's K = 768 (H200, session 9: INT8
   * + head b1 0.235 → 0.224 ms/token) and, since the weight loads go ahead of the wait, at Llama's 2048
   * (session 31: 0.525 → 0.512). FUSEFORMER_INT8_NORM=1 takes it at every K, =0 never.
   */
  int8NormGemv: boolean | 'auto' = envSwitch(process.env['FUSEFORMER_INT8_NORM']);
  /**
   * int4Linear of 1–32 rows of 16-bit x, groups a multiple of 128, on the tensor-core INT4 GEMV
   * (kernels/gemv-int4-mma.ts) instead of the SIMT GEMV (≤ 8 rows) or the tiled GEMM; default on
   * (FUSEFORMER_INT4_MMA=0 turns it off). Takes effect for launches and captures made after it is set.
   */
  int4MmaGemv = process.env['FUSEFORMER_INT4_MMA'] !== '0';
  /**
   * normLinear of an int4Linear (≤ 4 rows) as the tensor-core INT4 GEMV with the residual norm in its
   * prologue (kernels/gemv-int4-mma.ts with gemv.ts's norm prologue) instead of residualNorm + the GEMV;
   * needs int4MmaGemv. 'auto' (default) takes it for rows of at most QUANT_NORM_PROLOGUE_AUTO_MAX_K, as
   * int8NormGemv: every block re-forms the norm after its wait, which pays at GPT-2's K = 768 (H200,
   * session 20: INT4 + head b1 0.225 → 0.214 ms/token) and, since session 30's build put 24–37 weight
   * loads ahead of the wait, at Llama's 2048 (session 31: 0.469 → 0.460). FUSEFORMER_INT4_NORM=1
   * takes it at every K, =0 never. Takes effect for launches and captures made after it is set.
   */
  int4NormGemv: boolean | 'auto' = envSwitch(process.env['FUSEFORMER_INT4_NORM']);

  setGemmTuning(enabled: boolean): boolean {
    const previous = this.gemmRunner.tuning;
    this.gemmRunner.tuning = enabled;
    return previous;
  }

  private constructor(readonly runtime: CudaRuntime, runners?: { gemm: GemmRunner; int8Gemm: Int8GemmRunner }) {
    const p = runtime.device.properties;
    this.description = `${p.name} (${p.arch}, ${p.multiProcessorCount} SMs, ${(p.totalMemoryBytes / 2 ** 30).toFixed(0)} GiB)`;
    this.gemmRunner = runners?.gemm ?? new GemmRunner(runtime.stream.handle, runtime.alloc(GEMM_WORKSPACE_BYTES).ptr, GEMM_WORKSPACE_BYTES);
    this.int8Runner = runners?.int8Gemm;
  }

  static create(ordinal = 0): CudaBackend {
    return new CudaBackend(CudaRuntime.create(ordinal));
  }

  /**
   * A backend on a runtime and GEMM runners (float, int8) made elsewhere: the kernel emulator's (src/testing/emulator), which
   * runs these kernels on the CPU where no GPU is.
   */
  static onRuntime(runtime: CudaRuntime, runners: { gemm: GemmRunner; int8Gemm: Int8GemmRunner }): CudaBackend {
    return new CudaBackend(runtime, runners);
  }

  // --- memory and data movement ---------------------------------------------------------------------

  empty(shape: readonly number[], dtype: DType): CudaTensor {
    const bytes = shapeNumel(shape) * byteSize(dtype);
    const block = this.runtime.alloc(bytes);
    return new CudaTensor(block.ptr, shape, dtype, block);
  }

  fromArray(values: HostArray | readonly number[], shape: readonly number[], dtype: DType): CudaTensor {
    const t = this.empty(shape, dtype);
    this.upload(t, values);
    return t;
  }

  upload(t: Tensor, values: HostArray | readonly number[]): void {
    const dst = this.own('upload', t);
    if (values.length !== dst.numel) {
      throw new ShapeError(`upload: ${values.length} values given for a tensor of shape ${formatShape(dst.shape)} (${dst.numel} elements)`);
    }
    this.runtime.uploadBytes(dst.ptr, encodeHost(values, dst.dtype));
  }

  download(t: Tensor): HostArray {
    const src = this.own('download', t);
    return hostArrayFrom(src.dtype, src.numel, (bytes) => this.runtime.downloadInto(src.ptr, bytes));
  }

  downloadLater(t: Tensor): PendingDownload {
    const src = this.own('downloadLater', t);
    // The page-locked bytes go straight into the result (the f16 / bf16 widening in place, as download()).
    return this.runtime.downloadLater(src.ptr, src.bytes, (memory) => hostArrayFrom(src.dtype, src.numel, (bytes) => bytes.set(memory)));
  }

  fill(t: Tensor, value: number): void {
    fill(this.runtime, t, value);
  }

  copy(src: Tensor, dst: Tensor): void {
    const s = this.own('copy', src), d = this.own('copy', dst);
    if (s.numel !== d.numel) {
      throw new ShapeError(`copy: 'src' ${formatShape(s.shape)} has ${s.numel} elements but 'dst' ${formatShape(d.shape)} has ${d.numel}`);
    }
    if (s.dtype === d.dtype) this.runtime.copyDeviceToDevice(d.ptr, s.ptr, s.bytes);
    else copy(this.runtime, s, d);
  }

  view(t: Tensor, offset: number, shape: readonly number[]): CudaTensor {
    const base = this.own('view', t);
    const numel = shapeNumel(shape);
    if (!Number.isInteger(offset) || offset < 0 || offset + numel > base.numel) {
      throw new ShapeError(`view: ${formatShape(shape)} at offset ${offset} does not fit in a tensor of ${base.numel} elements`);
    }
    return new CudaTensor(base.ptr + BigInt(offset * byteSize(base.dtype)), shape, base.dtype, null);
  }

  free(t: Tensor): void {
    const owned = this.own('free', t, { allowNonContiguous: true });
    if (owned.block) this.runtime.release(owned.block);
  }

  createArena(bytes: number): CudaArena {
    return new CudaArena(bytes, this.runtime);
  }

  memoryStats(): MemoryStats {
    return this.runtime.memoryStats();
  }

  resetPeakMemory(): void {
    this.runtime.resetPeakMemory();
  }

  synchronize(): void {
    this.runtime.synchronize();
  }

  captureGraph(fn: () => void): Graph {
    return this.runtime.captureGraph(fn);
  }

  mark(): TimeMarker {
    const event = this.runtime.createEvent({ timing: true });
    // Inside a capture the marker becomes an event node of the graph, recorded on every replay.
    if (this.runtime.isCapturing) event.recordInCapture(this.runtime.stream);
    else event.record(this.runtime.stream);
    const marker: TimeMarker & { event: typeof event } = {
      event,
      elapsedSince(earlier: TimeMarker): number {
        event.synchronize();
        return Event.elapsedMs((earlier as typeof marker).event, event);
      },
      dispose(): void { event.destroy(); },
    };
    return marker;
  }

  // --- ops --------------------------------------------------------------------------------------------

  gemm(args: GemmArgs): void {
    if (args.argmax) {
      this.argmaxGemm(args);
      return;
    }
    // Only a few-row, [N, K]-weight product is checked here (the cuBLASLt path checks its own calls).
    const rows = args.a.shape.length === 2 ? args.a.shape[0]! : Infinity;
    const fewRows = Math.max(GEMV_MAX_ROWS, this.mmaGemv ? MMA_GEMV_MAX_ROWS : 0, this.skinnyGemm ? SKINNY_MAX_ROWS : 0, this.streamGemm ? STREAM_ROUTED_MAX_ROWS : 0);
    if (this.decodeGemv && args.transB === true && !args.transA && rows <= fewRows) {
      const checked = checkGemm(args);
      if (rows <= GEMV_MAX_ROWS && gemvApplies(checked)) {
        launchGemv(this.runtime, checked);
        this.gemvLaunches++;
        return;
      }
      if (this.streamGemm && this.runtime.tensorMaps && streamGemmApplies(checked)) {
        launchStreamGemm(this.runtime, checked);
        this.streamGemmLaunches++;
        return;
      }
      if (this.skinnyGemm && skinnyGemmApplies(checked)) {
        launchSkinnyGemm(this.runtime, checked);
        this.skinnyGemmLaunches++;
        return;
      }
      if (this.mmaGemv && mmaGemvApplies(checked)) {
        launchMmaGemv(this.runtime, checked);
        this.mmaGemvLaunches++;
        return;
      }
    }
    this.gemmRunner.gemm(args);
  }
  batchedGemm(args: BatchedGemmArgs): void { this.gemmRunner.batchedGemm(args); }
  biasDropoutResidual(args: BiasDropoutResidualArgs): void { elementwise.biasDropoutResidual(this.runtime, args); }
  biasDropoutResidualBackward(args: BiasDropoutResidualBackwardArgs): void { elementwise.biasDropoutResidualBackward(this.runtime, args); }
  biasActivationDropout(args: BiasActivationDropoutArgs): void { elementwise.biasActivationDropout(this.runtime, args); }
  biasActivationDropoutBackward(args: BiasActivationDropoutBackwardArgs): void { elementwise.biasActivationDropoutBackward(this.runtime, args); }
  biasQkvSplit(args: BiasQkvSplitArgs): void { elementwise.biasQkvSplit(this.runtime, args); }
  biasQkvSplitBackward(args: BiasQkvSplitBackwardArgs): void { elementwise.biasQkvSplitBackward(this.runtime, args); }
  layerNormForward(args: LayerNormForwardArgs): void { layerNormForward(this.runtime, args); }
  layerNormBackward(args: LayerNormBackwardArgs): void { layerNormBackward(this.runtime, args); }
  rmsNormForward(args: RmsNormForwardArgs): void { rmsNormForward(this.runtime, args); }
  rmsNormBackward(args: RmsNormBackwardArgs): void { rmsNormBackward(this.runtime, args); }
  softmaxForward(args: SoftmaxForwardArgs): void { softmaxForward(this.runtime, args); }
  softmaxBackward(args: SoftmaxBackwardArgs): void { softmaxBackward(this.runtime, args); }
  flashAttentionForward(args: FlashAttentionForwardArgs): void { flashAttentionForward(this.runtime, args); }
  flashAttentionBackward(args: FlashAttentionBackwardArgs): void { flashAttentionBackward(this.runtime, args); }
  crossEntropyForward(args: CrossEntropyForwardArgs): void { crossEntropyForward(this.runtime, args); }
  crossEntropyBackward(args: CrossEntropyBackwardArgs): void { crossEntropyBackward(this.runtime, args); }
  vocabShardMax(args: VocabShardMaxArgs): void { vocabShardMax(this.runtime, args); }
  vocabShardSums(args: VocabShardSumsArgs): void { vocabShardSums(this.runtime, args); }
  vocabShardLoss(args: VocabShardLossArgs): void { vocabShardLoss(this.runtime, args); }
  vocabShardCrossEntropyBackward(args: VocabShardCrossEntropyBackwardArgs): void { vocabShardCrossEntropyBackward(this.runtime, args); }
  embeddingForward(args: EmbeddingForwardArgs): void { embeddingForward(this.runtime, args); }
  embeddingBackward(args: EmbeddingBackwardArgs): void { embeddingBackward(this.runtime, args); }
  permute0213(args: Permute0213Args): void { permute0213(this.runtime, args); }
  dropout(args: DropoutOpArgs): void { dropout(this.runtime, args); }
  sumSquares(args: SumSquaresArgs): void { sumSquares(this.runtime, args); }
  adamW(args: AdamWArgs): void { adamW(this.runtime, args); }
  randomFill(args: RandomFillArgs): void { randomFill(this.runtime, args); }
  int4Linear(args: Int4LinearArgs): void { int4Linear(this.runtime, args, 'auto', this.int4MmaGemv); }
  int4QuantizeWeights(args: Int4QuantizeWeightsArgs): void { int4QuantizeWeights(this.runtime, args); }
  int8QuantizeRows(args: Int8QuantizeRowsArgs): void { int8QuantizeRows(this.runtime, args); }
  int8Dequantize(args: Int8DequantizeArgs): void { int8Dequantize(this.runtime, args); }
  /** cuBLASLt's int8 GEMM, made on first use; it shares the float GEMMs' workspace (both run in stream order). */
  private int8Runner: Int8GemmRunner | undefined;
  int8Gemm(args: Int8GemmArgs): void {
    this.int8Runner ??= new Int8GemmRunner(this.runtime.stream.handle, this.gemmRunner.workspace, this.gemmRunner.workspaceBytes);
    this.int8Runner.gemm(args);
  }
  /**
   * The W8A8 GEMV (kernels/gemv-int8.ts) for 1–4 rows when int8Gemv is on; else the three ops through
   * args.scratch (or the runtime's scratch), then gatedActivation when gated.
   */
  int8Linear(args: Int8LinearArgs): void {
    const c = new OpCheck('int8Linear', 'cuda');
    const a = checkInt8Linear(c, args);
    if (a.M === 0 || a.N === 0) return;
    const dtype = a.x.dtype as FloatDType;
    const gemv: Int8GemvLaunch = {
      dtype, M: a.M, N: a.N, K: a.K, gated: a.gated, activation: a.activation ?? 'none',
      x: devicePtr(c, 'x', a.x), qweight: devicePtr(c, 'qweight', a.qweight), scales: devicePtr(c, 'scales', a.scales),
      bias: a.bias ? devicePtr(c, 'bias', a.bias) : 0n, out: devicePtr(c, 'out', a.out),
      ...(a.argmax ? { argmax: { out: devicePtr(c, 'argmax.out', a.argmax.out), classes: a.argmax.classes } } : {}),
    };
    if (a.argmax && !(this.int8Gemv && int8GemvApplies(gemv))) {
      c.fail(`'argmax' is formed by the W8A8 GEMV only: 1–4 rows, K a multiple of 16, 16-byte aligned x and qweight${this.int8Gemv ? '' : ' (the W8A8 GEMV is off)'}; got M = ${a.M}, K = ${a.K}`);
    }
    if (this.int8Gemv && int8GemvApplies(gemv)) {
      launchInt8Gemv(this.runtime, gemv);
      this.int8GemvLaunches++;
      return;
    }
    const { M, N, K, x } = a;
    let s = a.scratch;
    if (!s) {
      // xq | rowScales | acc | up, each 256-byte aligned in one scratch block.
      const align = (bytes: number) => Math.ceil(bytes / 256) * 256;
      const sizes = [M * K, 4 * M, 4 * M * N, a.gated ? M * N * byteSize(dtype) : 0].map(align);
      const base = this.runtime.scratch(sizes.reduce((p, q) => p + q, 0));
      const at = (i: number) => base + BigInt(sizes.slice(0, i).reduce((p, q) => p + q, 0));
      s = {
        xq: new CudaTensor(at(0), [M, K], 'i8', null), rowScales: new CudaTensor(at(1), [M], 'f32', null), acc: new CudaTensor(at(2), [M, N], 'i32', null),
        ...(a.gated ? { up: new CudaTensor(at(3), [M, N], dtype, null) } : {}),
      };
    }
    this.int8QuantizeRows({ x, out: s.xq, scales: s.rowScales });
    this.int8Gemm({ a: s.xq, b: a.qweight, out: s.acc });
    const epilogue = { ...(a.bias ? { bias: a.bias } : {}), ...(!a.gated && a.activation ? { activation: a.activation } : {}) };
    this.int8Dequantize({ acc: s.acc, rowScales: s.rowScales, colScales: a.scales, out: a.gated ? s.up! : a.out, ...epilogue });
    if (a.gated) gatedActivation(this.runtime, { x: s.up!, out: a.out, activation: a.activation! });
  }
  beamTopK(args: BeamTopKArgs): void { beamTopK(this.runtime, args); }
  beamAdvance(args: BeamAdvanceArgs): void { beamAdvance(this.runtime, args); }
  beamSelfAttention(args: BeamSelfAttentionArgs): void { beamSelfAttention(this.runtime, args); }
  beamCrossAttention(args: BeamCrossAttentionArgs): void { beamCrossAttention(this.runtime, args); }
  embedTokens(args: EmbedTokensArgs): void { embedTokens(this.runtime, args); }
  qkvRopeAppend(args: QkvRopeAppendArgs): void { qkvRopeAppend(this.runtime, args); }
  decodeAttention(args: DecodeAttentionArgs): void { decodeAttention(this.runtime, args); }
  /** One kernel where decode attention's pipelined variant takes the rows (fusedAppendDecodeAttention); else the two ops. */
  appendDecodeAttention(args: AppendDecodeAttentionArgs): void {
    const parts = appendDecodeAttentionParts(new OpCheck('appendDecodeAttention', 'cuda'), args, (t, offset, shape) => this.view(t, offset, shape));
    if (fusedAppendDecodeAttention(this.runtime, parts)) {
      this.fusedAppendLaunches++;
      return;
    }
    this.qkvRopeAppend(parts.append);
    this.decodeAttention(parts.attention);
  }
  residualNorm(args: ResidualNormArgs): void { residualNorm(this.runtime, args); }
  gatedActivation(args: GatedActivationArgs): void { gatedActivation(this.runtime, args); }
  /** The gated GEMV (kernels/gemv.ts) for a few rows when decodeGemv is on; else cuBLASLt into the scratch, then gatedActivation. */
  gatedLinear(args: GatedLinearArgs): void {
    const checked = checkGatedLinear(new OpCheck('gatedLinear', 'cuda'), args);
    if (this.decodeGemv && gatedGemvApplies(checked)) {
      launchGatedGemv(this.runtime, checked);
      this.gemvLaunches++;
      return;
    }
    if (this.decodeGemv && this.streamGemm && this.runtime.tensorMaps && streamGatedApplies(checked)) {
      launchStreamGated(this.runtime, checked);
      this.streamGemmLaunches++;
      return;
    }
    if (this.decodeGemv && this.skinnyGemm && skinnyGatedApplies(checked)) {
      launchSkinnyGated(this.runtime, checked);
      this.skinnyGemmLaunches++;
      return;
    }
    if (this.decodeGemv && this.mmaGemv && mmaGatedGemvApplies(checked)) {
      launchMmaGatedGemv(this.runtime, checked);
      this.mmaGemvLaunches++;
      return;
    }
    this.gemm({ a: args.x, b: args.weight, out: args.up, transB: true, ...(args.bias ? { epilogue: 'bias' as const, bias: args.bias } : {}) });
    gatedActivation(this.runtime, { x: args.up, out: args.out, activation: args.activation });
  }
  /** One GEMV kernel with the norm in its prologue for a few rows (normGemv and decodeGemv on); else residualNorm, then gemm or gatedLinear. */
  normLinear(args: NormLinearArgs): void {
    const product = normLinearProduct(args);
    if ('int8' in product) {
      if (!(this.int8NormGemv !== false && this.int8Gemv && this.launchInt8NormGemv(args, product.int8))) {
        this.residualNorm(args.norm);
        this.int8Linear(product.int8);
      }
      return;
    }
    if ('int4' in product) {
      if (this.int4NormGemv !== false && this.int4MmaGemv) {
        const c = new OpCheck('normLinear', 'cuda');
        if (int4NormLinear(this.runtime, c, checkResidualNorm(c, args.norm), product.int4, this.int4NormGemv)) {
          this.normGemvLaunches++;
          return;
        }
      }
      this.residualNorm(args.norm);
      this.int4Linear(product.int4);
      return;
    }
    if (this.normGemv && this.decodeGemv) {
      const norm = checkResidualNorm(new OpCheck('normLinear', 'cuda'), args.norm);
      const fused = normGemvApplies(norm) ? this.gemvProduct(product) : undefined;
      if (fused) {
        launchNormGemv(this.runtime, norm, fused);
        this.normGemvLaunches++;
        this.gemvLaunches++;
        return;
      }
    }
    this.residualNorm(args.norm);
    if ('gated' in product) this.gatedLinear(product.gated);
    else this.gemm(product.gemm);
  }

  /** Whether gemm forms argmax for these sizes (headArgmax and decodeGemv on, 1–4 rows of a float dtype, K whole 16-byte vectors). */
  argmaxInProduct(rows: number, dtype: DType, _N: number, K: number, weights: 'float' | 'int8' | 'int4' = 'float'): boolean {
    if (!this.headArgmax || rows < 1 || rows > GEMV_MAX_ROWS || !isFloat(dtype)) return false;
    if (weights === 'int8') return this.int8Gemv && K % 16 === 0;
    if (weights === 'int4') return this.int4MmaGemv && dtype !== 'f32';
    return weights === 'float' && this.decodeGemv && K % (16 / byteSize(dtype)) === 0;
  }

  /** A gemm with argmax: only the decode GEMV forms it (argmaxInProduct says when), so elsewhere a clear error. */
  private argmaxGemm(args: GemmArgs): void {
    const checked = checkGemm(args), p = checked.problem;
    if (!this.decodeGemv || !gemvApplies(checked) || p.M > GEMV_MAX_ROWS) {
      new OpCheck('gemm', 'cuda').fail(`'argmax' is formed by the decode GEMV only: 1–${GEMV_MAX_ROWS} rows, transB, a forward epilogue, K a multiple of ` +
        `16 bytes, 16-byte aligned operands${this.decodeGemv ? '' : ' (the decode GEMV is off: FUSEFORMER_DECODE_GEMV=0)'}; got M = ${p.M}, N = ${p.N}, K = ${p.K}, transB ${p.transB}, epilogue '${p.epilogue}'`);
    }
    launchGemv(this.runtime, checked);
    this.gemvLaunches++;
  }

  /** Whether normMlp of these sizes runs as its kernel (fusedMlp and decodeGemv on, fusedMlpMinRows rows or more, a shape the kernel takes). */
  fusesMlp(rows: number, dtype: DType, H: number, F: number): boolean {
    return this.fusedMlp && this.decodeGemv && rows >= this.fusedMlpMinRows && isFloat(dtype) && mlpGemvTakes(rows, dtype as FloatDType, H, F, this.runtime.multiProcessorCount);
  }

  /** Whether decode attention takes `project` for these sizes (fusedAttentionProjection, 1–4 rows, a block's O columns that fit). */
  projectsAttention(rows: number, dtype: DType, H: number, heads: number, kvHeads: number, headDim: number, weights: 'float' | 'int4' = 'float'): boolean {
    if (!this.fusedAttentionProjection || rows < 1 || rows > GEMV_MAX_ROWS || !isFloat(dtype) || kvHeads < 1 || heads % kvHeads !== 0) return false;
    const perBlock = attentionHeadsPerBlock(heads / kvHeads);
    const chunks = projectionChunks((heads / perBlock) * rows, H, this.runtime.multiProcessorCount, false);
    const int4 = weights === 'int4', bytesPerColumn = int4 ? 0.5 : byteSize(dtype);
    return projectionFits(dtype as FloatDType, headDim, perBlock, int4) && (H / chunks) * perBlock * headDim * bytesPerColumn <= PROJECTION_MAX_BYTES;
  }

  /** normMlp as one kernel; it has no unfused form on this backend (the forward asks fusesMlp first), so elsewhere a clear error. */
  normMlp(args: NormMlpArgs): void {
    const c = new OpCheck('normMlp', 'cuda'), checked = checkNormMlp(c, args);
    if (!mlpGemvApplies(checked, this.runtime.multiProcessorCount)) {
      c.fail(`runs as one kernel only: 1–${GEMV_MAX_ROWS} rows, 16-byte aligned operands, F a multiple of 8–64 features a block within the kernel's registers; got ${checked.rows} rows, H = ${checked.K}, F = ${checked.F}, dtype ${checked.norm.x.dtype}`);
    }
    launchMlpGemv(this.runtime, checked);
    this.mlpGemvLaunches++;
  }

  /** normLinear of an int8Linear as one W8A8 GEMV with the norm in its prologue, if the kernel takes it. */
  private launchInt8NormGemv(args: NormLinearArgs, product: Int8LinearArgs): boolean {
    const c = new OpCheck('normLinear', 'cuda');
    const norm = checkResidualNorm(c, args.norm);
    const a = checkInt8Linear(c, product);
    if (!normGemvApplies(norm) || norm.rows !== a.M || a.M === 0 || a.N === 0) return false;
    const ptr = (name: string, t: Tensor | undefined) => (t ? devicePtr(c, name, t) : 0n);
    const gemv: Int8GemvLaunch = {
      dtype: a.x.dtype as FloatDType, M: a.M, N: a.N, K: a.K, gated: a.gated, activation: a.activation ?? 'none',
      x: 0n, qweight: ptr('qweight', a.qweight), scales: ptr('scales', a.scales), bias: ptr('bias', a.bias), out: ptr('out', a.out),
    };
    if (!int8NormGemvApplies(gemv) || (this.int8NormGemv === 'auto' && a.K > QUANT_NORM_PROLOGUE_AUTO_MAX_K)) return false;
    launchInt8Gemv(this.runtime, gemv, undefined, {
      norm: prologueNorm('int8', norm, a.K),
      x: ptr('norm.x', norm.x), y: ptr('norm.y', norm.y), bias: ptr('norm.bias', norm.bias), gamma: ptr('norm.gamma', norm.gamma),
      beta: ptr('norm.beta', norm.beta), h: ptr('norm.out', norm.out), eps: norm.eps,
    });
    this.int8GemvLaunches++;
    this.normGemvLaunches++;
    return true;
  }

  /** The checked product for the fused GEMV, if the GEMV takes it. */
  private gemvProduct(product: ReturnType<typeof normLinearProduct>): NormGemvLinear | undefined {
    if ('int8' in product || 'int4' in product) return undefined; // normLinear takes those first
    if ('gated' in product) {
      const checked = checkGatedLinear(new OpCheck('normLinear', 'cuda'), product.gated);
      return gatedGemvApplies(checked) ? { kind: 'gated', checked } : undefined;
    }
    const checked = checkGemm(product.gemm);
    return gemvApplies(checked) ? { kind: 'gemm', checked } : undefined;
  }

  tanhActivation(args: TanhActivationArgs): void { tanhActivation(this.runtime, args); }
  sampleTokens(args: SampleTokensArgs): void { sampleTokens(this.runtime, args); }
  tokenProbabilities(args: TokenProbabilitiesArgs): void { tokenProbabilities(this.runtime, args); }
  speculativeSample(args: SpeculativeSampleArgs): void { speculativeSample(this.runtime, args); }
  decodeAdvance(args: DecodeAdvanceArgs): void { decodeAdvance(this.runtime, args); }
  feedTokens(args: FeedTokensArgs): void { feedTokens(this.runtime, args); }
  gatherColumns(args: GatherColumnsArgs): void { gatherColumns(this.runtime, args); }
  maskLogits(args: MaskLogitsArgs): void { maskLogits(this.runtime, args); }
  biasLogits(args: BiasLogitsArgs): void { biasLogits(this.runtime, args); }
  gptqRoundBlock(args: GptqRoundBlockArgs): void { gptqRoundBlock(this.runtime, args); }
  int4ClipGroups(args: Int4ClipGroupsArgs): void { int4ClipGroups(this.runtime, args); }
  scaleColumns(args: ScaleColumnsArgs): void { scaleColumns(this.runtime, args); }

  private own(op: string, t: Tensor, options: { allowNonContiguous?: boolean } = {}): CudaTensor {
    if (!(t instanceof CudaTensor)) {
      throw new LayoutError(`${op}: expected a cuda tensor, got a ${t.backend} tensor ${formatShape(t.shape)}`);
    }
    if (!options.allowNonContiguous && !t.isContiguous) {
      throw new LayoutError(`${op}: the tensor ${formatShape(t.shape)} is a non-contiguous view; make a contiguous copy first`);
    }
    return t;
  }
}

// --- host encoding -------------------------------------------------------------------------------------

/** Host values as `dtype`'s bytes (shared with the kernel emulator's memory, src/testing/emulator). */
export function encodeHost(values: HostArray | readonly number[], dtype: DType): Uint8Array {
  // Arrays already in the dtype's layout go as views of their bytes (uploadBytes stages them before it returns).
  if ((dtype === 'i32' && values instanceof Int32Array) || (dtype === 'f32' && values instanceof Float32Array)) {
    return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  }
  if (isFloat(dtype)) return encodeFloats(values, dtype);
  switch (dtype) {
    case 'i32': return new Uint8Array(Int32Array.from(values).buffer);
    case 'i8': return new Uint8Array(Int8Array.from(values).buffer);
    case 'u8': return Uint8Array.from(values);
  }
  throw new ArgumentError(`upload: unsupported dtype ${String(dtype)}`);
}

/**
 * The host array of n `dtype` values whose bytes `fill` writes into the Uint8Array it is given: f16 and
 * bf16 straight into the first half of the f32 result, then widened in place (no second buffer).
 */
export function hostArrayFrom(dtype: DType, n: number, fill: (bytes: Uint8Array) => void): HostArray {
  const bytes = n * byteSize(dtype), into = (out: Int32Array | Int8Array | Uint8Array | Float32Array) => {
    fill(new Uint8Array(out.buffer, 0, bytes));
    return out;
  };
  switch (dtype) {
    case 'f16': case 'bf16': {
      const buffer = new ArrayBuffer(4 * n);
      fill(new Uint8Array(buffer, 0, bytes));
      return widenHalvesInPlace(buffer, n, dtype);
    }
    case 'f32': return into(new Float32Array(n));
    case 'i32': return into(new Int32Array(n));
    case 'i8': return into(new Int8Array(n));
    case 'u8': return into(new Uint8Array(n));
  }
  throw new ArgumentError(`download: unsupported dtype ${String(dtype)}`);
}
