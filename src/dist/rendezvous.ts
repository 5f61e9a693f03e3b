// The TCP rendezvous that starts a process group: rank 0 listens on MASTER_ADDR:MASTER_PORT, every
// other rank connects and announces itself, and once all worldSize − 1 have joined rank 0 sends each
// of them the same payload — the 128 bytes of an ncclUniqueId, which ncclCommInitRank needs on every
// rank. It doubles as the start barrier: nobody returns before everyone has joined.
//
// Wire format (all integers u32 little-endian):
//   client → server   'FFRV' rank worldSize
//   server → client   'FFOK' length payload[length]        or   'FFNO' length message[length] (UTF-8)
// A client retries its connection until the server is up (ranks start in any order) or the timeout
// passes; the server refuses a wrong world size, a rank out of range and a rank that joined twice.

import { connect, createServer } from 'node:net';
import type { Socket } from 'node:net';
import { ArgumentError, FuseformerError } from '../errors.js';

export class RendezvousError extends FuseformerError {}

export interface RendezvousOptions {
  readonly rank: number;
  readonly worldSize: number;
  readonly masterAddr: string;
  readonly masterPort: number;
  /** Give up after this long (default 120 s). */
  readonly timeoutMs?: number;
}

const HELLO = 0x56524646; // 'FFRV' as u32 LE
const OK = 0x4b4f4646; // 'FFOK'
const NO = 0x4f4e4646; // 'FFNO'

/** The process-group settings a launcher exports (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). */
export interface DistributedEnv {
  readonly rank: number;
  readonly worldSize: number;
  readonly localRank: number;
  readonly masterAddr: string;
  readonly masterPort: number;
}

/** Reads the launcher's variables; null when WORLD_SIZE is unset (a single process). */
export function distributedEnv(env: NodeJS.ProcessEnv = process.env): DistributedEnv | null {
  if (env['WORLD_SIZE'] === undefined) return null;
  const int = (name: string, fallback?: number): number => {
    const text = env[name];
    if (text === undefined && fallback !== undefined) return fallback;
    const value = Number(text);
    if (text === undefined || !Number.isInteger(value) || value < 0) throw new ArgumentError(`environment variable ${name}='${text ?? ''}' must be a non-negative integer`);
    return value;
  };
  const worldSize = int('WORLD_SIZE'), rank = int('RANK');
  if (worldSize < 1 || rank >= worldSize) throw new ArgumentError(`RANK=${rank} must be below WORLD_SIZE=${worldSize}`);
  return { rank, worldSize, localRank: int('LOCAL_RANK', rank), masterAddr: env['MASTER_ADDR'] ?? '127.0.0.1', masterPort: int('MASTER_PORT', 29500) };
}

function checkOptions(o: RendezvousOptions): void {
  if (!Number.isInteger(o.worldSize) || o.worldSize < 1) throw new ArgumentError(`rendezvous: world size must be a positive integer, got ${o.worldSize}`);
  if (!Number.isInteger(o.rank) || o.rank < 0 || o.rank >= o.worldSize) throw new ArgumentError(`rendezvous: rank ${o.rank} is outside [0, ${o.worldSize})`);
  if (!Number.isInteger(o.masterPort) || o.masterPort < 1 || o.masterPort > 65535) throw new ArgumentError(`rendezvous: port ${o.masterPort} is not a TCP port`);
}

function frame(tag: number, body: Uint8Array): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32LE(tag, 0);
  head.writeUInt32LE(body.byteLength, 4);
  return Buffer.concat([head, body]);
}

/** Collects bytes from a socket until `enough` says a complete message is there. */
function readMessage(socket: Socket, enough: (b: Buffer) => number | null, deadline: number, what: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let buffered = Buffer.alloc(0);
    const timer = setTimeout(() => { cleanup(); reject(new RendezvousError(`rendezvous: timed out waiting for ${what}`)); }, Math.max(0, deadline - Date.now()));
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      const length = enough(buffered);
      if (length !== null) { cleanup(); resolve(buffered.subarray(0, length)); }
    };
    const onEnd = () => { cleanup(); reject(new RendezvousError(`rendezvous: connection closed before ${what}`)); };
    const onError = (err: Error) => { cleanup(); reject(new RendezvousError(`rendezvous: ${err.message} while waiting for ${what}`)); };
    const cleanup = () => { clearTimeout(timer); socket.off('data', onData); socket.off('end', onEnd); socket.off('error', onError); };
    socket.on('data', onData);
    socket.on('end', onEnd);
    socket.on('error', onError);
  });
}

/**
 * Rank 0: makes the payload, serves it to every other rank once all have joined, returns it.
 * Other ranks: connect (retrying) and return the payload rank 0 sent.
 */
export async function rendezvous(options: RendezvousOptions, makePayload: () => Uint8Array): Promise<Uint8Array> {
  checkOptions(options);
  const deadline = Date.now() + (options.timeoutMs ?? 120_000);
  if (options.rank === 0) return serve(options, makePayload(), deadline);
  return join(options, deadline);
}

async function serve(o: RendezvousOptions, payload: Uint8Array, deadline: number): Promise<Uint8Array> {
  if (o.worldSize === 1) return payload;
  const joined = new Map<number, Socket>();
  const server = createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new RendezvousError(`rendezvous: only ${joined.size + 1} of ${o.worldSize} ranks joined ${o.masterAddr}:${o.masterPort} in time (missing ranks ${missingRanks(joined, o.worldSize)})`)), Math.max(0, deadline - Date.now()));
      server.on('error', (err) => { clearTimeout(timer); reject(new RendezvousError(`rendezvous: cannot listen on ${o.masterAddr}:${o.masterPort}: ${err.message}`)); });
      server.on('connection', (socket) => {
        socket.on('error', () => { /* a refused or vanished client: reported by the timeout */ });
        readMessage(socket, (b) => (b.length >= 12 ? 12 : null), deadline, 'a hello').then((hello) => {
          const tag = hello.readUInt32LE(0), rank = hello.readUInt32LE(4), world = hello.readUInt32LE(8);
          let refusal = '';
          if (tag !== HELLO) refusal = 'not a fuseformer rendezvous client';
          else if (world !== o.worldSize) refusal = `rank ${rank} expects world size ${world}, rank 0 has ${o.worldSize}`;
          else if (rank < 1 || rank >= o.worldSize) refusal = `rank ${rank} is outside [1, ${o.worldSize})`;
          else if (joined.has(rank)) refusal = `rank ${rank} joined twice`;
          if (refusal) { socket.end(frame(NO, Buffer.from(refusal))); return; }
          joined.set(rank, socket);
          if (joined.size === o.worldSize - 1) { clearTimeout(timer); resolve(); }
        }, () => socket.destroy());
      });
      server.listen(o.masterPort, o.masterAddr);
    });
    await Promise.all([...joined.values()].map((socket) => new Promise<void>((resolve) => socket.end(frame(OK, payload), () => resolve()))));
    return payload;
  } finally {
    server.close();
  }
}

function missingRanks(joined: Map<number, Socket>, worldSize: number): string {
  return Array.from({ length: worldSize - 1 }, (_, i) => i + 1).filter((r) => !joined.has(r)).join(', ');
}

async function join(o: RendezvousOptions, deadline: number): Promise<Uint8Array> {
  let lastError = '';
  while (Date.now() < deadline) {
    const socket = await new Promise<Socket | null>((resolve) => {
      const s = connect(o.masterPort, o.masterAddr);
      s.once('connect', () => resolve(s));
      s.once('error', (err) => { lastError = err.message; s.destroy(); resolve(null); });
    });
    if (!socket) { await new Promise((r) => setTimeout(r, 100)); continue; }
    const hello = Buffer.alloc(12);
    hello.writeUInt32LE(HELLO, 0);
    hello.writeUInt32LE(o.rank, 4);
    hello.writeUInt32LE(o.worldSize, 8);
    socket.write(hello);
    try {
      const reply = await readMessage(socket, (b) => (b.length >= 8 && b.length >= 8 + b.readUInt32LE(4) ? 8 + b.readUInt32LE(4) : null), deadline, 'rank 0\'s reply');
      const body = new Uint8Array(reply.subarray(8));
      if (reply.readUInt32LE(0) === NO) throw new RendezvousError(`rendezvous refused rank ${o.rank}: ${Buffer.from(body).toString('utf8')}`);
      if (reply.readUInt32LE(0) !== OK) throw new RendezvousError(`rendezvous: ${o.masterAddr}:${o.masterPort} is not a fuseformer rendezvous server`);
      return body;
    } finally {
      socket.destroy();
    }
  }
  throw new RendezvousError(`rendezvous: rank ${o.rank} could not reach rank 0 at ${o.masterAddr}:${o.masterPort} in time${lastError ? ` (${lastError})` : ''}`);
}
