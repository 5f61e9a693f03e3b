// The KV cache layouts the decode-path ops take, checked once for all of them:
//   per sequence  kCache, vCache (B, Hkv, maxLen, d)
//   paged         kCache, vCache (numBlocks, Hkv, blockSize, d) through blockTable i32 (B, maxBlocks):
//                 sequence b's position p lives in block blockTable[b][p / blockSize], row p % blockSize;
//                 with tableRows i32 (B) (qkvRopeAppend), in block blockTable[tableRows[b]][p / blockSize]
//                 and the table has any number of rows.
// Sizes are bound on `check` (B, Hkv, d, and maxLen or numBlocks, blockSize, maxBlocks).

import type { Tensor } from '../../tensor.js';
import type { OpCheck } from '../validate.js';

export interface PagedCacheLayout { readonly numBlocks: number; readonly blockSize: number; readonly maxBlocks: number }

/** Checks the caches (and the block table when given); returns the paged layout, or undefined per sequence. */
export function checkKvCacheLayout<T extends Tensor>(check: OpCheck<T>, blockTable: T | undefined, kCache: T, vCache: T, tableRows?: T): PagedCacheLayout | undefined {
  if (!blockTable) {
    check.absent('tableRows', tableRows, 'without a block table');
    check.shape('kCache', kCache, ['B', 'Hkv', 'maxLen', 'd']);
    check.shape('vCache', vCache, ['B', 'Hkv', 'maxLen', 'd']);
    return undefined;
  }
  check.dtype('blockTable', blockTable, ['i32']);
  check.shape('blockTable', blockTable, [tableRows ? 'tableRowCount' : 'B', 'maxBlocks']);
  if (tableRows) {
    check.dtype('tableRows', tableRows, ['i32']);
    check.shape('tableRows', tableRows, ['B']);
  }
  check.shape('kCache', kCache, ['numBlocks', 'Hkv', 'blockSize', 'd']);
  check.shape('vCache', vCache, ['numBlocks', 'Hkv', 'blockSize', 'd']);
  const paged = { numBlocks: check.size('numBlocks'), blockSize: check.size('blockSize'), maxBlocks: check.size('maxBlocks') };
  if (paged.blockSize < 1 || paged.maxBlocks < 1) {
    check.fail(`a block table needs blocks of at least one position and at least one block a sequence, got blockSize ${paged.blockSize}, maxBlocks ${paged.maxBlocks}`);
  }
  return paged;
}
