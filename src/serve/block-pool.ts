// The paged KV cache's bookkeeping: a pool of fixed-size blocks (blockSize token positions each), a
// reference count per block, and prefix caching by hashing full blocks (vLLM v1's block_pool.py).
//
// A request's block table lists the blocks holding its positions in order: position p lives in block
// table[floor(p / blockSize)], slot p mod blockSize. A block is *full* once all blockSize positions are
// computed; its hash is h_i = sha1(h_{i-1} | tokens of block i), so equal hashes mean equal token prefixes
// up to and including that block, and a new request can reuse the cached block instead of computing it.
//
// Free blocks wait in one queue in the order they were freed (least recently used first). A free block
// that holds a hash stays findable by that hash until it is handed out again (then its hash is
// dropped): finished requests leave their prompt blocks behind for the next request with the same prefix.
// Invariant: refCount(b) = the number of block tables listing b; b is in the free queue iff refCount = 0.

import * as crypto from 'node:crypto';
import { ArgumentError } from '../errors.js';

export class BlockPool {
  private readonly refCounts: Int32Array;
  private readonly hashes: (string | null)[];
  /** Blocks with refCount 0, least recently freed first (Set keeps insertion order; delete is O(1)). */
  private readonly freeQueue = new Set<number>();
  private readonly byHash = new Map<string, number>();
  /** Prefix-cache lookups: blocks asked for and blocks found (for the hit rate). */
  queried = 0;
  hits = 0;

  constructor(readonly numBlocks: number, readonly blockSize: number) {
    if (!Number.isInteger(numBlocks) || numBlocks < 1) throw new ArgumentError(`block pool: numBlocks must be a positive integer, got ${numBlocks}`);
    if (!Number.isInteger(blockSize) || blockSize < 1) throw new ArgumentError(`block pool: blockSize must be a positive integer, got ${blockSize}`);
    this.refCounts = new Int32Array(numBlocks);
    this.hashes = new Array<string | null>(numBlocks).fill(null);
    for (let b = 0; b < numBlocks; b++) this.freeQueue.add(b);
  }

  /** Blocks no block table lists (cached ones included: they can be handed out). */
  get freeBlocks(): number { return this.freeQueue.size; }
  get usedBlocks(): number { return this.numBlocks - this.freeQueue.size; }
  /** Blocks holding a hash (in use or free). */
  get cachedBlocks(): number { return this.byHash.size; }

  refCount(block: number): number { return this.refCounts[block]!; }
  hashOf(block: number): string | null { return this.hashes[block]!; }

  /** n fresh blocks (refCount 1, no hash), or null (nothing taken) when fewer than n are free. */
  allocate(n: number): number[] | null {
    if (n > this.freeQueue.size) return null;
    const out: number[] = [];
    for (const b of this.freeQueue) {
      if (out.length === n) break;
      out.push(b);
    }
    for (const b of out) {
      this.freeQueue.delete(b);
      const h = this.hashes[b];
      if (h !== null) { this.byHash.delete(h!); this.hashes[b] = null; }
      this.refCounts[b] = 1;
    }
    return out;
  }

  /** Drops one reference to each block; blocks reaching 0 join the free queue (keeping their hash). */
  release(blocks: readonly number[]): void {
    // Freed in reverse so a request's last blocks (the least shareable) are handed out first.
    for (let i = blocks.length - 1; i >= 0; i--) {
      const b = blocks[i]!;
      if (this.refCounts[b]! <= 0) throw new ArgumentError(`block pool: block ${b} released more often than it was taken`);
      if (--this.refCounts[b]! === 0) this.freeQueue.add(b);
    }
  }

  /** The cached block with this hash, now referenced once more; or undefined. */
  take(hash: string): number | undefined {
    const b = this.byHash.get(hash);
    if (b === undefined) return undefined;
    if (this.refCounts[b]! === 0) this.freeQueue.delete(b);
    this.refCounts[b]!++;
    return b;
  }

  /** Records that full block `block` holds the tokens whose chain hash is `hash`; false if another block already does. */
  register(block: number, hash: string): boolean {
    if (this.byHash.has(hash)) return this.byHash.get(hash) === block;
    if (this.hashes[block] !== null) throw new ArgumentError(`block pool: block ${block} already holds a hash`);
    this.hashes[block] = hash;
    this.byHash.set(hash, block);
    return true;
  }

  /** The longest run of cached blocks for these block hashes (each taken once); counts toward the hit rate. */
  takePrefix(hashes: readonly string[]): number[] {
    const out: number[] = [];
    for (const h of hashes) {
      const b = this.take(h);
      if (b === undefined) break;
      out.push(b);
    }
    this.queried += hashes.length;
    this.hits += out.length;
    return out;
  }
}

/**
 * The chain hashes of the full blocks of `tokens` (a partial last block has none): blocks [first, count),
 * block `first` chained to `parent` (the hash of block first − 1; '' for the first block). A block's hash
 * is SHA-256 (collision-resistant: a crafted prompt must not map onto another client's cached blocks) of
 * its parent's 32-byte digest (zeros for the first block) and its tokens as 32-bit little-endian ints,
 * one-shot over a reused buffer (a step hashes every block its prompt chunks fill: at 256 clients the
 * former text form — a comma-joined copy of the tokens through createHash — was an eighth of the
 * scheduler's host time).
 */
export function blockHashes(tokens: readonly number[], blockSize: number, count = Math.floor(tokens.length / blockSize), first = 0, parent = ''): string[] {
  const out: string[] = [];
  if (count <= first) return out;
  const buffer = Buffer.alloc(DIGEST_BYTES + 4 * blockSize);
  if (parent) buffer.write(parent, 0, DIGEST_BYTES, 'hex');
  for (let i = first; i < count; i++) {
    for (let j = 0; j < blockSize; j++) buffer.writeInt32LE(tokens[i * blockSize + j]!, DIGEST_BYTES + 4 * j);
    const h = sha256Hex(buffer);
    out.push(h);
    buffer.write(h, 0, DIGEST_BYTES, 'hex');
  }
  return out;
}

const DIGEST_BYTES = 32;
/** crypto.hash (Node ≥ 20.12; a namespace import, since a named one fails to link where it is missing) where there is one, else createHash. */
const oneShot = (crypto as { hash?: (algorithm: string, data: Buffer, encoding: 'hex') => string }).hash;
const sha256Hex: (data: Buffer) => string = oneShot
  ? (data) => oneShot('sha256', data, 'hex')
  : (data) => crypto.createHash('sha256').update(data).digest('hex');
