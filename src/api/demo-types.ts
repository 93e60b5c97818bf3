import type { TypeRegistry } from './registry.js';

/** The demo types of API.md, registered by `cairn agent --dev` or `--demo-types`. */
export function registerDemoTypes(registry: TypeRegistry): void {
  const genre = { type: 'string', enum: ['rock', 'jazz', 'pop', 'metal', 'unknown'] };
  const defaultGenre = (res: { data: unknown }): void => {
    if (typeof res.data === 'object' && res.data !== null && !Array.isArray(res.data)) {
      const d = res.data as Record<string, unknown>;
      if (d['genre'] === undefined) d['genre'] = 'unknown';
    }
  };
  registry.register({
    group: 'demo',
    groupVersion: 'v1',
    kind: 'Artist',
    scope: 'namespace',
    schema: { type: 'object', properties: { name: { type: 'string', minLength: 1 }, genre }, required: ['name'], additionalProperties: false },
    mutate: defaultGenre,
  });
  registry.register({
    group: 'demo',
    groupVersion: 'v2',
    kind: 'Artist',
    scope: 'namespace',
    schema: {
      type: 'object',
      properties: { name: { type: 'string', minLength: 1 }, genre, members: { type: 'integer', minimum: 0 } },
      required: ['name'],
      additionalProperties: false,
    },
    mutate: defaultGenre,
  });
  registry.register({
    group: 'demo',
    groupVersion: 'v1',
    kind: 'Album',
    scope: 'namespace',
    schema: {
      type: 'object',
      properties: { title: { type: 'string', minLength: 1 }, year: { type: 'integer' }, tracks: { type: 'array', items: { type: 'string' } } },
      required: ['title'],
      additionalProperties: false,
    },
  });
  registry.register({
    group: 'demo',
    groupVersion: 'v1',
    kind: 'RecordLabel',
    scope: 'partition',
    schema: { type: 'object', properties: { name: { type: 'string', minLength: 1 } }, required: ['name'], additionalProperties: false },
  });
  registry.register({
    group: 'demo',
    groupVersion: 'v1',
    kind: 'Executive',
    scope: 'cluster',
    schema: { type: 'object', properties: { name: { type: 'string', minLength: 1 }, position: { type: 'string' } }, required: ['name'], additionalProperties: false },
  });
}
