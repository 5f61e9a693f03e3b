// Every kernel family with a representative set of specs. The CPU test suite compiles each source
// with `nvcc -cubin -arch=sm_90`, so a generator that emits invalid CUDA C fails CI, not a GPU run.

import type { KernelSource } from '../runtime/kernel.js';
import { catalog as adamCatalog } from './adam.js';
import { catalog as attentionCatalog } from './attention.js';
import { catalog as crossEntropyCatalog } from './cross-entropy.js';
import { catalog as dropoutCatalog } from './dropout.js';
import { catalog as elementwiseCatalog } from './elementwise.js';
import { catalog as embeddingCatalog } from './embedding.js';
import { catalog as fillCopyCatalog } from './fill-copy.js';
import { catalog as flashBackwardCatalog } from './flash-backward.js';
import { catalog as flashForwardCatalog } from './flash-forward.js';
import { catalog as layerNormCatalog } from './layernorm.js';
import { catalog as permuteCatalog } from './permute.js';
import { catalog as randomCatalog } from './random.js';
import { catalog as softmaxCatalog } from './softmax.js';
import { catalog as sumSquaresCatalog } from './sum-squares.js';

export interface CatalogEntry extends KernelSource {
  family: string;
}

export function kernelCatalog(): CatalogEntry[] {
  const families: [string, () => KernelSource[]][] = [
    ['elementwise', elementwiseCatalog],
    ['layernorm', layerNormCatalog],
    ['softmax', softmaxCatalog],
    ['cross-entropy', crossEntropyCatalog],
    ['embedding', embeddingCatalog],
    ['fill-copy', fillCopyCatalog],
    ['adam', adamCatalog],
    ['random', randomCatalog],
    ['permute', permuteCatalog],
    ['sum-squares', sumSquaresCatalog],
    ['dropout', dropoutCatalog],
    ['attention', attentionCatalog],
    ['flash-forward', flashForwardCatalog],
    ['flash-backward', flashBackwardCatalog],
  ];
  return families.flatMap(([family, entries]) => entries().map((k) => ({ family, ...k })));
}
