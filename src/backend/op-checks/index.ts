// Per-op argument checks shared by the backends: each takes the backend's OpCheck (which decides
// what a valid tensor is on that backend) and returns the op's tensors and sizes, so the CPU and CUDA
// implementations reject exactly the same calls with the same messages and hold no copies of them.
// What only one backend can check stays with it: checks that read tensor data (a target or token
// outside its range, on the CPU) and a kernel's own limits (the largest row a CUDA kernel handles).

export { checkAdamW } from './adam.js';
export { checkFlashAttentionBackward, checkFlashAttentionForward } from './attention.js';
export { checkArenaBytes, checkArenaView } from './arena.js';
export { checkCrossEntropyBackward, checkCrossEntropyForward } from './cross-entropy.js';
export {
  ACTIVATIONS, checkActivation, checkBiasActivationDropout, checkBiasActivationDropoutBackward, checkBiasDropoutResidual,
  checkBiasDropoutResidualBackward, checkBiasQkvSplit, checkBiasQkvSplitBackward,
} from './elementwise.js';
export type { QkvLayout } from './elementwise.js';
export { checkEmbeddingBackward, checkEmbeddingForward } from './embedding.js';
export { checkVocabShardCrossEntropyBackward, checkVocabShardLoss, checkVocabShardMax, checkVocabShardSums } from './vocab-shard.js';
export { checkLayerNormBackward, checkLayerNormForward, checkRmsNormBackward, checkRmsNormForward } from './norm.js';
export type { CheckedNormBackward, CheckedNormForward } from './norm.js';
export { checkDropout } from './dropout.js';
export { checkPermute0213 } from './permute.js';
export { checkSoftmaxBackward, checkSoftmaxForward } from './softmax.js';
export { checkSumSquares } from './sum-squares.js';
export { checkEmbedTokens } from './embed-tokens.js';
export { checkQkvRopeAppend } from './qkv-rope-append.js';
export { checkDecodeAttention } from './decode-attention.js';
export { checkResidualNorm } from './residual-norm.js';
export { checkNormMlp } from './norm-mlp.js';
export { checkGatedActivation } from './gated-activation.js';
export { checkGatedLinear } from './gated-linear.js';
export { checkTanhActivation } from './tanh-activation.js';
export { checkGatherColumns } from './gather-columns.js';
export { checkGptqRoundBlock } from './gptq-round-block.js';
export { checkInt4ClipGroups, INT4_CLIP_MAX_GROUP } from './int4-clip-groups.js';
export { checkScaleColumns } from './scale-columns.js';
export { checkMaskLogits } from './mask-logits.js';
export { checkBiasLogits } from './bias-logits.js';
export { checkRowArgmax, checkSampleTokens, checkSpeculativeSample, checkTokenProbabilities, SAMPLING_PARAMS } from './sample-tokens.js';
export { checkDecodeAdvance } from './decode-advance.js';
export { checkFeedTokens } from './feed-tokens.js';
export { checkBeamAdvance, checkBeamCrossAttention, checkBeamSelfAttention, checkBeamTopK } from './beam.js';
