import t from 'tap';
import { TypeRegistry } from '../../api/index.js';
import { registerStreamingTypes, StatusKey } from '../../types/index.js';
import { streamingControllers, STREAMING_DEFAULTS } from './controllers.js';

/**
 * What the runtime needs to be told (src/controller/runtime/types.ts): the scope of every type a
 * controller manages or watches, as registered, so its caches follow the right tenancy
 * without probing the server; and unique names (= status keys).
 */
t.test('every managed and watched type is declared with the scope it is registered with', async (t) => {
  const registry = new TypeRegistry();
  registerStreamingTypes(registry);
  const specs = streamingControllers();
  t.same(
    specs.map((s) => s.name),
    [StatusKey.spu, StatusKey.spuGroup, StatusKey.topic, StatusKey.partition],
  );
  for (const s of specs) {
    t.equal(s.managedScope, registry.resolve(s.managedType).scope, `${s.name} manages ${s.managedType}`);
    for (const w of s.watches ?? []) t.equal(w.scope, registry.resolve(w.type).scope, `${s.name} watches ${w.type}`);
  }
});

t.test('options are checked', async (t) => {
  t.throws(() => streamingControllers({ spuTimeoutMs: 0 }), /spuTimeoutMs must be an integer >= 1, got 0/);
  t.throws(() => streamingControllers({ maxLagOffsets: -1 }), /maxLagOffsets must be an integer >= 0/);
  t.equal(STREAMING_DEFAULTS.spuTimeoutMs, 10_000);
});
