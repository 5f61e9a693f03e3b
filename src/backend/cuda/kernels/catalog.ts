// Every kernel family with a representative set of specs. The CPU test suite compiles each source
// with `nvcc -cubin -arch=sm_90` (sm_90a for wgmma kernels), so a generator that emits invalid CUDA C fails CI, not a GPU run.

import type { KernelSource } from '../runtime/kernel.js';
import { catalog as adamCatalog } from './adam.js';
import { catalog as beamAttentionCatalog } from './beam-attention.js';
import { catalog as beamTopKCatalog } from './beam-topk.js';
import { catalog as attentionCatalog } from './attention.js';
import { catalog as crossEntropyCatalog } from './cross-entropy.js';
import { catalog as vocabShardCatalog } from './vocab-shard.js';
import { catalog as dropoutCatalog } from './dropout.js';
import { catalog as elementwiseCatalog } from './elementwise.js';
import { catalog as embeddingCatalog } from './embedding.js';
import { catalog as fillCopyCatalog } from './fill-copy.js';
import { catalog as flashBackwardCatalog } from './flash-backward.js';
import { catalog as flashBackwardWgmmaCatalog } from './flash-backward-wgmma.js';
import { catalog as flashForwardCatalog } from './flash-forward.js';
import { catalog as flashForwardWgmmaCatalog } from './flash-forward-wgmma.js';
import { catalog as layerNormCatalog } from './layernorm.js';
import { catalog as permuteCatalog } from './permute.js';
import { catalog as randomCatalog } from './random.js';
import { catalog as softmaxCatalog } from './softmax.js';
import { catalog as sumSquaresCatalog } from './sum-squares.js';
import { catalog as quantInt4Catalog } from './quant-int4.js';
import { catalog as quantInt8Catalog } from './quant-int8.js';
import { catalog as embedTokensCatalog } from './embed-tokens.js';
import { catalog as qkvRopeAppendCatalog } from './qkv-rope-append.js';
import { catalog as decodeAttentionCatalog } from './decode-attention.js';
import { catalog as residualNormCatalog } from './residual-norm.js';
import { catalog as gatedActivationCatalog } from './gated-activation.js';
import { catalog as gemvCatalog } from './gemv.js';
import { catalog as mlpGemvCatalog } from './gemv-mlp.js';
import { catalog as mmaGemvCatalog } from './gemv-mma.js';
import { catalog as skinnyGemmCatalog } from './gemm-skinny.js';
import { catalog as streamGemmCatalog } from './gemm-stream.js';
import { catalog as int8GemvCatalog } from './gemv-int8.js';
import { catalog as int4MmaGemvCatalog } from './gemv-int4-mma.js';
import { catalog as sampleTokensCatalog } from './sample-tokens.js';
import { catalog as tanhActivationCatalog } from './tanh-activation.js';
import { catalog as decodeAdvanceCatalog } from './decode-advance.js';
import { catalog as feedTokensCatalog } from './feed-tokens.js';
import { catalog as gatherColumnsCatalog } from './gather-columns.js';
import { catalog as gptqRoundBlockCatalog } from './gptq-round-block.js';
import { catalog as int4ClipGroupsCatalog } from './int4-clip-groups.js';
import { catalog as scaleColumnsCatalog } from './scale-columns.js';
import { catalog as maskLogitsCatalog } from './mask-logits.js';

export interface CatalogEntry extends KernelSource {
  family: string;
}

export function kernelCatalog(): CatalogEntry[] {
  const families: [string, () => KernelSource[]][] = [
    ['elementwise', elementwiseCatalog],
    ['layernorm', layerNormCatalog],
    ['softmax', softmaxCatalog],
    ['cross-entropy', crossEntropyCatalog],
    ['vocab-shard', vocabShardCatalog],
    ['embedding', embeddingCatalog],
    ['fill-copy', fillCopyCatalog],
    ['adam', adamCatalog],
    ['random', randomCatalog],
    ['permute', permuteCatalog],
    ['sum-squares', sumSquaresCatalog],
    ['dropout', dropoutCatalog],
    ['attention', attentionCatalog],
    ['quant-int4', quantInt4Catalog],
    ['quant-int8', quantInt8Catalog],
    ['beam-topk', beamTopKCatalog],
    ['beam-attention', beamAttentionCatalog],
    ['flash-backward', flashBackwardCatalog],
    ['flash-backward-wgmma', flashBackwardWgmmaCatalog],
    ['flash-forward', flashForwardCatalog],
    ['flash-forward-wgmma', flashForwardWgmmaCatalog],
    ['embed-tokens', embedTokensCatalog],
    ['qkv-rope-append', qkvRopeAppendCatalog],
    ['decode-attention', decodeAttentionCatalog],
    ['residual-norm', residualNormCatalog],
    ['gated-activation', gatedActivationCatalog],
    ['gemv', gemvCatalog],
    ['gemv-mlp', mlpGemvCatalog],
    ['gemv-mma', mmaGemvCatalog],
    ['gemm-skinny', skinnyGemmCatalog],
    ['gemm-stream', streamGemmCatalog],
    ['gemv-int8', int8GemvCatalog],
    ['gemv-int4-mma', int4MmaGemvCatalog],
    ['sample-tokens', sampleTokensCatalog],
    ['tanh-activation', tanhActivationCatalog],
    ['decode-advance', decodeAdvanceCatalog],
    ['feed-tokens', feedTokensCatalog],
    ['gather-columns', gatherColumnsCatalog],
    ['gptq-round-block', gptqRoundBlockCatalog],
    ['int4-clip-groups', int4ClipGroupsCatalog],
    ['scale-columns', scaleColumnsCatalog],
    ['mask-logits', maskLogitsCatalog],
  ];
  return families.flatMap(([family, entries]) => entries().map((k) => ({ family, ...k })));
}
