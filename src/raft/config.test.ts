/**
 * Membership configurations (thesis §4.1 single-server changes, §4.2.1 learners): the change
 * rules and the config entry envelope.
 */
import fc from 'fast-check';
import t from 'tap';
import { AssertionError, nodeId, type NodeId } from '../base/index.js';
import {
  applyConfigChange,
  decodeConfigEntry,
  describeConfig,
  encodeConfigEntry,
  isVoter,
  learners,
  makeConfig,
  memberOf,
  NOOP_ENTRY_DATA,
  parseConfigChange,
  voters,
} from './config.js';
import { EntryType, type Config, type ConfigChange, type ConfigEntryBody, type Member } from './types.js';

const m = (id: string, suffrage: 'voter' | 'learner' = 'voter'): Member => ({ id: nodeId(id), suffrage, address: `${id}:7500` });
const n = (s: string): NodeId => nodeId(s);
const ids = (c: Config | string): string => (typeof c === 'string' ? `error: ${c}` : describeConfig(c));

const BASE = makeConfig([m('n1'), m('n2'), m('n3'), m('n4', 'learner')]);

t.test('makeConfig sorts members by id and refuses duplicates', async (t) => {
  const c = makeConfig([m('n3'), m('n1'), m('n2', 'learner')]);
  t.same(c.members.map((x) => x.id), ['n1', 'n2', 'n3']);
  t.same([voters(c), learners(c)], [['n1', 'n3'], ['n2']]);
  t.same([isVoter(c, n('n1')), isVoter(c, n('n2')), isVoter(c, n('n9'))], [true, false, false]);
  t.equal(memberOf(c, n('n2'))?.address, 'n2:7500');
  t.equal(describeConfig(c), 'n1,n2(learner),n3');
  t.throws(() => makeConfig([m('n1'), m('n1', 'learner')]), AssertionError, 'a node cannot be in a configuration twice');
});

t.test('§4.1 applyConfigChange: one server at a time, with the rules for each change', async (t) => {
  const cases: Array<[string, ConfigChange, string]> = [
    ['add a learner', { type: 'add-learner', id: n('n5'), address: 'n5:7500' }, 'n1,n2,n3,n4(learner),n5(learner)'],
    ['add a voter directly', { type: 'add-voter', id: n('n0'), address: 'n0:7500' }, 'n0,n1,n2,n3,n4(learner)'],
    ['add an existing voter', { type: 'add-learner', id: n('n2'), address: 'x' }, 'error: node n2 is already a voter'],
    ['add an existing learner', { type: 'add-voter', id: n('n4'), address: 'x' }, 'error: node n4 is already a learner'],
    ['promote a learner', { type: 'promote', id: n('n4') }, 'n1,n2,n3,n4'],
    ['promote a voter', { type: 'promote', id: n('n1') }, 'error: node n1 is already a voter'],
    ['promote a stranger', { type: 'promote', id: n('n9') }, 'error: node n9 is not a member'],
    ['remove a voter', { type: 'remove', id: n('n2') }, 'n1,n3,n4(learner)'],
    ['remove a learner', { type: 'remove', id: n('n4') }, 'n1,n2,n3'],
    ['remove a stranger', { type: 'remove', id: n('n9') }, 'error: node n9 is not a member'],
  ];
  for (const [what, change, want] of cases) t.equal(ids(applyConfigChange(BASE, change)), want, what);
  t.equal(ids(BASE), 'n1,n2,n3,n4(learner)', 'the input configuration is not modified');
  const added = applyConfigChange(BASE, { type: 'add-learner', id: n('n5'), address: 'n5:9999' });
  t.equal(typeof added !== 'string' ? memberOf(added, n('n5'))?.address : undefined, 'n5:9999', 'the new member keeps its address');
});

t.test('§4.1 removing the last voter is refused: no voters could never commit again', async (t) => {
  const one = makeConfig([m('n1'), m('n2', 'learner')]);
  t.equal(ids(applyConfigChange(one, { type: 'remove', id: n('n1') })), 'error: removing n1 would leave no voters');
  t.equal(ids(applyConfigChange(one, { type: 'remove', id: n('n2') })), 'n1', 'removing the learner is fine');
});

t.test('property: every valid change changes exactly one member, and keeps at least one voter', async (t) => {
  const configArb = fc
    .uniqueArray(fc.integer({ min: 1, max: 9 }), { minLength: 1, maxLength: 6 })
    .chain((nums) => fc.tuple(fc.constant(nums), fc.array(fc.boolean(), { minLength: nums.length, maxLength: nums.length })))
    .map(([nums, isLearner]) => makeConfig(nums.map((k, i) => m(`n${k}`, isLearner[i] === true ? 'learner' : 'voter'))))
    .filter((c) => voters(c).length > 0); // every configuration a cluster can be in has a voter
  const changeArb: fc.Arbitrary<ConfigChange> = fc.integer({ min: 1, max: 9 }).chain((k) =>
    fc.constantFrom<ConfigChange>(
      { type: 'add-learner', id: n(`n${k}`), address: 'a' },
      { type: 'add-voter', id: n(`n${k}`), address: 'a' },
      { type: 'promote', id: n(`n${k}`) },
      { type: 'remove', id: n(`n${k}`) },
    ),
  );
  fc.assert(
    fc.property(configArb, changeArb, (config, change) => {
      const next = applyConfigChange(config, change);
      if (typeof next === 'string') return true;
      const before = new Map(config.members.map((x) => [x.id, x.suffrage]));
      const after = new Map(next.members.map((x) => [x.id, x.suffrage]));
      const changed = new Set([...before.keys(), ...after.keys()].filter((id) => before.get(id) !== after.get(id)));
      const sorted = next.members.every((x, i) => i === 0 || (next.members[i - 1] as Member).id < x.id);
      return changed.size === 1 && changed.has(change.id) && voters(next).length > 0 && sorted;
    }),
    { numRuns: 1000 },
  );
  t.pass('1000 random configurations and changes');
});

t.test('config entries: encode/decode round trip for every kind of change', async (t) => {
  const bodies: ConfigEntryBody[] = [
    { change: { type: 'bootstrap' }, config: BASE },
    { change: { type: 'add-learner', id: n('n5'), address: 'n5:7500' }, config: BASE },
    { change: { type: 'add-voter', id: n('n5'), address: '[::1]:7500' }, config: BASE },
    { change: { type: 'promote', id: n('n4') }, config: BASE },
    { change: { type: 'remove', id: n('n3') }, config: makeConfig([m('n1')]) },
  ];
  for (const body of bodies) {
    const data = encodeConfigEntry(body);
    t.equal(data[0], EntryType.Config, `${body.change.type}: byte 0 is the Config entry type`);
    t.same(decodeConfigEntry(data), body, `${body.change.type}: round trip`);
  }
});

t.test('property: config entries round trip for random configurations', async (t) => {
  const memberArb = fc.record({
    id: fc.stringMatching(/^[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?$/),
    suffrage: fc.constantFrom<'voter' | 'learner'>('voter', 'learner'),
    address: fc.string({ maxLength: 30 }),
  });
  fc.assert(
    fc.property(fc.uniqueArray(memberArb, { selector: (x) => x.id, maxLength: 8 }), fc.nat(3), (raw, kind) => {
      const config = makeConfig(raw.map((x) => ({ id: nodeId(x.id), suffrage: x.suffrage, address: x.address })));
      const first = config.members[0];
      const change: ConfigEntryBody['change'] =
        first === undefined || kind === 0
          ? { type: 'bootstrap' }
          : kind === 1
            ? { type: 'add-voter', id: first.id, address: first.address }
            : kind === 2
              ? { type: 'promote', id: first.id }
              : { type: 'remove', id: first.id };
      const body: ConfigEntryBody = { change, config };
      return JSON.stringify(decodeConfigEntry(encodeConfigEntry(body))) === JSON.stringify(body);
    }),
    { numRuns: 500 },
  );
  t.pass('500 random configurations round trip');
});

t.test('decoding refuses what is not a well-formed config entry (a corrupt log is a broken invariant)', async (t) => {
  t.throws(() => decodeConfigEntry(NOOP_ENTRY_DATA), AssertionError, 'a no-op is not a config entry');
  t.throws(() => decodeConfigEntry(Uint8Array.of(EntryType.Config, 0xc0)), AssertionError, 'a nil body');
  const good = encodeConfigEntry({ change: { type: 'remove', id: n('n1') }, config: makeConfig([m('n2')]) });
  const wrongKind = encodeConfigEntry({ change: { type: 'remove', id: n('n1') }, config: makeConfig([m('n2')]) });
  // Flip "remove" to "rem0ve" in the msgpack body: an unknown change type.
  const text = Buffer.from(wrongKind).toString('latin1').replace('remove', 'rem0ve');
  t.throws(() => decodeConfigEntry(Uint8Array.from(Buffer.from(text, 'latin1'))), AssertionError, 'an unknown change type');
  t.ok(decodeConfigEntry(good), 'the untouched entry decodes');
  t.equal(NOOP_ENTRY_DATA[0], EntryType.Noop, 'the no-op envelope starts with its entry type');
});

t.test('parseConfigChange: the one check of a membership change from outside (issue 15, item 4)', async (t) => {
  t.same(parseConfigChange({ type: 'add-learner', id: 'n4', address: '10.0.0.4:7500' }), { type: 'add-learner', id: 'n4', address: '10.0.0.4:7500' });
  t.same(parseConfigChange({ type: 'add-learner', id: 'n4', address: 'n4.internal:7500', autoPromote: true }), { type: 'add-learner', id: 'n4', address: 'n4.internal:7500', autoPromote: true });
  t.same(parseConfigChange({ type: 'add-voter', id: 'n5', address: '[fd00::5]:7500' }), { type: 'add-voter', id: 'n5', address: '[fd00::5]:7500' });
  t.same(parseConfigChange({ type: 'promote', id: 'n4' }), { type: 'promote', id: 'n4' });
  t.same(parseConfigChange({ type: 'remove', id: 'n4' }), { type: 'remove', id: 'n4' });
  const refused: Array<[unknown, RegExp]> = [
    [null, /not an object/],
    [['remove', 'n1'], /not an object/],
    [{ type: 'bootstrap', id: 'n1' }, /unknown type "bootstrap"/],
    [{ type: 'remove' }, /id undefined is not a node id/],
    [{ type: 'remove', id: '' }, /id "" is not a node id/],
    [{ type: 'remove', id: 'N1' }, /is not a node id/],
    [{ type: 'remove', id: 'a'.repeat(64) }, /is not a node id/],
    [{ type: 'remove', id: 'n1', address: 'x:1' }, /unexpected field "address"/],
    [{ type: 'add-voter', id: 'n1' }, /address undefined of n1 is not host:port/],
    [{ type: 'add-voter', id: 'n1', address: 'n1' }, /is not host:port/],
    [{ type: 'add-voter', id: 'n1', address: 'n1:0' }, /is not host:port/],
    [{ type: 'add-voter', id: 'n1', address: 'n1:65536' }, /is not host:port/],
    [{ type: 'add-voter', id: 'n1', address: 'http://n1:1' }, /is not host:port/],
    [{ type: 'add-voter', id: 'n1', address: '[zz]:1' }, /is not host:port/],
    [{ type: 'add-voter', id: 'n1', address: 'n1:1', autoPromote: true }, /unexpected field "autoPromote"/],
    [{ type: 'add-learner', id: 'n1', address: 'n1:1', autoPromote: 'yes' }, /autoPromote must be a boolean/],
  ];
  for (const [v, why] of refused) t.throws(() => parseConfigChange(v), { code: 'INVALID_ARGUMENT', message: why }, JSON.stringify(v));
});
