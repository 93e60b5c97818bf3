#!/usr/bin/env node
// check-architecture: enforces the dependency rules of /ARCHITECTURE.md ("Modules and what each
// owns": "Dependencies point one way ... A lint rule or a small script in CI enforces these
// rules") and STYLE.md ("Small rooms, one front door each"; "unknown at boundaries, never any").
//
// Usage: node scripts/check-architecture.mjs [rootDir]    (rootDir defaults to the repo root)
// Reads the TypeScript sources under <root>/src, <root>/cluster-test and <root>/bench, skipping
// generated code (any directory named `gen`). Prints one line per violation,
// `file:line: rule: explanation`, and exits 1; or prints a one-line OK summary and exits 0.
//
// Rules (the rule name is the second field of each message):
//   pure-import    src/base, raft, store, fsm, stream import no `node:*` module and no bare
//                  builtin ('fs', 'crypto', ...): the simulator runs this code as it is.
//                  Test files (*.test.ts) are exempt; `testing/` helpers are not.
//   pure-ambient   the same modules use no ambient time or randomness (Date.now, argument-less
//                  new Date(), performance.now, Math.random, crypto.getRandomValues/randomUUID,
//                  setTimeout, setInterval, setImmediate, queueMicrotask, process., hrtime).
//                  Time is ticks, randomness is the injected Random port. Comments and string
//                  literals are stripped first. Test files and `testing/` helpers are exempt.
//   layering       a module imports only the modules LAYERS allows (module = first directory
//                  under src/; cluster-test/ and bench/ count as one module each). src/ never
//                  imports cluster-test/ or bench/. Generated code counts as the module `gen`.
//   unknown-module a folder missing from LAYERS: add it to the table with its allowed imports.
//   front-door     another module is reached only through its index.ts (tests, testing/
//                  helpers, cluster-test/ and bench/ may also use <module>/testing/index.ts).
//                  Type-only imports, `export ... from` and import('...') count too.
//   testing-import shipped code (src/, not a test file, not under a `testing/` folder) never
//                  imports a `testing/` folder, its own module's included: reference models and
//                  test helpers live there (STYLE.md) and do not ship.
//   unresolved     a relative import that names no file.
//   cycle          no circular imports between files (type-only imports included).
//   module-cycle   no circular imports between modules.
//   no-any         no `any` type in src/ (test files and generated code excepted).
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { builtinModules } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// ---- The layering table: module -> modules it may import. ALL = every src module. ----------
// Change the architecture here (and in ARCHITECTURE.md). `gen` is generated protocol code.
const ALL = '*';
const LAYERS = {
  base: [],
  raft: ['base'],
  store: ['base'],
  fsm: ['base', 'raft', 'store'],
  stream: ['base', 'store', 'fsm'],
  replica: ['base', 'raft', 'fsm', 'store', 'stream'],
  // auth: TLS material, peer identity, (later) tokens, roles and authorize. It holds the
  // security decisions; the edges that enforce them (api, forwarding), the composition root
  // (server) and `cairn tls` (cli) import it. It imports only base (and node builtins, npm).
  auth: ['base'],
  forwarding: ['base', 'raft', 'replica', 'fsm', 'gen', 'auth'],
  platform: ['base', 'raft', 'replica', 'fsm', 'store'],
  api: ['base', 'store', 'fsm', 'stream', 'replica', 'raft', 'gen', 'auth'],
  types: ['base', 'api', 'store'],
  controller: ['base', 'client', 'api', 'store', 'stream', 'types'], // not replica: Logger and Timers are base's
  client: ['base', 'gen'],
  server: ALL,
  cli: ['client', 'base', 'server', 'auth'], // server only for `cairn agent`, auth only for `cairn tls`; nothing else imports server
  'cluster-test': ALL, // through front doors only (rule front-door)
  bench: ALL,
};
const PURE = new Set(['base', 'raft', 'store', 'fsm', 'stream']);
const ROOTS = ['src', 'cluster-test', 'bench'];
const OUTSIDE_SRC = new Set(['cluster-test', 'bench']);
const SRC_MODULES = Object.keys(LAYERS).filter((m) => !OUTSIDE_SRC.has(m));
for (const [m, deps] of Object.entries(LAYERS)) {
  for (const d of deps === ALL ? [] : deps) {
    if (d !== 'gen' && !(d in LAYERS)) throw new Error(`LAYERS.${m} names unknown module '${d}'`);
  }
}
const allowedFor = (m) => (LAYERS[m] === ALL ? [...SRC_MODULES, 'gen'] : LAYERS[m]);

// Global access: not preceded by an identifier character or by a `.` (a port method such as
// `clock.setTimeout` is fine), except `globalThis.`.
const G = String.raw`(?<![\w$]|(?<!\bglobalThis)\.)`;
const AMBIENT = [
  [`${G}Date\\.now\\b`, 'Date.now'],
  [`${G}new\\s+Date\\s*\\(\\s*\\)`, 'new Date()'],
  [`(?<![\\w$.]|\\bnew\\s+)Date\\s*\\(`, 'Date()'],
  [`${G}performance\\.now\\b`, 'performance.now'],
  [`${G}Math\\.random\\b`, 'Math.random'],
  [`${G}crypto\\.(?:getRandomValues|randomUUID)\\b`, 'crypto randomness'],
  [`${G}(?:setTimeout|setInterval|setImmediate|queueMicrotask)\\s*\\(`, 'timer'],
  [`${G}process\\.`, 'process.'],
  [`\\bhrtime\\b`, 'hrtime'],
].map(([re, what]) => [new RegExp(re, 'g'), what]);
// `name(...)` followed by `:` or `{` declares a method (e.g. a port's `setTimeout(f: ...): void`)
// rather than calling the global; a ternary's `? f(x) :` is still a call.
function isDeclaration(code, open) {
  let depth = 0;
  let k = open;
  for (; k < code.length; k++) {
    if (code[k] === '(') depth++;
    else if (code[k] === ')' && --depth === 0) break;
  }
  const before = code.slice(0, open).replace(/[\w$]+\s*$/, '').trimEnd().at(-1);
  return before !== '?' && /^\s*[:{]/.test(code.slice(k + 1));
}
// `any` as a type: not a property (`x.any`), key or parameter name (`any:`), nor a call.
const ANY = /(?<![\w$.])any(?![\w$])(?!\s*\??:)(?!\s*\()/g;
const BUILTINS = new Set(builtinModules);

// ---- Tokenizer: blank out comments and the contents of string/template/regex literals -------
// Offsets and newlines are kept, so positions in the result are positions in the source. The
// `${...}` parts of templates stay code. Returns the masked text and every quoted string.
const REGEX_AFTER_WORD = new Set(['return', 'typeof', 'case', 'do', 'else', 'in', 'of', 'new',
  'delete', 'void', 'throw', 'instanceof', 'yield', 'await']);
function tokenize(src) {
  const out = src.split('');
  const strings = [];
  const templates = []; // per open `${`: depth of `{` nesting inside it
  const blank = (a, b) => { for (let k = a; k < b; k++) if (out[k] !== '\n') out[k] = ' '; };
  let prev = ''; // last significant token: a word, or one punctuation character
  let i = 0;
  const n = src.length;
  while (i < n) {
    const c = src[i];
    const d = src[i + 1];
    if (c === '/' && d === '/') {
      const e = src.indexOf('\n', i);
      const end = e < 0 ? n : e;
      blank(i, end); i = end;
    } else if (c === '/' && d === '*') {
      const e = src.indexOf('*/', i + 2);
      const end = e < 0 ? n : e + 2;
      blank(i, end); i = end;
    } else if (c === '"' || c === "'") {
      let j = i + 1;
      while (j < n && src[j] !== c && src[j] !== '\n') j += src[j] === '\\' ? 2 : 1;
      strings.push({ start: i, value: src.slice(i + 1, j) });
      blank(i + 1, j); i = j + 1; prev = '"';
    } else if (c === '`' || (c === '}' && templates.at(-1) === 0)) {
      if (c === '}') templates.pop();
      let j = i + 1;
      while (j < n && src[j] !== '`' && !(src[j] === '$' && src[j + 1] === '{')) {
        j += src[j] === '\\' ? 2 : 1;
      }
      blank(i + 1, j);
      if (src[j] === '$') { templates.push(0); i = j + 2; prev = '{'; } else { i = j + 1; prev = '"'; }
    } else if (c === '/' && (/^[^\w$)\]}"]$|^$/.test(prev) || REGEX_AFTER_WORD.has(prev))) {
      let j = i + 1;
      let inClass = false;
      while (j < n && src[j] !== '\n' && (inClass || src[j] !== '/')) {
        if (src[j] === '\\') j++;
        else if (src[j] === '[') inClass = true;
        else if (src[j] === ']') inClass = false;
        j++;
      }
      blank(i + 1, j); i = j + 1; prev = 'regex';
    } else if (/[\w$]/.test(c)) {
      let j = i;
      while (j < n && /[\w$]/.test(src[j])) j++;
      prev = src.slice(i, j); i = j;
    } else {
      if (templates.length && c === '{') templates[templates.length - 1]++;
      if (templates.length && c === '}') templates[templates.length - 1]--;
      if (!/\s/.test(c)) prev = c;
      i++;
    }
  }
  return { code: out.join(''), strings };
}

// Import specifiers: a string right after `from`, `import` or `import(`.
function importsOf(code, strings) {
  const found = [];
  for (const s of strings) {
    const before = code.slice(Math.max(0, s.start - 40), s.start);
    if (/(?:\bfrom|(?<![\w$.])import\s*\(?)\s*$/.test(before)) found.push(s);
  }
  return found;
}

// ---- Files, modules, resolution -------------------------------------------------------------
const posix = (p) => p.split(path.sep).join('/');
const isFile = (p) => existsSync(p) && statSync(p).isFile();
const isTestFile = (rel) => /\.test\.[cm]?tsx?$/.test(rel);
const isGenerated = (rel) => rel.split('/').includes('gen');

function collect(root) {
  const files = [];
  const walk = (dir) => {
    if (!existsSync(dir)) return;
    for (const ent of readdirSync(dir, { withFileTypes: true })) {
      if (ent.name === 'node_modules' || ent.name.startsWith('.')) continue;
      const p = path.join(dir, ent.name);
      if (ent.isDirectory()) { if (ent.name !== 'gen') walk(p); } else if (/\.[cm]?tsx?$/.test(ent.name)) files.push(p);
    }
  };
  for (const top of ROOTS) walk(path.join(root, top));
  return files.map((f) => posix(path.relative(root, f))).sort();
}

// 'src/raft/log.ts' -> 'raft'; 'cluster-test/sim/x.ts' -> 'cluster-test'; 'src/x.ts' -> ''.
function moduleOf(rel) {
  const parts = rel.split('/');
  if (parts[0] !== 'src') return ROOTS.includes(parts[0]) ? parts[0] : null;
  return parts.length > 2 ? parts[1] : '';
}

function resolve(root, fromRel, spec) {
  const abs = path.resolve(root, path.dirname(fromRel), spec);
  const swapped = [[/\.js$/, '.ts'], [/\.jsx$/, '.tsx'], [/\.js$/, '.d.ts'], [/\.mjs$/, '.mts'], [/\.cjs$/, '.cts']]
    .filter(([re]) => re.test(abs)).map(([re, ext]) => abs.replace(re, ext));
  for (const p of [...swapped, abs, `${abs}.ts`, path.join(abs, 'index.ts')]) {
    if (isFile(p)) return posix(path.relative(root, p));
  }
  return null;
}

// ---- Cycles: Tarjan's strongly connected components, then one shortest cycle per component --
function cycles(graph) {
  const index = new Map(), low = new Map(), onStack = new Set(), stack = [], sccs = [];
  let next = 0;
  const visit = (v) => {
    index.set(v, next); low.set(v, next); next++; stack.push(v); onStack.add(v);
    for (const w of graph.get(v)?.keys() ?? []) {
      if (!index.has(w)) { visit(w); low.set(v, Math.min(low.get(v), low.get(w))); } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), index.get(w)));
    }
    if (low.get(v) === index.get(v)) {
      const scc = [];
      let w;
      do { w = stack.pop(); onStack.delete(w); scc.push(w); } while (w !== v);
      sccs.push(scc);
    }
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  const result = [];
  for (const scc of sccs) {
    const members = new Set(scc);
    const start = [...scc].sort()[0];
    if (scc.length === 1 && !graph.get(start)?.has(start)) continue;
    // Breadth-first from `start` back to itself, staying inside the component.
    const parent = new Map();
    const queue = [start];
    let last = null;
    while (queue.length && last === null) {
      const v = queue.shift();
      for (const w of [...(graph.get(v)?.keys() ?? [])].sort()) {
        if (w === start) { last = v; break; }
        if (members.has(w) && !parent.has(w)) { parent.set(w, v); queue.push(w); }
      }
    }
    const cyclePath = [start];
    for (let v = last; v !== start; v = parent.get(v)) cyclePath.splice(1, 0, v);
    result.push([...cyclePath, start]);
  }
  return result;
}

// ---- The check ------------------------------------------------------------------------------
export function check(root) {
  const files = collect(root);
  const violations = [];
  const report = (file, line, rule, msg) => violations.push({ file, line, rule, msg });
  const fileGraph = new Map(); // file -> Map(target -> line)
  const moduleGraph = new Map(); // module -> Map(target module -> {file, line})
  const unknownReported = new Set();
  let edges = 0;

  for (const rel of files) {
    const src = readFileSync(path.join(root, rel), 'utf8');
    const { code, strings } = tokenize(src);
    const lineStarts = [0];
    for (let k = 0; k < src.length; k++) if (src[k] === '\n') lineStarts.push(k + 1);
    const lineOf = (offset) => {
      let lo = 0, hi = lineStarts.length - 1;
      while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (lineStarts[mid] <= offset) lo = mid; else hi = mid - 1; }
      return lo + 1;
    };
    const mod = moduleOf(rel);
    const test = isTestFile(rel);
    const testing = rel.split('/').slice(2, -1).includes('testing');
    const known = mod in LAYERS;
    if (!known && !unknownReported.has(mod)) {
      unknownReported.add(mod);
      report(rel, 1, 'unknown-module', mod === ''
        ? 'files directly under src/ belong to no module; move this file into a module folder'
        : `module '${mod}' is not in the LAYERS table of scripts/check-architecture.mjs; add it with the modules it may import`);
    }
    fileGraph.set(rel, new Map());

    for (const { start, value: spec } of importsOf(code, strings)) {
      const line = lineOf(start);
      if (!spec.startsWith('.')) {
        const builtin = spec.startsWith('node:') || BUILTINS.has(spec) || BUILTINS.has(spec.split('/')[0]);
        if (builtin && PURE.has(mod) && !test) {
          report(rel, line, 'pure-import', `src/${mod} is pure and must not import the Node builtin '${spec}'; take a port from base instead (ARCHITECTURE.md)`);
        }
        continue;
      }
      const target = resolve(root, rel, spec);
      if (target === null) { report(rel, line, 'unresolved', `relative import '${spec}' names no file`); continue; }
      if (rel.startsWith('src/') && !test && !testing && target.split('/').slice(2, -1).includes('testing')) {
        report(rel, line, 'testing-import', `shipped code must not import the test helper '${spec}' (testing/ folders hold reference models and helpers for tests only)`);
      }
      const tmodRaw = moduleOf(target);
      if (tmodRaw === null) continue; // outside the source roots (e.g. package.json): not a module edge
      edges++;
      if (!isGenerated(target)) fileGraph.get(rel).set(target, fileGraph.get(rel).get(target) ?? line);
      const tmod = isGenerated(target) && tmodRaw !== mod ? 'gen' : tmodRaw;
      if (tmod === mod || !known || !(tmod in LAYERS || tmod === 'gen')) continue;
      if (!moduleGraph.has(mod)) moduleGraph.set(mod, new Map());
      if (tmod !== 'gen' && !moduleGraph.get(mod).has(tmod)) moduleGraph.get(mod).set(tmod, { file: rel, line });
      if (OUTSIDE_SRC.has(tmod)) {
        report(rel, line, 'layering', `${OUTSIDE_SRC.has(mod) ? mod : 'src'} must not import from ${tmod}/ ('${spec}')`);
      } else if (!allowedFor(mod).includes(tmod)) {
        const allowed = allowedFor(mod).join(', ') || 'nothing';
        report(rel, line, 'layering', `${mod} must not import ${tmod} ('${spec}'); ${mod} may import: ${allowed}`);
      }
      const frontDoor = target === `src/${tmod}/index.ts`;
      const testingDoor = target === `src/${tmod}/testing/index.ts` && (test || testing || OUTSIDE_SRC.has(mod));
      if (tmod !== 'gen' && !OUTSIDE_SRC.has(tmod) && !frontDoor && !testingDoor) {
        report(rel, line, 'front-door', `'${spec}' reaches inside module ${tmod}; import from its front door src/${tmod}/index.ts`);
      }
    }

    if (PURE.has(mod) && !test && !testing) {
      const hits = new Map(); // line -> names found on it
      for (const [re, what] of AMBIENT) {
        for (const m of code.matchAll(re)) {
          if (m[0].endsWith('(') && isDeclaration(code, m.index + m[0].length - 1)) continue;
          const line = lineOf(m.index);
          hits.set(line, [...(hits.get(line) ?? []), what]);
        }
      }
      for (const [line, what] of [...hits].sort((a, b) => a[0] - b[0])) {
        report(rel, line, 'pure-ambient', `src/${mod} is pure and must not use ambient time or randomness (${[...new Set(what)].join(', ')}); use ticks or the injected Clock/Random port`);
      }
    }
    if (mod !== null && rel.startsWith('src/') && !test) {
      for (const m of code.matchAll(ANY)) {
        report(rel, lineOf(m.index), 'no-any', "the 'any' type is not allowed; use unknown and narrow (STYLE.md)");
      }
    }
  }

  for (const c of cycles(fileGraph)) {
    report(c[0], fileGraph.get(c[0]).get(c[1]), 'cycle', `import cycle ${c.join(' -> ')}`);
  }
  for (const c of cycles(moduleGraph)) {
    const at = moduleGraph.get(c[0]).get(c[1]);
    report(at.file, at.line, 'module-cycle', `module cycle ${c.join(' -> ')}`);
  }
  violations.sort((a, b) => a.file.localeCompare(b.file) || a.line - b.line || a.rule.localeCompare(b.rule));
  const moduleEdges = [...moduleGraph.values()].reduce((sum, m) => sum + m.size, 0);
  return { violations, files: files.length, edges, moduleEdges };
}

// ---- Command line ---------------------------------------------------------------------------
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = path.resolve(process.argv[2] ?? path.join(path.dirname(fileURLToPath(import.meta.url)), '..'));
  if (!ROOTS.some((r) => existsSync(path.join(root, r)))) {
    console.error(`check-architecture: ${root} has none of ${ROOTS.join(', ')}; pass the repository root`);
    process.exit(2);
  }
  const { violations, files, edges, moduleEdges } = check(root);
  for (const v of violations) console.error(`${v.file}:${v.line}: ${v.rule}: ${v.msg}`);
  if (violations.length) {
    console.error(`check-architecture: ${violations.length} violation(s) in ${files} files (ARCHITECTURE.md, scripts/README.md)`);
    process.exit(1);
  }
  console.log(`check-architecture: OK, ${files} files checked, ${edges} import edges (${moduleEdges} between modules)`);
}
