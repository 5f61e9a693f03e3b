// The CPU reference backend: every op of backend.ts in plain TypeScript, written for clarity, not
// speed. It defines the semantics the CUDA backend is tested against. Each op validates its
// arguments when called and then runs at once — or, inside captureGraph, is recorded for replay.

import type { DType } from '../../dtype.js';
import { DTYPES } from '../../dtype.js';
import { DTypeError, LayoutError } from '../../errors.js';
import type { HostArray, Tensor } from '../../tensor.js';
import { appendDecodeAttentionParts, normLinearProduct } from '../backend.js';
import type {
  AdamWArgs, Backend, BatchedGemmArgs, BiasActivationDropoutArgs, BiasActivationDropoutBackwardArgs,
  BiasDropoutResidualArgs, BiasDropoutResidualBackwardArgs, BiasQkvSplitArgs, BiasQkvSplitBackwardArgs,
  CrossEntropyBackwardArgs, CrossEntropyForwardArgs, EmbeddingBackwardArgs, EmbeddingForwardArgs, GemmArgs, Graph,
  LayerNormBackwardArgs, LayerNormForwardArgs, MemoryStats, PendingDownload, Permute0213Args, RandomFillArgs, RmsNormBackwardArgs, RmsNormForwardArgs,
  SoftmaxBackwardArgs, SoftmaxForwardArgs, SumSquaresArgs, DropoutOpArgs, TimeMarker,
  FlashAttentionBackwardArgs, FlashAttentionForwardArgs } from '../backend.js';
import type {
  AppendDecodeAttentionArgs, DecodeAdvanceArgs, FeedTokensArgs, GatherColumnsArgs, MaskLogitsArgs, BiasLogitsArgs, GptqRoundBlockArgs, Int4ClipGroupsArgs, ScaleColumnsArgs, DecodeAttentionArgs, EmbedTokensArgs, GatedActivationArgs, GatedLinearArgs, NormLinearArgs, NormMlpArgs, QkvRopeAppendArgs, ResidualNormArgs, SampleTokensArgs, SpeculativeSampleArgs, TanhActivationArgs, TokenProbabilitiesArgs,
} from '../backend.js';
import { prepareDecodeAttention } from './decode-attention.js';
import { prepareEmbedTokens } from './embed-tokens.js';
import { prepareGatedActivation } from './gated-activation.js';
import { checkGatedLinear } from '../op-checks/index.js';
import { CpuCheck } from './check.js';
import { prepareQkvRopeAppend } from './qkv-rope-append.js';
import { prepareResidualNorm } from './residual-norm.js';
import { prepareNormMlp } from './norm-mlp.js';
import { prepareSampleTokens, prepareSpeculativeSample, prepareTokenProbabilities } from './sample-tokens.js';
import { prepareTanhActivation } from './tanh-activation.js';
import { prepareDecodeAdvance } from './decode-advance.js';
import { prepareFeedTokens } from './feed-tokens.js';
import { prepareGatherColumns } from './gather-columns.js';
import { prepareMaskLogits } from './mask-logits.js';
import { prepareBiasLogits } from './bias-logits.js';
import { prepareGptqRoundBlock } from './gptq-round-block.js';
import { prepareInt4ClipGroups } from './int4-clip-groups.js';
import { prepareScaleColumns } from './scale-columns.js';
import type { BeamAdvanceArgs, BeamCrossAttentionArgs, BeamSelfAttentionArgs, BeamTopKArgs } from '../backend.js';

import { prepareBeamCrossAttention, prepareBeamSelfAttention } from './beam-attention.js';
import { prepareBeamAdvance, prepareBeamTopK } from './beam-topk.js';
import type { Int4LinearArgs, Int4QuantizeWeightsArgs, Int8DequantizeArgs, Int8GemmArgs, Int8LinearArgs, Int8QuantizeRowsArgs } from '../backend.js';
import { prepareInt4Linear, prepareInt4QuantizeWeights, prepareInt8Dequantize, prepareInt8Gemm, prepareInt8Linear, prepareInt8QuantizeRows } from './quant.js';
import { prepareAdamW } from './adam.js';
import { prepareFlashAttentionBackward, prepareFlashAttentionForward } from './attention.js';
import { CpuArena } from './arena.js';
import { prepareCrossEntropyBackward, prepareCrossEntropyForward } from './cross-entropy.js';
import type { VocabShardCrossEntropyBackwardArgs, VocabShardLossArgs, VocabShardMaxArgs, VocabShardSumsArgs } from '../backend.js';
import { prepareVocabShardCrossEntropyBackward, prepareVocabShardLoss, prepareVocabShardMax, prepareVocabShardSums } from './vocab-shard.js';
import { download, makeView, prepareCopy, prepareFill, prepareUpload } from './data.js';
import {
  prepareBiasActivationDropout, prepareBiasActivationDropoutBackward, prepareBiasDropoutResidual,
  prepareBiasDropoutResidualBackward, prepareBiasQkvSplit, prepareBiasQkvSplitBackward,
} from './elementwise.js';
import { prepareEmbeddingBackward, prepareEmbeddingForward } from './embedding.js';
import { prepareBatchedGemm, prepareGemm } from './gemm.js';
import { WorkQueue } from './graph.js';
import { prepareLayerNormBackward, prepareLayerNormForward, prepareRmsNormBackward, prepareRmsNormForward } from './layernorm.js';
import { MemoryTracker } from './memory.js';
import { prepareDropout } from './dropout.js';
import { preparePermute0213 } from './permute.js';
import { prepareRandomFill } from './random.js';
import { prepareSoftmaxBackward, prepareSoftmaxForward } from './softmax.js';
import { prepareSumSquares } from './sum-squares.js';
import { CpuTensor } from './tensor.js';

export { CpuArena } from './arena.js';
export { CpuTensor } from './tensor.js';

function checkDType(op: string, dtype: DType): void {
  if (!DTYPES.includes(dtype)) throw new DTypeError(`${op}: unknown dtype '${String(dtype)}': expected one of ${DTYPES.join(', ')}`);
}

export class CpuBackend implements Backend {
  readonly name = 'cpu' as const;
  readonly description = 'CPU (reference)';
  private readonly memory = new MemoryTracker();
  private readonly queue = new WorkQueue();

  // --- memory and data movement ----------------------------------------------------------------

  empty(shape: readonly number[], dtype: DType): CpuTensor {
    checkDType('empty', dtype);
    return this.memory.allocate(shape, dtype);
  }

  fromArray(values: HostArray | readonly number[], shape: readonly number[], dtype: DType): CpuTensor {
    checkDType('fromArray', dtype);
    const t = this.memory.allocate(shape, dtype);
    try {
      this.queue.issue(prepareUpload(t, values, 'fromArray'));
    } catch (error) {
      this.memory.free(t);
      throw error;
    }
    return t;
  }

  upload(t: Tensor, values: HostArray | readonly number[]): void {
    this.queue.issue(prepareUpload(t, values));
  }

  download(t: Tensor): HostArray {
    this.queue.refuseWhileCapturing('download');
    return download(t);
  }

  downloadLater(t: Tensor): PendingDownload {
    this.queue.refuseWhileCapturing('downloadLater');
    const values = download(t);
    return { wait: () => values, ready: () => true };
  }

  fill(t: Tensor, value: number): void {
    this.queue.issue(prepareFill(t, value));
  }

  copy(src: Tensor, dst: Tensor): void {
    this.queue.issue(prepareCopy(src, dst));
  }

  view(t: Tensor, offset: number, shape: readonly number[]): CpuTensor {
    return makeView(t, offset, shape);
  }

  free(t: Tensor): void {
    if (!(t instanceof CpuTensor)) throw new LayoutError(`free: 't' is a ${t.backend} tensor not made by the CPU backend`);
    this.memory.free(t);
  }

  createArena(bytes: number): CpuArena {
    return new CpuArena(bytes, this.memory);
  }

  memoryStats(): MemoryStats {
    return this.memory.stats();
  }

  resetPeakMemory(): void {
    this.memory.resetPeak();
  }

  synchronize(): void {
    this.queue.refuseWhileCapturing('synchronize');
  }

  mark(): TimeMarker {
    // CPU ops run when issued (outside a capture), so the host clock times them.
    const at = performance.now();
    const marker: TimeMarker & { at: number } = { at, elapsedSince: (earlier) => at - (earlier as typeof marker).at, dispose: () => {} };
    return marker;
  }

  captureGraph(fn: () => void): Graph {
    return this.queue.capture(fn);
  }

  // --- ops ---------------------------------------------------------------------------------------

  gemm(args: GemmArgs): void { this.queue.issue(prepareGemm(args)); }
  batchedGemm(args: BatchedGemmArgs): void { this.queue.issue(prepareBatchedGemm(args)); }
  biasDropoutResidual(args: BiasDropoutResidualArgs): void { this.queue.issue(prepareBiasDropoutResidual(args)); }
  biasDropoutResidualBackward(args: BiasDropoutResidualBackwardArgs): void { this.queue.issue(prepareBiasDropoutResidualBackward(args)); }
  biasActivationDropout(args: BiasActivationDropoutArgs): void { this.queue.issue(prepareBiasActivationDropout(args)); }
  biasActivationDropoutBackward(args: BiasActivationDropoutBackwardArgs): void { this.queue.issue(prepareBiasActivationDropoutBackward(args)); }
  biasQkvSplit(args: BiasQkvSplitArgs): void { this.queue.issue(prepareBiasQkvSplit(args)); }
  biasQkvSplitBackward(args: BiasQkvSplitBackwardArgs): void { this.queue.issue(prepareBiasQkvSplitBackward(args)); }
  layerNormForward(args: LayerNormForwardArgs): void { this.queue.issue(prepareLayerNormForward(args)); }
  layerNormBackward(args: LayerNormBackwardArgs): void { this.queue.issue(prepareLayerNormBackward(args)); }
  rmsNormForward(args: RmsNormForwardArgs): void { this.queue.issue(prepareRmsNormForward(args)); }
  rmsNormBackward(args: RmsNormBackwardArgs): void { this.queue.issue(prepareRmsNormBackward(args)); }
  softmaxForward(args: SoftmaxForwardArgs): void { this.queue.issue(prepareSoftmaxForward(args)); }
  softmaxBackward(args: SoftmaxBackwardArgs): void { this.queue.issue(prepareSoftmaxBackward(args)); }
  flashAttentionForward(args: FlashAttentionForwardArgs): void { this.queue.issue(prepareFlashAttentionForward(args)); }
  flashAttentionBackward(args: FlashAttentionBackwardArgs): void { this.queue.issue(prepareFlashAttentionBackward(args)); }
  crossEntropyForward(args: CrossEntropyForwardArgs): void { this.queue.issue(prepareCrossEntropyForward(args)); }
  crossEntropyBackward(args: CrossEntropyBackwardArgs): void { this.queue.issue(prepareCrossEntropyBackward(args)); }
  vocabShardMax(args: VocabShardMaxArgs): void { this.queue.issue(prepareVocabShardMax(args)); }
  vocabShardSums(args: VocabShardSumsArgs): void { this.queue.issue(prepareVocabShardSums(args)); }
  vocabShardLoss(args: VocabShardLossArgs): void { this.queue.issue(prepareVocabShardLoss(args)); }
  vocabShardCrossEntropyBackward(args: VocabShardCrossEntropyBackwardArgs): void { this.queue.issue(prepareVocabShardCrossEntropyBackward(args)); }
  embeddingForward(args: EmbeddingForwardArgs): void { this.queue.issue(prepareEmbeddingForward(args)); }
  embeddingBackward(args: EmbeddingBackwardArgs): void { this.queue.issue(prepareEmbeddingBackward(args)); }
  permute0213(args: Permute0213Args): void { this.queue.issue(preparePermute0213(args)); }
  dropout(args: DropoutOpArgs): void { this.queue.issue(prepareDropout(args)); }
  sumSquares(args: SumSquaresArgs): void { this.queue.issue(prepareSumSquares(args)); }
  adamW(args: AdamWArgs): void { this.queue.issue(prepareAdamW(args)); }
  randomFill(args: RandomFillArgs): void { this.queue.issue(prepareRandomFill(args)); }
  int4Linear(args: Int4LinearArgs): void { this.queue.issue(prepareInt4Linear(args)); }
  int4QuantizeWeights(args: Int4QuantizeWeightsArgs): void { this.queue.issue(prepareInt4QuantizeWeights(args)); }
  int8QuantizeRows(args: Int8QuantizeRowsArgs): void { this.queue.issue(prepareInt8QuantizeRows(args)); }
  int8Gemm(args: Int8GemmArgs): void { this.queue.issue(prepareInt8Gemm(args)); }
  int8Dequantize(args: Int8DequantizeArgs): void { this.queue.issue(prepareInt8Dequantize(args)); }
  int8Linear(args: Int8LinearArgs): void { this.queue.issue(prepareInt8Linear(args)); }
  beamTopK(args: BeamTopKArgs): void { this.queue.issue(prepareBeamTopK(args)); }
  beamAdvance(args: BeamAdvanceArgs): void { this.queue.issue(prepareBeamAdvance(args)); }
  beamSelfAttention(args: BeamSelfAttentionArgs): void { this.queue.issue(prepareBeamSelfAttention(args)); }
  beamCrossAttention(args: BeamCrossAttentionArgs): void { this.queue.issue(prepareBeamCrossAttention(args)); }
  embedTokens(args: EmbedTokensArgs): void { this.queue.issue(prepareEmbedTokens(args)); }
  qkvRopeAppend(args: QkvRopeAppendArgs): void { this.queue.issue(prepareQkvRopeAppend(args)); }
  decodeAttention(args: DecodeAttentionArgs): void { this.queue.issue(prepareDecodeAttention(args)); }
  /** qkvRopeAppend of the step's token, then decodeAttention with it as the fresh key (the contract's definition). */
  appendDecodeAttention(args: AppendDecodeAttentionArgs): void {
    const parts = appendDecodeAttentionParts(new CpuCheck('appendDecodeAttention'), args, (t, offset, shape) => this.view(t, offset, shape));
    this.qkvRopeAppend(parts.append);
    this.decodeAttention(parts.attention);
  }
  residualNorm(args: ResidualNormArgs): void { this.queue.issue(prepareResidualNorm(args)); }
  gatedActivation(args: GatedActivationArgs): void { this.queue.issue(prepareGatedActivation(args)); }
  /** The GEMM into the scratch, then gatedActivation (the contract's definition; up holds the product). */
  gatedLinear(args: GatedLinearArgs): void {
    checkGatedLinear(new CpuCheck('gatedLinear'), args);
    this.gemm({ a: args.x, b: args.weight, out: args.up, transB: true, ...(args.bias ? { epilogue: 'bias' as const, bias: args.bias } : {}) });
    this.gatedActivation({ x: args.up, out: args.out, activation: args.activation });
  }
  /** residualNorm, then the GEMM, gatedLinear, int8Linear or int4Linear of its output (the contract's definition). */
  normLinear(args: NormLinearArgs): void {
    this.residualNorm(args.norm);
    const product = normLinearProduct(args);
    if ('gated' in product) this.gatedLinear(product.gated);
    else if ('int8' in product) this.int8Linear(product.int8);
    else if ('int4' in product) this.int4Linear(product.int4);
    else this.gemm(product.gemm);
  }
  /** residualNorm, then the MLP of its output into the f32 accumulator (the contract's definition). */
  normMlp(args: NormMlpArgs): void {
    const mlp = prepareNormMlp(args);  // checked before anything runs
    this.residualNorm(args.norm);
    this.queue.issue(mlp);
  }
  tanhActivation(args: TanhActivationArgs): void { this.queue.issue(prepareTanhActivation(args)); }
  sampleTokens(args: SampleTokensArgs): void { this.queue.issue(prepareSampleTokens(args)); }
  tokenProbabilities(args: TokenProbabilitiesArgs): void { this.queue.issue(prepareTokenProbabilities(args)); }
  speculativeSample(args: SpeculativeSampleArgs): void { this.queue.issue(prepareSpeculativeSample(args)); }
  decodeAdvance(args: DecodeAdvanceArgs): void { this.queue.issue(prepareDecodeAdvance(args)); }
  feedTokens(args: FeedTokensArgs): void { this.queue.issue(prepareFeedTokens(args)); }
  gatherColumns(args: GatherColumnsArgs): void { this.queue.issue(prepareGatherColumns(args)); }
  maskLogits(args: MaskLogitsArgs): void { this.queue.issue(prepareMaskLogits(args)); }
  biasLogits(args: BiasLogitsArgs): void { this.queue.issue(prepareBiasLogits(args)); }
  gptqRoundBlock(args: GptqRoundBlockArgs): void { this.queue.issue(prepareGptqRoundBlock(args)); }
  int4ClipGroups(args: Int4ClipGroupsArgs): void { this.queue.issue(prepareInt4ClipGroups(args)); }
  scaleColumns(args: ScaleColumnsArgs): void { this.queue.issue(prepareScaleColumns(args)); }
  /** A cache hint: checked, then nothing to do on the host. */
}
