/**
 * Issue 15 (Security, part 1): a structure-aware fuzzer (fast-check) on the cluster port's
 * decoders and on `Forward`, biased toward almost-valid input: valid messages and envelopes with
 * mutated bytes, every type byte, truncated and extended bodies, fields of the wrong type, huge
 * lengths.
 *
 * 1. `decodeMessage` (the Raft wire codec): throws only `WireError`; whatever it accepts
 *    re-encodes and decodes to the same message.
 * 2. `parseConfigChange` (every membership door): throws only INVALID_ARGUMENT; what it accepts
 *    is one of the four shapes.
 * 3. A live in-process three-node cluster (plaintext on loopback, so the caller's claim is
 *    believed: the fuzzer claims to be member n2 for Forward, which makes the leader's own
 *    checks the only guard): Forward of mutated envelopes and membership changes to the leader.
 *    Every call is answered (a gRPC status or a typed error with a message), and the leader's
 *    log grows by exactly the number of Forwards it accepted (all refused ones leave no trace).
 * 4. The same cluster: Raft streams from the non-member n9 carrying mutated messages, to a
 *    follower and the leader. Every stream is answered; nothing changes: every node's term,
 *    commit index and store revision are as before.
 * Throughout, no node fails (`status().failed`) and no unhandled rejection or exception occurs
 * in this process (which hosts the nodes). Prints the seed and the number of inputs;
 * FUZZ_SEED repeats a run, FUZZ_SCALE multiplies the number of inputs.
 *
 * Here rather than in src/forwarding: it runs agents, and only server may import server
 * (scripts/check-architecture.mjs).
 */
import fc from 'fast-check';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import t from 'tap';
import { CairnError, ErrorCode, logIndex, nodeId, term } from '../base/index.js';
import { ClientPool, WireError, decodeMessage, encodeMessage, packValue, type ClusterClient, type ForwardRequestMsg, type ForwardResponseMsg } from '../forwarding/index.js';
import { encodeEnvelope } from '../fsm/index.js';
import { createLogger } from '../platform/index.js';
import { parseConfigChange, type Message } from '../raft/index.js';
import { startAgent, type Agent } from './agent.js';
import { clusterConfigs, waitForAgreedLeader } from './testing/index.js';

const SEED = process.env['FUZZ_SEED'] !== undefined ? Number(process.env['FUZZ_SEED']) : Date.now() % 2 ** 31;
const SCALE = Number(process.env['FUZZ_SCALE'] ?? '1');
const runs = (n: number): number => Math.max(1, Math.round(n * SCALE));
t.comment(`fuzz seed ${SEED} (FUZZ_SEED=${SEED} repeats this run)`);

let inputs = 0;
const unexpected: unknown[] = [];
const onUnhandled = (e: unknown): void => {
  unexpected.push(e);
};
process.on('unhandledRejection', onUnhandled);
process.on('uncaughtException', onUnhandled);

// ---- Arbitraries: valid values, then mutations of their bytes -------------------------------

const N = nodeId;
const anyTerm = fc.nat({ max: 50 }).map(term);
const anyIndex = fc.nat({ max: 1000 }).map(logIndex);

/** Well-formed Raft messages of every type, from `from` to `to`. */
function validMessage(from: string, to: string): fc.Arbitrary<Message> {
  const base = { from: N(from), to: N(to) };
  const entry = fc.record({ index: anyIndex, term: anyTerm, data: fc.uint8Array({ maxLength: 40 }) });
  const member = fc.record({ id: fc.constantFrom(N('n1'), N('n2'), N('n9')), suffrage: fc.constantFrom('voter' as const, 'learner' as const), address: fc.constant('127.0.0.1:1') });
  return fc.oneof(
    fc.record({ term: anyTerm, index: anyIndex, logTerm: anyTerm, commit: anyIndex, entries: fc.array(entry, { maxLength: 3 }) }).map((m) => ({ ...base, type: 'app' as const, ...m })),
    fc.record({ term: anyTerm, index: anyIndex, reject: fc.boolean(), hintIndex: anyIndex, hintTerm: anyTerm }).map((m) => ({ ...base, type: 'app-resp' as const, ...m })),
    fc.record({ term: anyTerm, lastIndex: anyIndex, lastTerm: anyTerm, transfer: fc.boolean(), type: fc.constantFrom('vote' as const, 'pre-vote' as const) }).map((m) => ({ ...base, ...m })),
    fc.record({ term: anyTerm, reject: fc.boolean(), type: fc.constantFrom('vote-resp' as const, 'pre-vote-resp' as const) }).map((m) => ({ ...base, ...m })),
    fc.record({ term: anyTerm, commit: anyIndex, readSeq: fc.nat() }).map((m) => ({ ...base, type: 'heartbeat' as const, ...m })),
    fc.record({ term: anyTerm, readSeq: fc.nat() }).map((m) => ({ ...base, type: 'heartbeat-resp' as const, ...m })),
    fc.record({ term: anyTerm, index: anyIndex, mterm: anyTerm, members: fc.array(member, { maxLength: 3 }), chunk: fc.uint8Array({ maxLength: 32 }), extra: fc.nat({ max: 64 }) }).map((m) => ({
      ...base,
      type: 'snap' as const,
      term: m.term,
      meta: { index: m.index, term: m.mterm, config: { members: m.members } },
      offset: 0,
      totalBytes: m.chunk.length + m.extra,
      chunk: m.chunk,
    })),
    fc.record({ term: anyTerm, snapIndex: anyIndex, nextOffset: fc.nat(), chunkOffset: fc.nat() }).map((m) => ({ ...base, type: 'snap-resp' as const, ...m })),
    fc.record({ term: anyTerm }).map((m) => ({ ...base, type: 'timeout-now' as const, ...m })),
    fc.record({ term: anyTerm, requestIds: fc.array(fc.string({ maxLength: 8 }), { maxLength: 3 }) }).map((m) => ({ ...base, type: 'read-index' as const, ...m })),
    fc.record({ term: anyTerm, requestIds: fc.array(fc.string({ maxLength: 8 }), { maxLength: 3 }), index: anyIndex, reject: fc.boolean() }).map((m) => ({ ...base, type: 'read-index-resp' as const, ...m })),
  ) as fc.Arbitrary<Message>;
}

/** Values of the wrong type for a field, including huge numbers and lengths. */
const wrongValue = fc.oneof(
  fc.constant(null),
  fc.constant(-1),
  fc.constant(2 ** 53),
  fc.constant(1.5),
  fc.constant(Number.NaN),
  fc.constant('x'.repeat(2000)),
  fc.string({ maxLength: 5 }),
  fc.boolean(),
  fc.array(fc.nat(), { maxLength: 3 }),
  fc.uint8Array({ maxLength: 8 }),
  fc.dictionary(fc.string({ maxLength: 4 }), fc.nat(), { maxKeys: 2 }),
);

/** Byte-level mutations of a valid encoding: flips, overwrites, truncation, extension, huge msgpack lengths. */
function mutated(valid: fc.Arbitrary<Uint8Array>): fc.Arbitrary<Uint8Array> {
  return fc.tuple(valid, fc.nat(), fc.nat({ max: 255 }), fc.nat({ max: 6 }), fc.uint8Array({ maxLength: 16 })).map(([b, pos, byte, kind, tail]) => {
    const out = Uint8Array.from(b);
    const i = out.length === 0 ? 0 : pos % out.length;
    switch (kind) {
      case 0:
        if (out.length > 0) out[i] = byte;
        return out;
      case 1:
        if (out.length > 0) out[i] = (out[i] ?? 0) ^ (1 << (byte % 8));
        return out;
      case 2:
        return out.subarray(0, i); // truncated
      case 3:
        return Uint8Array.from([...out, ...tail]); // extended
      case 4: {
        // A huge length: a str32/bin32/array32/map32 header claiming ~4 GiB, spliced in.
        const header = [0xdb, 0xc6, 0xdd, 0xdf][byte % 4] as number;
        return Uint8Array.from([...out.subarray(0, i), header, 0xff, 0xff, 0xff, 0xf0, ...out.subarray(i)]);
      }
      case 5:
        return Uint8Array.from([...out.subarray(0, i), ...tail, ...out.subarray(i)]); // inserted bytes
      default:
        return tail; // arbitrary bytes
    }
  });
}

/** Valid messages with one field replaced by a value of the wrong type (or removed, or added). */
function wrongField(from: string, to: string): fc.Arbitrary<Uint8Array> {
  return fc.tuple(validMessage(from, to), fc.nat(), wrongValue, fc.nat({ max: 2 })).map(([m, k, v, how]) => {
    const o: Record<string, unknown> = { ...m };
    const keys = Object.keys(o);
    const key = keys[k % keys.length] as string;
    if (how === 0) o[key] = v;
    else if (how === 1) delete o[key];
    else o[`extra${k % 3}`] = v;
    return packValue(o);
  });
}

function rawMessage(from: string, to: string): fc.Arbitrary<Uint8Array> {
  const valid = validMessage(from, to).map(encodeMessage);
  return fc.oneof({ weight: 1, arbitrary: valid }, { weight: 4, arbitrary: mutated(valid) }, { weight: 3, arbitrary: wrongField(from, to) });
}

const artist = { group: 'demo', groupVersion: 'v1', kind: 'Artist' };
const tenancy = { partition: 'default', namespace: 'default' };
let seq = 0;
const validWrite = fc.record({ name: fc.stringMatching(/^[a-z][a-z0-9-]{0,10}$/) }).map(({ name }) => {
  seq++;
  return { requestId: `fuzz-${SEED}-${seq}`, time: new Date(0).toISOString(), uid: `uid-${seq}`, generation: `gen-${seq}`, id: { type: artist, tenancy, name: `fz-${name}` }, data: { name }, expectedVersion: 0 };
});

/** Envelopes: every type byte with a write-shaped or random body; valid writes with mutated bytes; bodies with wrong fields. */
const envelope: fc.Arbitrary<Uint8Array> = fc.oneof(
  fc.tuple(fc.nat({ max: 255 }), fc.oneof(validWrite, wrongValue)).map(([type, body]) => encodeEnvelope(type, body)),
  mutated(validWrite.map((w) => encodeEnvelope(0x10, w))),
  fc.tuple(fc.constantFrom(0x10, 0x11, 0x12, 0x13), validWrite, fc.nat(), wrongValue).map(([type, w, k, v]) => {
    const o: Record<string, unknown> = { ...w };
    const keys = Object.keys(o);
    o[keys[k % keys.length] as string] = v;
    return encodeEnvelope(type, o);
  }),
  fc.uint8Array({ maxLength: 64 }),
);

function configChangeValue(ids: readonly string[]): fc.Arbitrary<unknown> {
  return fc.oneof(
    fc.record({ type: fc.constantFrom('add-learner', 'add-voter', 'promote', 'remove', 'make-leader', ''), id: fc.oneof(fc.constantFrom(...ids, '', 'EVIL/x', 'a'.repeat(70)), wrongValue), address: fc.oneof(fc.constantFrom('127.0.0.1:1', 'h:0', 'http://x', 'h:70000', ''), wrongValue) }, { requiredKeys: ['type'] }),
    wrongValue,
  );
}

// ---- 1 and 2: the pure decoders ----------------------------------------------------------------

/** JSON with byte fields as plain arrays: a decoded message holds Buffers or Uint8Arrays, the same bytes either way. */
function canonical(m: unknown): string {
  return JSON.stringify(m, (_k, v: unknown) => {
    if (v instanceof Uint8Array) return Array.from(v);
    const o = v as { type?: unknown; data?: unknown } | null;
    return typeof o === 'object' && o !== null && o.type === 'Buffer' && Array.isArray(o.data) ? o.data : v;
  });
}

t.test('decodeMessage throws only WireError, and what it accepts round-trips', (t) => {
  const n = runs(5000);
  fc.assert(
    fc.property(rawMessage('n2', 'n1'), (b) => {
      inputs++;
      let m: Message;
      try {
        m = decodeMessage(b);
      } catch (e) {
        if (e instanceof WireError) return;
        throw e;
      }
      const again = decodeMessage(encodeMessage(m));
      if (canonical(again) !== canonical(m)) throw new Error(`accepted message does not round-trip: ${JSON.stringify(m)}`);
    }),
    { seed: SEED, numRuns: n },
  );
  t.pass(`${n} messages decoded or refused with WireError`);
  t.end();
});

t.test('parseConfigChange throws only INVALID_ARGUMENT, and accepts only the four shapes', (t) => {
  const n = runs(2000);
  fc.assert(
    fc.property(configChangeValue(['n9', 'n1']), (v) => {
      inputs++;
      try {
        const c = parseConfigChange(v);
        if (!['add-learner', 'add-voter', 'promote', 'remove'].includes(c.type)) throw new Error(`accepted an unknown change ${JSON.stringify(c)}`);
      } catch (e) {
        if (e instanceof CairnError && e.code === ErrorCode.INVALID_ARGUMENT) return;
        throw e;
      }
    }),
    { seed: SEED + 1, numRuns: n },
  );
  t.pass(`${n} membership changes parsed or refused with INVALID_ARGUMENT`);
  t.end();
});

// ---- 3 and 4: a live cluster --------------------------------------------------------------------

function call<Res>(fn: (req: never, o: object, cb: (err: (Error & { code?: number }) | null, res?: Res) => void) => unknown, req: unknown): Promise<{ code: number; res: Res | undefined }> {
  return new Promise((resolve) => {
    fn(req as never, { deadline: Date.now() + 10_000 }, (err, res) => resolve({ code: err ? (err.code ?? -1) : 0, res }));
  });
}

function raftCall(client: ClusterClient, batch: { clusterId: string; from: string; to: string; messages: Uint8Array[] }): Promise<number> {
  return new Promise((resolve) => {
    const c = client.raft((err) => resolve(err?.code ?? 0));
    c.on('error', () => undefined);
    c.write(batch);
    c.end();
  });
}

t.test('Forward and Raft streams with fuzzed input: every call answered, nothing refused leaves a trace, no node fails', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'cairn-fuzz-'));
  const agents: Agent[] = [];
  const pool = new ClientPool();
  t.teardown(async () => {
    pool.close();
    for (const a of agents) await a.close();
    await rm(dir, { recursive: true, force: true });
  });
  // A 5-10 s election timeout (50 ms ticks x 100-200): this one process hosts three nodes and
  // the fuzzer on a shared machine, and a pause of the event loop must not look like an input's
  // effect; a believed timeout-now or vote would still act at once.
  for (const cfg of await clusterConfigs(dir, 3, { tickMs: 50, electionTicks: 100 })) agents.push(await startAgent(cfg, { logger: createLogger({ level: 'silent', nodeId: cfg.nodeId }) }));
  await Promise.all(agents.map((a) => a.ready));
  // The leader all three name in one term (not the first node to call itself leader).
  const leader = await waitForAgreedLeader(agents, 30_000);
  const follower = agents.find((a) => a !== leader) as Agent;
  const status = async (a: Agent): Promise<{ term: number; commit: number; last: number; revision: string; failed: string | undefined }> => {
    const c = a.coordinator();
    if (!c) throw new Error(`${a.nodeId} has no coordinator`);
    const s = c.status();
    const r = await c.read('stale', () => null);
    return { term: s.term, commit: s.commit, last: s.lastIndex, revision: String(r.revision), failed: s.failed };
  };
  const statuses = (): Promise<Awaited<ReturnType<typeof status>>[]> => Promise.all(agents.map(status));
  const lclient = pool.get(leader.grpcAddress);
  const hello = await call<{ clusterId: string }>(lclient.hello.bind(lclient) as never, { clusterId: '', from: 'fuzz', address: '', bootstrapExpect: 0 });
  const clusterId = hello.res?.clusterId ?? '';
  t.ok(clusterId !== '', `cluster ${clusterId}, leader ${leader.nodeId}`);

  // 3. Forward to the leader, claiming to be member n2. Membership changes name no real node
  // and are malformed in some way (a bad id), so none can be accepted: an accepted add of n9
  // would make the Raft fuzz below a member's, and a remove would shrink the cluster. (A
  // mutation could still turn one into an acceptable change; then the log-growth check below
  // would show it.)
  const FORWARDED_CHANGE = configChangeValue(['EVIL/x9', 'N1']);
  const started = performance.now();
  const beforeForward = await status(leader);
  let accepted = 0;
  let refused = 0;
  const codes = new Map<string, number>();
  const answer = async (req: Partial<ForwardRequestMsg>): Promise<void> => {
    inputs++;
    const r = await call<ForwardResponseMsg>(lclient.forward.bind(lclient) as never, { clusterId, from: 'n2', timeoutMs: 5000, ...req } satisfies Partial<ForwardRequestMsg>);
    const code = r.code !== 0 ? `grpc-${r.code}` : (r.res?.error?.code ?? 'OK');
    codes.set(code, (codes.get(code) ?? 0) + 1);
    if (code === 'OK') accepted++;
    else {
      refused++;
      if (r.code === 0 && (r.res?.error?.message ?? '') === '') throw new Error(`refused with ${code} but no message`);
      if (code !== 'INVALID_ARGUMENT' && code !== 'INVALID_CONFIG_CHANGE' && code !== 'CAS_FAILED' && code !== 'NOT_FOUND' && code !== 'ALREADY_EXISTS') throw new Error(`unexpected answer ${code}: ${r.res?.error?.message ?? ''}`);
    }
  };
  // Every type byte, with a well-formed write body and with an empty (nil) body: 512 inputs.
  const sample = fc.sample(validWrite, { seed: SEED, numRuns: 256 });
  for (let type = 0; type < 256; type++) {
    await answer({ op: 'envelope', envelope: encodeEnvelope(type, sample[type]) });
    await answer({ op: 'envelope', envelope: Uint8Array.from([type, 0xc0]) });
  }
  const forwards = runs(3000);
  await fc.assert(
    fc.asyncProperty(fc.oneof({ weight: 5, arbitrary: envelope.map((e) => ({ op: 'envelope' as const, envelope: e })) }, { weight: 1, arbitrary: fc.oneof(FORWARDED_CHANGE.map(packValue), mutated(FORWARDED_CHANGE.map(packValue))).map((c) => ({ op: 'configChange' as const, configChange: c })) }), async (req) => {
      await answer(req);
    }),
    { seed: SEED + 2, numRuns: forwards },
  );
  const afterForward = await status(leader);
  t.comment(`Forward: 512 + ${forwards} inputs in ${Math.round(performance.now() - started)} ms; answers ${[...codes].map(([k, v]) => `${k}=${v}`).join(', ')}`);
  t.equal(afterForward.last - beforeForward.last, accepted, `the leader's log grew by exactly the ${accepted} accepted Forwards (${refused} refused left no entry): last index ${beforeForward.last} -> ${afterForward.last}`);
  t.equal(afterForward.term, beforeForward.term, 'the term is unchanged');

  // 4. Raft streams from the non-member n9 (batches of 20 messages), to a follower and the leader.
  // Every node has applied the Forward phase before the baseline is taken: a follower still
  // catching up would move its commit index and revision after it, and look like the fuzz's
  // effect. (This waited at most 10 s and then went on silently; now it fails if they never do.)
  const settled = async (): Promise<boolean> => {
    const all = await statuses();
    return all.every((x) => x.commit === afterForward.commit && x.revision === all[0]?.revision);
  };
  for (const end = Date.now() + 60_000; !(await settled()); ) {
    if (Date.now() > end) throw new Error(`the nodes did not settle on commit ${afterForward.commit} within 60 s: ${JSON.stringify(await statuses())}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const before = await statuses();
  const batches = runs(150);
  let messages = 0;
  const raftCodes = new Map<number, number>();
  await fc.assert(
    fc.asyncProperty(
      fc.oneof(...[leader, follower].map((target) => fc.tuple(fc.constant(target), fc.array(rawMessage('n9', target.nodeId), { minLength: 20, maxLength: 20 })))),
      async ([target, msgs]) => {
      inputs += msgs.length;
      messages += msgs.length;
      const code = await raftCall(pool.get(target.grpcAddress), { clusterId, from: 'n9', to: target.nodeId, messages: msgs });
      raftCodes.set(code, (raftCodes.get(code) ?? 0) + 1);
      },
    ),
    { seed: SEED + 3, numRuns: batches },
  );
  t.comment(`Raft: ${messages} messages in ${batches} streams from n9; stream status codes ${[...raftCodes].map(([k, v]) => `${k}=${v}`).join(', ')}`);
  await new Promise((r) => setTimeout(r, 500));
  const after = await statuses();
  for (const [i, a] of agents.entries()) {
    const b = before[i];
    const x = after[i];
    t.same({ term: x?.term, commit: x?.commit, revision: x?.revision }, { term: b?.term, commit: b?.commit, revision: b?.revision }, `${a.nodeId}: term, commit index and store revision unchanged by the Raft fuzz`);
    t.notOk(x?.failed, `${a.nodeId} has not failed`);
  }
  t.equal(leader.coordinator()?.status().role, 'leader', `${leader.nodeId} is still the leader`);
  t.same(unexpected.map(String), [], 'no unhandled rejection or exception in the process hosting the nodes');
  t.comment(`total inputs: ${inputs} (seed ${SEED})`);
  t.ok(inputs >= 10_000 * Math.min(1, SCALE), `at least 10,000 inputs (${inputs})`);
});
