// A restricted reader of Python's pickle format (protocols 0–5), for the data in PyTorch checkpoints.
//
// A pickle is a program for a small stack machine; Python's own unpickler imports and calls whatever
// callables it names, so loading an untrusted .bin can run arbitrary code. This one calls nothing it was
// not given: every GLOBAL / STACK_GLOBAL is resolved through the caller's `findGlobal`, which returns a
// PickleCallable (or a plain value) for the few names a checkpoint needs and throws for any other — the
// error names the module and attribute. Persistent ids (how torch.save refers to tensor storages) go to
// the caller's `persistentLoad`.
//
// Values: None → null, bool → boolean, int → number (bigint beyond 2^53), float → number, str → string,
// bytes / bytearray → Uint8Array, list and tuple → arrays (tuples frozen), dict → Map, set / frozenset →
// Set. BUILD on a Map (an OrderedDict's instance attributes, e.g. a state dict's `_metadata`) is ignored;
// on anything else it goes to the object's `setState` if it has one, else it is refused.
//
// A read past the end of the bytes throws PickleTruncated, so a caller reading a pickle from the front of
// a larger file can retry with more of it.

import { FuseformerError } from '../errors.js';

export class PickleError extends FuseformerError {}
/** The bytes ended inside the pickle. */
export class PickleTruncated extends PickleError {}

/** Something a pickle may call (REDUCE, NEWOBJ, INST, OBJ): a class or function the caller allows. */
export interface PickleCallable {
  readonly qualifiedName: string;
  call(args: readonly unknown[], kwargs?: ReadonlyMap<unknown, unknown>): unknown;
}

export function pickleCallable(qualifiedName: string, call: (args: readonly unknown[]) => unknown): PickleCallable {
  return { qualifiedName, call };
}

export function isPickleCallable(value: unknown): value is PickleCallable {
  return typeof value === 'object' && value !== null && typeof (value as PickleCallable).call === 'function' && typeof (value as PickleCallable).qualifiedName === 'string';
}

export interface UnpickleOptions {
  /** The value of `module.name`; throws (naming it) for anything not allowed. */
  findGlobal(module: string, name: string): unknown;
  /** The object a persistent id stands for; absent: persistent ids are refused. */
  persistentLoad?(pid: unknown): unknown;
  /** Names the source in errors (a file and entry). */
  source: string;
}

const MARK = Symbol('mark');

/** Runs the pickle that starts at `offset`; returns its value and the offset just past its STOP. */
export function unpickle(bytes: Uint8Array, options: UnpickleOptions, offset = 0): { value: unknown; end: number } {
  return new Unpickler(bytes, options, offset).run();
}

class Unpickler {
  private pos: number;
  private readonly stack: unknown[] = [];
  private readonly marks: number[] = [];
  private readonly memo = new Map<number, unknown>();
  private readonly view: DataView;
  private opcodeAt = 0;

  constructor(private readonly bytes: Uint8Array, private readonly options: UnpickleOptions, offset: number) {
    this.pos = offset;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  run(): { value: unknown; end: number } {
    for (;;) {
      this.opcodeAt = this.pos;
      const op = this.u8();
      switch (op) {
        case 0x80: { const protocol = this.u8(); if (protocol > 5) this.fail(`protocol ${protocol} is newer than 5`); break; } // PROTO
        case 0x95: this.take(8); break; // FRAME: a length hint only
        case 0x2e: { // STOP
          if (this.stack.length !== 1 || this.marks.length > 0) this.fail(`STOP with ${this.stack.length} values on the stack`);
          return { value: this.stack[0], end: this.pos };
        }
        // Constants and numbers.
        case 0x4e: this.push(null); break; // NONE
        case 0x88: this.push(true); break; // NEWTRUE
        case 0x89: this.push(false); break; // NEWFALSE
        case 0x4a: this.push(this.view.getInt32(this.take(4), true)); break; // BININT
        case 0x4b: this.push(this.u8()); break; // BININT1
        case 0x4d: this.push(this.view.getUint16(this.take(2), true)); break; // BININT2
        case 0x8a: this.push(this.long(this.u8())); break; // LONG1
        case 0x8b: this.push(this.long(this.length(this.view.getInt32(this.take(4), true)))); break; // LONG4
        case 0x47: this.push(this.view.getFloat64(this.take(8), false)); break; // BINFLOAT (big-endian)
        case 0x49: { // INT (text; "01" / "00" are True / False)
          const line = this.line();
          this.push(line === '01' ? true : line === '00' ? false : this.integerText(line));
          break;
        }
        case 0x4c: this.push(this.integerText(this.line().replace(/L$/, ''))); break; // LONG (text)
        case 0x46: { // FLOAT (text)
          const line = this.line(), value = Number(line);
          if (Number.isNaN(value) && line.toLowerCase() !== 'nan') this.fail(`FLOAT '${line}' is not a number`);
          this.push(value);
          break;
        }
        // Strings and bytes.
        case 0x58: this.push(this.utf8(this.length(this.view.getUint32(this.take(4), true)))); break; // BINUNICODE
        case 0x8c: this.push(this.utf8(this.u8())); break; // SHORT_BINUNICODE
        case 0x8d: this.push(this.utf8(this.length64())); break; // BINUNICODE8
        case 0x56: this.push(this.rawUnicodeEscape(this.line())); break; // UNICODE (text)
        case 0x54: this.push(this.latin1(this.length(this.view.getInt32(this.take(4), true)))); break; // BINSTRING
        case 0x55: this.push(this.latin1(this.u8())); break; // SHORT_BINSTRING
        case 0x53: this.push(this.quotedString(this.line())); break; // STRING (text, quoted)
        case 0x42: this.push(this.copy(this.length(this.view.getUint32(this.take(4), true)))); break; // BINBYTES
        case 0x43: this.push(this.copy(this.u8())); break; // SHORT_BINBYTES
        case 0x8e: this.push(this.copy(this.length64())); break; // BINBYTES8
        case 0x96: this.push(this.copy(this.length64())); break; // BYTEARRAY8
        // Containers.
        case 0x28: this.marks.push(this.stack.length); break; // MARK
        case 0x29: this.push(Object.freeze([])); break; // EMPTY_TUPLE
        case 0x85: this.push(Object.freeze(this.popN(1))); break; // TUPLE1
        case 0x86: this.push(Object.freeze(this.popN(2))); break; // TUPLE2
        case 0x87: this.push(Object.freeze(this.popN(3))); break; // TUPLE3
        case 0x74: this.push(Object.freeze(this.popMark())); break; // TUPLE
        case 0x5d: this.push([]); break; // EMPTY_LIST
        case 0x6c: this.push(this.popMark()); break; // LIST
        case 0x61: { const item = this.pop(); this.list(this.top()).push(item); break; } // APPEND
        case 0x65: { const items = this.popMark(); this.list(this.top()).push(...items); break; } // APPENDS
        case 0x7d: this.push(new Map()); break; // EMPTY_DICT
        case 0x64: this.push(this.pairsInto(new Map(), this.popMark())); break; // DICT
        case 0x73: { const [key, value] = this.popN(2); this.map(this.top()).set(key, value); break; } // SETITEM
        case 0x75: { const items = this.popMark(); this.pairsInto(this.map(this.top()), items); break; } // SETITEMS
        case 0x8f: this.push(new Set()); break; // EMPTY_SET
        case 0x90: { const items = this.popMark(); const set = this.top(); if (!(set instanceof Set)) this.fail('ADDITEMS on a value that is not a set'); for (const x of items) (set as Set<unknown>).add(x); break; } // ADDITEMS
        case 0x91: this.push(new Set(this.popMark())); break; // FROZENSET
        // Stack and memo.
        case 0x30: this.pop(); break; // POP
        case 0x31: this.popMark(); break; // POP_MARK
        case 0x32: this.push(this.top()); break; // DUP
        case 0x70: this.memo.set(this.integer(this.line()), this.top()); break; // PUT
        case 0x71: this.memo.set(this.u8(), this.top()); break; // BINPUT
        case 0x72: this.memo.set(this.view.getUint32(this.take(4), true), this.top()); break; // LONG_BINPUT
        case 0x94: this.memo.set(this.memo.size, this.top()); break; // MEMOIZE
        case 0x67: this.push(this.recall(this.integer(this.line()))); break; // GET
        case 0x68: this.push(this.recall(this.u8())); break; // BINGET
        case 0x6a: this.push(this.recall(this.view.getUint32(this.take(4), true))); break; // LONG_BINGET
        // Objects: only what findGlobal allows is ever called.
        case 0x63: { const module = this.line(); const name = this.line(); this.push(this.global(module, name)); break; } // GLOBAL
        case 0x93: { const [module, name] = this.popN(2); if (typeof module !== 'string' || typeof name !== 'string') this.fail('STACK_GLOBAL needs two strings'); this.push(this.global(module as string, name as string)); break; } // STACK_GLOBAL
        case 0x52: { const args = this.pop(); const callable = this.pop(); this.push(this.call(callable, args)); break; } // REDUCE
        case 0x81: { const args = this.pop(); const cls = this.pop(); this.push(this.call(cls, args)); break; } // NEWOBJ
        case 0x92: { // NEWOBJ_EX
          const [cls, args, kwargs] = this.popN(3);
          if (!(kwargs instanceof Map)) this.fail('NEWOBJ_EX without a keyword dict');
          this.push(this.call(cls, args, kwargs as Map<unknown, unknown>));
          break;
        }
        case 0x69: { const module = this.line(); const name = this.line(); this.push(this.call(this.global(module, name), this.popMark())); break; } // INST
        case 0x6f: { const [cls, ...args] = this.popMark(); this.push(this.call(cls, args)); break; } // OBJ
        case 0x62: this.build(this.pop(), this.top()); break; // BUILD
        case 0x51: this.push(this.persistent(this.pop())); break; // BINPERSID
        case 0x50: this.push(this.persistent(this.line())); break; // PERSID
        case 0x82: case 0x83: case 0x84: this.fail('extension-registry opcodes (EXT1/2/4) are not supported'); break;
        case 0x97: case 0x98: this.fail('out-of-band buffers (protocol 5 NEXT_BUFFER / READONLY_BUFFER) are not supported'); break;
        default: this.fail(`unknown opcode 0x${op.toString(16).padStart(2, '0')}`);
      }
    }
  }

  private fail(message: string): never {
    throw new PickleError(`${this.options.source}: pickle byte ${this.opcodeAt}: ${message}`);
  }

  private take(n: number): number {
    if (this.pos + n > this.bytes.length) throw new PickleTruncated(`${this.options.source}: the pickle is cut off at byte ${this.bytes.length} (an opcode at ${this.opcodeAt} needs ${n} more bytes)`);
    const at = this.pos;
    this.pos += n;
    return at;
  }

  private u8(): number { return this.bytes[this.take(1)]!; }

  private length(n: number): number {
    if (n < 0) this.fail(`negative length ${n}`);
    return n;
  }

  private length64(): number {
    const n = this.view.getBigUint64(this.take(8), true);
    if (n > BigInt(this.bytes.length - this.pos)) this.take(this.bytes.length - this.pos + 1); // cut off
    return Number(n);
  }

  private line(): string {
    const end = this.bytes.indexOf(0x0a, this.pos);
    if (end < 0) this.take(this.bytes.length - this.pos + 1);
    const text = this.latin1Of(this.bytes.subarray(this.pos, end));
    this.pos = end + 1;
    return text;
  }

  private copy(n: number): Uint8Array { const at = this.take(n); return this.bytes.slice(at, at + n); }
  private utf8(n: number): string { const at = this.take(n); return new TextDecoder('utf-8').decode(this.bytes.subarray(at, at + n)); }
  private latin1(n: number): string { const at = this.take(n); return this.latin1Of(this.bytes.subarray(at, at + n)); }
  private latin1Of(bytes: Uint8Array): string { let s = ''; for (const b of bytes) s += String.fromCharCode(b); return s; }

  /** Two's-complement little-endian integer of n bytes. */
  private long(n: number): number | bigint {
    const at = this.take(n);
    if (n === 0) return 0;
    let value = 0n;
    for (let i = n - 1; i >= 0; i--) value = (value << 8n) | BigInt(this.bytes[at + i]!);
    if (this.bytes[at + n - 1]! & 0x80) value -= 1n << BigInt(8 * n);
    return narrow(value);
  }

  private integerText(text: string): number | bigint {
    if (!/^[+-]?\d+$/.test(text)) this.fail(`'${text}' is not an integer`);
    return narrow(BigInt(text));
  }

  private integer(text: string): number {
    const value = this.integerText(text);
    return typeof value === 'bigint' ? this.fail(`memo index ${value} is too large`) : value;
  }

  private quotedString(line: string): string {
    const quote = line[0];
    if ((quote !== "'" && quote !== '"') || line.length < 2 || line[line.length - 1] !== quote) this.fail(`STRING argument ${line} is not quoted`);
    return line.slice(1, -1).replace(/\\(x[0-9a-fA-F]{2}|[0-7]{1,3}|.)/g, (_, e: string) => {
      if (e[0] === 'x') return String.fromCharCode(parseInt(e.slice(1), 16));
      if (/^[0-7]/.test(e)) return String.fromCharCode(parseInt(e, 8));
      return ({ n: '\n', r: '\r', t: '\t', '\\': '\\', "'": "'", '"': '"', a: '\x07', b: '\b', f: '\f', v: '\v' } as Record<string, string>)[e] ?? `\\${e}`;
    });
  }

  private rawUnicodeEscape(line: string): string {
    return line.replace(/\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})/g, (_, u: string | undefined, U: string | undefined) => String.fromCodePoint(parseInt((u ?? U)!, 16)));
  }

  private push(value: unknown): void { this.stack.push(value); }

  private pop(): unknown {
    const floor = this.marks.length > 0 ? this.marks[this.marks.length - 1]! : 0;
    if (this.stack.length <= floor) this.fail('the stack is empty');
    return this.stack.pop();
  }

  private popN(n: number): unknown[] {
    const floor = this.marks.length > 0 ? this.marks[this.marks.length - 1]! : 0;
    if (this.stack.length - n < floor) this.fail(`needs ${n} values, the stack has ${this.stack.length - floor}`);
    return this.stack.splice(this.stack.length - n, n);
  }

  private top(): unknown {
    if (this.stack.length === 0) this.fail('the stack is empty');
    return this.stack[this.stack.length - 1];
  }

  private popMark(): unknown[] {
    const mark = this.marks.pop();
    if (mark === undefined) this.fail('no MARK to pop to');
    return this.stack.splice(mark!);
  }

  private recall(index: number): unknown {
    if (!this.memo.has(index)) this.fail(`memo entry ${index} was never stored`);
    return this.memo.get(index);
  }

  private list(value: unknown): unknown[] {
    if (!Array.isArray(value) || Object.isFrozen(value)) this.fail('APPEND on a value that is not a list');
    return value as unknown[];
  }

  private map(value: unknown): Map<unknown, unknown> {
    if (!(value instanceof Map)) this.fail('SETITEM on a value that is not a dict');
    return value as Map<unknown, unknown>;
  }

  private pairsInto(map: Map<unknown, unknown>, items: unknown[]): Map<unknown, unknown> {
    if (items.length % 2 !== 0) this.fail(`a dict of ${items.length} items (keys and values alternate)`);
    for (let i = 0; i < items.length; i += 2) map.set(items[i], items[i + 1]);
    return map;
  }

  private global(module: string, name: string): unknown {
    try {
      return this.options.findGlobal(module, name);
    } catch (error) {
      return this.fail((error as Error).message);
    }
  }

  private call(callable: unknown, args: unknown, kwargs?: ReadonlyMap<unknown, unknown>): unknown {
    if (!isPickleCallable(callable)) this.fail(`calls ${describe(callable)}, which is not callable`);
    if (!Array.isArray(args)) this.fail(`calls ${(callable as PickleCallable).qualifiedName} with ${describe(args)} instead of an argument tuple`);
    try {
      return (callable as PickleCallable).call(args as unknown[], kwargs);
    } catch (error) {
      if (error instanceof PickleError) throw error;
      return this.fail(`${(callable as PickleCallable).qualifiedName}: ${(error as Error).message}`);
    }
  }

  private build(state: unknown, target: unknown): void {
    if (target instanceof Map) return; // an OrderedDict's instance attributes (a state dict's _metadata)
    const settable = target as { setState?: (state: unknown) => void } | null;
    if (typeof settable === 'object' && settable !== null && typeof settable.setState === 'function') { settable.setState(state); return; }
    this.fail(`BUILD on ${describe(target)}, which takes no state`);
  }

  private persistent(pid: unknown): unknown {
    if (!this.options.persistentLoad) this.fail('a persistent id, which this pickle may not hold');
    try {
      return this.options.persistentLoad!(pid);
    } catch (error) {
      if (error instanceof PickleError) throw error;
      return this.fail((error as Error).message);
    }
  }
}

function narrow(value: bigint): number | bigint {
  return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value;
}

/** A short description of a pickled value for error messages. */
export function describe(value: unknown): string {
  if (value === null) return 'None';
  if (isPickleCallable(value)) return value.qualifiedName;
  if (Array.isArray(value)) return Object.isFrozen(value) ? `a tuple of ${value.length}` : `a list of ${value.length}`;
  if (value instanceof Map) return `a dict of ${value.size}`;
  if (value instanceof Uint8Array) return `${value.length} bytes`;
  if (typeof value === 'string') return `the string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
  if (typeof value === 'object') return (value as object).constructor?.name ?? 'an object';
  return `${typeof value} ${String(value)}`;
}
