import t from 'tap';
import { decodeCommand, encodeCommand, KvEnvelope, KvStateMachine } from './kv.js';

t.test('commands are envelopes: type byte then msgpack', async (t) => {
  const put = encodeCommand({ type: 'put', opId: 'c1.1', key: 'k', value: 'v' });
  t.equal(put[0], KvEnvelope.Put);
  t.same(decodeCommand(put), { type: 'put', opId: 'c1.1', key: 'k', value: 'v' });
  const cas = encodeCommand({ type: 'cas', opId: 'c1.2', key: 'k', expected: null, value: 'w' });
  t.equal(cas[0], KvEnvelope.Cas);
  t.same(decodeCommand(cas), { type: 'cas', opId: 'c1.2', key: 'k', expected: null, value: 'w' });
  t.equal(decodeCommand(new Uint8Array([0x01])), undefined, 'a Raft no-op is not a command');
  t.throws(() => decodeCommand(new Uint8Array([0x33, 0xc0])), 'an unknown type stops the node');
});

t.test('put and compare-and-swap, decided at apply time', async (t) => {
  const kv = new KvStateMachine();
  t.same(kv.apply(encodeCommand({ type: 'cas', opId: 'a', key: 'k', expected: 'x', value: 'y' })), { opId: 'a', ok: false });
  t.equal(kv.get('k'), null);
  t.same(kv.apply(encodeCommand({ type: 'cas', opId: 'b', key: 'k', expected: null, value: 'y' })), { opId: 'b', ok: true });
  t.same(kv.apply(encodeCommand({ type: 'put', opId: 'c', key: 'k', value: 'z' })), { opId: 'c', ok: true });
  t.same(kv.apply(encodeCommand({ type: 'cas', opId: 'd', key: 'k', expected: 'z', value: 'q' })), { opId: 'd', ok: true });
  t.equal(kv.get('k'), 'q');
});

t.test('snapshots round-trip and equal states have equal digests and bytes', async (t) => {
  const a = new KvStateMachine();
  const b = new KvStateMachine();
  a.apply(encodeCommand({ type: 'put', opId: '1', key: 'x', value: '1' }));
  a.apply(encodeCommand({ type: 'put', opId: '2', key: 'y', value: '2' }));
  b.apply(encodeCommand({ type: 'put', opId: '3', key: 'y', value: '2' }));
  b.apply(encodeCommand({ type: 'put', opId: '4', key: 'x', value: '1' }));
  t.equal(a.digest(), b.digest());
  t.same(a.encode(), b.encode(), 'canonical encoding regardless of insertion order');
  const c = KvStateMachine.decode(a.encode());
  t.equal(c.digest(), a.digest());
  t.equal(c.get('y'), '2');
  b.apply(encodeCommand({ type: 'put', opId: '5', key: 'x', value: '9' }));
  t.not(a.digest(), b.digest());
});
