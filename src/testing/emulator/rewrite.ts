// The kernel emulator's source rewriter (docs/emulator.md): a generated kernel's CUDA C++ made host C++ that
// g++ compiles against cuda-emu.h. Three things change: each inline-PTX statement becomes calls of the
// emulator's functions (one translation per instruction form below; any other instruction is refused by
// name), `__shared__` variables become function statics declared to the emulator (which poisons them when a
// block first declares them), `extern __shared__` arrays point at the emulator's dynamic shared memory.
// A launch entry, `emu_launch`, is appended for the kernel.

/** A kernel the emulator cannot run (an instruction or construct it does not model), named. */
export class EmulatorUnsupported extends Error {
  override readonly name = 'EmulatorUnsupported';
}

interface Operand {
  constraint: string;
  expression: string;
  output: boolean;
}

/** The host C++ for a kernel's source (as compiledSource gives it) and `emu_launch` for kernel `name`. */
export function emulatedSource(source: string, name: string): string {
  const body = rewriteShared(rewriteAsm(source));
  return `${body}\n\nextern "C" __attribute__((visibility("default"))) const char* emu_launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, const unsigned char* args, int count) {\n  return emu::launch(${name}, gx, gy, gz, bx, by, bz, shared, args, count);\n}\n`;
}

// --- scanning C++ text ------------------------------------------------------------------------------------

/** The index just past the string or character literal that starts at `i`. */
function skipLiteral(text: string, i: number): number {
  const quote = text[i]!;
  for (let j = i + 1; j < text.length; j++) {
    if (text[j] === '\\') j++;
    else if (text[j] === quote) return j + 1;
  }
  throw new EmulatorUnsupported(`an unterminated literal at offset ${i}`);
}

/** The index just past a comment starting at `i`, or `i` if none starts there. */
function skipComment(text: string, i: number): number {
  if (text.startsWith('//', i)) { const end = text.indexOf('\n', i); return end < 0 ? text.length : end; }
  if (text.startsWith('/*', i)) { const end = text.indexOf('*/', i + 2); return end < 0 ? text.length : end + 2; }
  return i;
}

/** The index of the bracket closing the one at `open`, skipping literals and comments. */
function matching(text: string, open: number): number {
  const pairs: Record<string, string> = { '(': ')', '[': ']', '{': '}' };
  const stack: string[] = [];
  for (let i = open; i < text.length; i++) {
    const c = text[i]!;
    if (c === '"' || c === "'") { i = skipLiteral(text, i) - 1; continue; }
    const after = skipComment(text, i);
    if (after !== i) { i = after - 1; continue; }
    if (pairs[c]) stack.push(pairs[c]!);
    else if (c === ')' || c === ']' || c === '}') {
      if (stack.pop() !== c) throw new EmulatorUnsupported(`unbalanced '${c}' at offset ${i}`);
      if (stack.length === 0) return i;
    }
  }
  throw new EmulatorUnsupported(`no closing bracket for offset ${open}`);
}

/** `text` split at `separator` where it is outside brackets and literals. */
function splitTopLevel(text: string, separator: string): string[] {
  const parts: string[] = [];
  let depth = 0, start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === '"' || c === "'") { i = skipLiteral(text, i) - 1; continue; }
    if ('([{'.includes(c)) depth++;
    else if (')]}'.includes(c)) depth--;
    else if (depth === 0 && c === separator) { parts.push(text.slice(start, i)); start = i + 1; }
  }
  parts.push(text.slice(start));
  return parts;
}

/** The value of adjacent C string literals ("a" "b"), escapes resolved. */
function stringValue(text: string): string {
  let out = '';
  for (const m of text.matchAll(/"((?:[^"\\]|\\.)*)"/g)) {
    out += m[1]!.replace(/\\(.)/g, (_, c: string) => ({ n: '\n', t: '\t', '"': '"', '\\': '\\' })[c] ?? c);
  }
  return out;
}

// --- inline PTX --------------------------------------------------------------------------------------------

function parseOperands(text: string | undefined, output: boolean): Operand[] {
  if (!text || text.trim() === '') return [];
  return splitTopLevel(text, ',').map((part) => {
    const m = /^\s*"([^"]*)"\s*\(([\s\S]*)\)\s*$/.exec(part);
    if (!m) throw new EmulatorUnsupported(`an asm operand the emulator cannot read: '${part.trim()}'`);
    return { constraint: m[1]!, expression: m[2]!, output };
  });
}

/** Rewrites every `asm [volatile] (...)` statement of `source` as emulator calls (on one line, so macros keep working). */
export function rewriteAsm(source: string): string {
  let out = '';
  let i = 0;
  const re = /\basm\b(\s+(?:volatile|__volatile__))?\s*\(/g;
  for (;;) {
    re.lastIndex = i;
    let m = re.exec(source);
    // Skip matches inside comments: a line comment before the match on the same line.
    while (m && /\/\/[^\n]*$/.test(source.slice(source.lastIndexOf('\n', m.index) + 1, m.index))) m = re.exec(source);
    if (!m) break;
    const open = m.index + m[0].length - 1, close = matching(source, open);
    const [template, outputs, inputs] = splitTopLevel(source.slice(open + 1, close), ':');
    const operands = [...parseOperands(outputs, true), ...parseOperands(inputs, false)];
    out += source.slice(i, m.index) + translateAsm(stringValue(template ?? ''), operands);
    i = close + 1;
  }
  return out + source.slice(i);
}

const LOAD_TYPES: Record<string, string> = {
  u8: 'unsigned char', s8: 'signed char', b8: 'unsigned char', u16: 'unsigned short', s16: 'short', b16: 'unsigned short',
  u32: 'unsigned', s32: 'int', b32: 'unsigned', f32: 'float', u64: 'unsigned long long', s64: 'long long', b64: 'unsigned long long', f64: 'double',
};

/** The C++ statement for one asm statement: its operands bound once, then each instruction translated. */
function translateAsm(template: string, operands: Operand[]): string {
  const binds = operands.map((o, n) => (o.output || o.constraint.startsWith('+') ? `auto& _e${n} = (${o.expression});` : `const auto _e${n} = (${o.expression});`));
  const instructions = template.split(/[;\n]/).map((s) => s.trim()).filter((s) => s !== '');
  try {
    const body = instructions.map((text) => translateInstruction(text, operands.length));
    return `do { ${binds.join(' ')} ${body.join(' ')} } while (0)`;
  } catch (error) {
    // Refused when run, not when compiled: the source may hold it on a path this spec never takes.
    if (!(error instanceof EmulatorUnsupported)) throw error;
    return `emu::unsupported(${JSON.stringify(error.message)})`;
  }
}

/** An operand's C++ value: %N, an immediate, or a special register. */
function value(token: string, count: number): string {
  const t = token.trim();
  const reg = /^%(\d+)$/.exec(t);
  if (reg) {
    if (Number(reg[1]) >= count) throw new EmulatorUnsupported(`asm operand ${t} out of range`);
    return `_e${reg[1]}`;
  }
  if (/^-?(0x[0-9a-f]+|\d+)$/i.test(t)) return t;
  if (t === '%%globaltimer') return 'emu::globaltimer()';
  throw new EmulatorUnsupported(`an asm operand the emulator does not model: '${t}'`);
}

/** The address of `[%N]` or `[%N+imm]` as unsigned long long. */
function address(token: string, count: number): string {
  const m = /^\[\s*([^\]+]+?)\s*(?:\+\s*(-?\w+))?\s*\]$/.exec(token.trim());
  if (!m) throw new EmulatorUnsupported(`an address the emulator does not model: '${token.trim()}'`);
  return `((unsigned long long)(${value(m[1]!, count)})${m[2] ? ` + ${m[2]}` : ''})`;
}

/** The registers of `{%a, %b}` or a single `%a`. */
function vector(token: string, count: number): string[] {
  const t = token.trim();
  const inner = t.startsWith('{') ? t.slice(1, -1) : t;
  return inner.split(',').map((s) => value(s, count));
}

function translateInstruction(text: string, count: number): string {
  if (text.startsWith('@') || text.startsWith('.reg') || text === '{' || text === '}') {
    throw new EmulatorUnsupported(`PTX with predicates or local registers: '${text}'`);
  }
  const space = text.search(/\s/);
  const opcode = space < 0 ? text : text.slice(0, space);
  const args = space < 0 ? [] : splitTopLevel(text.slice(space + 1), ',').map((s) => s.trim());
  const parts = opcode.split('.');
  const head = parts[0]!;
  const has = (p: string) => parts.includes(p);
  // Ordering and scheduling hints: nothing to do on one OS thread with blocks run in turn.
  if (head === 'griddepcontrol' || head === 'prefetch' || head === 'membar' || (head === 'fence' && !has('proxy'))) return ';';
  if (opcode.startsWith('cp.async.bulk.prefetch')) return ';';
  if (opcode === 'cp.async.commit_group' || opcode.startsWith('cp.async.wait_group') || opcode === 'cp.async.wait_all') return ';';
  if (head === 'mov' && args[1] === '%%globaltimer') return `emu::set_bits(${value(args[0]!, count)}, emu::globaltimer());`;
  if (opcode === 'ex2.approx.ftz.f32' || opcode === 'ex2.approx.f32') return `emu::set_bits(${value(args[0]!, count)}, emu::ex2(emu::bits_as<float>(${value(args[1]!, count)})));`;
  if (opcode === 'rcp.approx.ftz.f32' || opcode === 'rcp.approx.f32') return `emu::set_bits(${value(args[0]!, count)}, emu::rcp(emu::bits_as<float>(${value(args[1]!, count)})));`;
  if ((head === 'ld' || head === 'st') && !parts.some((p) => p.includes('cluster'))) return loadStore(head, parts, args, count);
  if (head === 'red' && has('global') && has('add')) return reduction(parts, args, count);
  if (opcode.startsWith('cp.async.ca.shared.global') || opcode.startsWith('cp.async.cg.shared.global')) {
    const bytes = value(args[2]!, count);
    return `emu::cp_async((unsigned)${address(args[0]!, count)}, ${address(args[1]!, count)}, ${bytes}, ${args[3] ? `(int)${value(args[3], count)}` : bytes});`;
  }
  if (opcode === 'cvt.rn.bf16x2.f32' || opcode === 'cvt.rn.f16x2.f32') {
    const fn = opcode.includes('bf16') ? 'cvt_bf16x2' : 'cvt_f16x2';
    return `emu::set_bits(${value(args[0]!, count)}, emu::${fn}(emu::bits_as<float>(${value(args[1]!, count)}), emu::bits_as<float>(${value(args[2]!, count)})));`;
  }
  if (opcode === 'lop3.b32') {
    const [d, a, b, c, lut] = args.map((s) => value(s, count));
    return `emu::set_bits(${d}, emu::lop3(emu::bits_as<unsigned>(${a}), emu::bits_as<unsigned>(${b}), emu::bits_as<unsigned>(${c}), (unsigned)(${lut})));`;
  }
  if (/^(fma|mul)\.rn\.(bf16x2|f16x2)$/.test(opcode)) {
    const [d, a, b, c] = args.map((s) => value(s, count));
    const fn = head === 'fma' ? '[](double x, double y, double z) { return x * y + z; }' : '[](double x, double y, double) { return x * y; }';
    return `emu::set_bits(${d}, emu::pair_op<${has('bf16x2')}>(emu::bits_as<unsigned>(${a}), emu::bits_as<unsigned>(${b}), ${c ? `emu::bits_as<unsigned>(${c})` : '0u'}, ${fn}));`;
  }
  if (opcode === 'dp4a.s32.s32') {
    const [d, a, b, c] = args.map((s) => value(s, count));
    return `emu::set_bits(${d}, emu::dp4a_s32(emu::bits_as<int>(${a}), emu::bits_as<int>(${b}), emu::bits_as<int>(${c})));`;
  }
  const ldmatrix = /^ldmatrix\.sync\.aligned\.m8n8\.x([124])(\.trans)?\.shared\.b16$/.exec(opcode);
  if (ldmatrix) {
    const regs = vector(args[0]!, count), n = Number(ldmatrix[1]);
    return `{ unsigned _m[4]; emu::ldmatrix((unsigned)${address(args[1]!, count)}, ${n}, ${ldmatrix[2] ? 'true' : 'false'}, _m); ${regs.map((r, k) => `emu::set_bits(${r}, _m[${k}]);`).join(' ')} }`;
  }
  const mma = /^mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.(bf16|f16)\.\1\.f32$/.exec(opcode);
  if (mma) {
    const [d, a, b, c] = args.map((s) => vector(s, count));
    const list = (regs: string[], type: string) => regs.map((r) => `emu::bits_as<${type}>(${r})`).join(', ');
    return `{ float _d[4]; const unsigned _a[4] = {${list(a!, 'unsigned')}}; const unsigned _b[2] = {${list(b!, 'unsigned')}}; const float _c[4] = {${list(c!, 'float')}}; emu::mma_m16n8k16<${mma[1] === 'bf16'}>(_d, _a, _b, _c); ${d!.map((r, k) => `emu::set_bits(${r}, _d[${k}]);`).join(' ')} }`;
  }
  throw new EmulatorUnsupported(`the PTX instruction '${opcode}' is not modelled by the emulator`);
}

/** ld / st of .global or .shared, scalar or .v2 / .v4, with any cache qualifiers. */
function loadStore(head: string, parts: string[], args: string[], count: number): string {
  const type = parts[parts.length - 1]!;
  const cType = LOAD_TYPES[type];
  if (!cType) throw new EmulatorUnsupported(`a ${head} of type .${type}`);
  const shared = parts.includes('shared');
  if (!shared && !parts.includes('global')) throw new EmulatorUnsupported(`a ${head} of a state space other than .global or .shared: ${parts.join('.')}`);
  const bytes = Number(/\d+/.exec(type)![0]) / 8;
  const [regToken, addrToken] = head === 'ld' ? [args[0]!, args[1]!] : [args[1]!, args[0]!];
  const base = shared ? `(unsigned long long)emu::shared_pointer((unsigned)${address(addrToken, count)})` : address(addrToken, count);
  const regs = vector(regToken, count);
  // An acquire or volatile load is how a thread polls a flag: let the others run (emu::spin_hint).
  const poll = head === 'ld' && (parts.includes('acquire') || parts.includes('volatile') || parts.includes('relaxed')) ? ' emu::spin_hint();' : '';
  const steps = regs.map((r, k) => (head === 'ld'
    ? `emu::set_bits(${r}, emu::load_as<${cType}>(_base + ${k * bytes}));`
    : `emu::store_as<${cType}>(_base + ${k * bytes}, emu::bits_as<${cType}>(${r}));`));
  return `{ const unsigned long long _base = ${base}; ${steps.join(' ')}${poll} }`;
}

/** red.global.add of .f32, .f16x2 or .bf16x2 (optionally .v2 / .v4 of them). */
function reduction(parts: string[], args: string[], count: number): string {
  const type = parts[parts.length - 1]!;
  const fn = type === 'f32' ? 'red_add_f32' : type === 'f16x2' ? 'red_add_f16x2' : type === 'bf16x2' ? 'red_add_bf16x2' : null;
  if (!fn) throw new EmulatorUnsupported(`a red.global.add of .${type}`);
  const cType = type === 'f32' ? 'float' : 'unsigned';
  const regs = vector(args[1]!, count);
  return `{ const unsigned long long _base = ${address(args[0]!, count)}; ${regs.map((r, k) => `emu::${fn}(_base + ${4 * k}, emu::bits_as<${cType}>(${r}));`).join(' ')} }`;
}

/** `text` with every balanced <...> removed (so a template argument's comma is not a declarator's). */
function withoutTemplateArguments(text: string): string {
  let previous;
  do { previous = text; text = text.replace(/<[^<>]*>/g, ''); } while (text !== previous);
  return text;
}

// --- shared memory -----------------------------------------------------------------------------------------

/**
 * `__shared__ T name[...]` inside a function → `static T name[...]; emu::declare_shared(&name, sizeof name);`
 * (at file scope: a plain static); `extern __shared__ T name[]` → a `T*` at the emulator's dynamic shared memory.
 */
export function rewriteShared(source: string): string {
  let out = '';
  let depth = 0;
  for (let i = 0; i < source.length;) {
    const c = source[i]!;
    if (c === '"' || c === "'") { const end = skipLiteral(source, i); out += source.slice(i, end); i = end; continue; }
    const after = skipComment(source, i);
    if (after !== i) { out += source.slice(i, after); i = after; continue; }
    if (c === '{') depth++;
    if (c === '}') depth--;
    const externShared = /^extern\s+__shared__\s+([^;]*?)\s*(\w+)\s*\[\s*\]\s*;/.exec(source.slice(i, i + 300));
    if (externShared && /\W/.test(source[i - 1] ?? ' ')) {
      const type = externShared[1]!.replace(/__align__\s*\(\s*\d+\s*\)/g, '').trim();
      out += `${type}* ${externShared[2]} = reinterpret_cast<${type}*>(emu::dynamic_shared);`;
      i += externShared[0].length;
      continue;
    }
    if (source.startsWith('__shared__', i) && /\W/.test(source[i - 1] ?? ' ') && /\W/.test(source[i + 10] ?? ' ')) {
      let end = i + 10;
      for (; end < source.length && source[end] !== ';'; end++) {
        if (source[end] === '{' || source[end] === '(' || source[end] === '[') end = matching(source, end);
      }
      const declaration = source.slice(i + 10, end).trim();
      const name = /(\w+)\s*((?:\[[^\]]*\]\s*)*)$/.exec(declaration);
      if (!name || splitTopLevel(withoutTemplateArguments(declaration), ',').length > 1) throw new EmulatorUnsupported(`a __shared__ declaration the emulator cannot read: '__shared__ ${declaration}'`);
      out += depth > 0 ? `static ${declaration}; emu::declare_shared(&${name[1]}, sizeof(${name[1]}));` : `static ${declaration};`;
      i = end + 1;
      continue;
    }
    out += c;
    i++;
  }
  return out;
}
