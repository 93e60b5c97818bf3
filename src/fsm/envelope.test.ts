import t from 'tap';
import { CommandType, encodeEnvelope, decodeBody } from './envelope.js';
import { packBody, unpackBody, PACK_BUFFER_RESET_BYTES } from './envelope.js';

// msgpackr packs into one module-level buffer it grows and never shrinks; a small message
// packed after a large one is a view into that buffer. Each case packs something large, then
// something small, and checks that the small result no longer lives in a buffer the size of
// the large one (it would without releaseLargePackBuffer: docs/performance.md).
const big = { blob: 'x'.repeat(6 * 1024 * 1024) };

t.test('after a large snapshot header, msgpackr does not keep a buffer of its size', async (t) => {
  const bytes = packBody(big);
  t.ok(bytes.length > 6 * 1024 * 1024, 'the large body packed');
  t.equal(bytes.byteOffset, 0, 'the large result is a copy of exactly its size');
  t.equal(bytes.buffer.byteLength, bytes.length);
  t.same(unpackBody(bytes), big, 'and decodes to what was packed');
  const small = packBody({ a: 1 });
  t.ok(small.buffer.byteLength < PACK_BUFFER_RESET_BYTES, `the next small body lives in a ${small.buffer.byteLength}-byte buffer`);
  t.same(unpackBody(small), { a: 1 });
});

t.test('after a large log entry (a restore carrying a snapshot), the same', async (t) => {
  const entry = encodeEnvelope(CommandType.Restore, { snapshot: new Uint8Array(5 * 1024 * 1024).fill(7) });
  t.equal(entry[0], CommandType.Restore);
  const body = decodeBody(entry) as { snapshot: Uint8Array };
  t.equal(body.snapshot.length, 5 * 1024 * 1024, 'the entry decodes');
  const small = packBody([1, 2, 3]);
  t.ok(small.buffer.byteLength < PACK_BUFFER_RESET_BYTES, `the next small body lives in a ${small.buffer.byteLength}-byte buffer`);
});

t.test('small bodies are packed as before (no copy, no new buffer)', async (t) => {
  const a = packBody({ a: 1 });
  const b = packBody({ b: 2 });
  t.equal(a.buffer, b.buffer, 'consecutive small bodies share msgpackr\'s buffer');
  t.same(unpackBody(a), { a: 1 });
  t.same(unpackBody(b), { b: 2 });
});
