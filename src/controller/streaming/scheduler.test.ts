import t from 'tap';
import { checkManualAssignment, placeReplicas } from './scheduler.js';

const rows = (r: ReturnType<typeof placeReplicas>): unknown => (r.ok ? r.rows : r.resolution);

t.test('the replica assignment vectors of the streaming domain (Fluvio SC scheduler)', async (t) => {
  t.same(rows(placeReplicas({ spus: [0, 1, 2], existing: [], partitions: 6, replicationFactor: 3 })), [
    [0, 1, 2],
    [1, 0, 2],
    [2, 0, 1],
    [0, 1, 2],
    [1, 0, 2],
    [2, 0, 1],
  ]);
  t.same(rows(placeReplicas({ spus: [0, 1], existing: [], partitions: 2, replicationFactor: 1 })), [[0], [1]]);
  t.same(rows(placeReplicas({ spus: [0, 1], existing: [], partitions: 4, replicationFactor: 1 })), [[0], [1], [0], [1]]);
  t.same(rows(placeReplicas({ spus: [0, 1], existing: [], partitions: 4, replicationFactor: 3 })), 'InsufficientResources');
  t.same(rows(placeReplicas({ spus: [0, 1, 2, 4, 10], existing: [], partitions: 4, replicationFactor: 1 })), [[0], [1], [2], [4]]);
  t.same(
    rows(placeReplicas({ spus: [0, 1, 2, 3], existing: [[0, 1, 2], [1, 2], [0, 3]], partitions: 5, replicationFactor: 3 })),
    [
      [2, 0, 1],
      [3, 0, 1],
      [1, 3, 0],
      [2, 3, 0],
      [3, 2, 1],
    ],
    'counts start from the partitions that exist',
  );
});

t.test('ids are taken in numeric order whatever order the SPUs come in', async (t) => {
  t.same(rows(placeReplicas({ spus: [10, 2, 0, 4, 1], existing: [], partitions: 4, replicationFactor: 1 })), [[0], [1], [2], [4]]);
});

t.test('adding partitions keeps the rows that exist and counts them', async (t) => {
  const first = placeReplicas({ spus: [0, 1, 2], existing: [], partitions: 2, replicationFactor: 2 });
  t.ok(first.ok);
  const grown = placeReplicas({ spus: [0, 1, 2], existing: [], keep: first.ok ? first.rows : [], partitions: 4, replicationFactor: 2 });
  t.same(rows(grown), [
    [0, 1],
    [1, 0],
    [2, 0],
    [0, 2],
  ]);
  t.same(rows(placeReplicas({ spus: [0], existing: [], keep: [[5, 6]], partitions: 1, replicationFactor: 2 })), [[5, 6]], 'nothing to add: kept even if SPUs are short');
  t.same(rows(placeReplicas({ spus: [0, 1], existing: [], keep: [[0], [1]], partitions: 1, replicationFactor: 1 })), 'InvalidConfig', 'partitions cannot shrink');
});

t.test('bad configurations', async (t) => {
  t.same(rows(placeReplicas({ spus: [0], existing: [], partitions: 0, replicationFactor: 1 })), 'InvalidConfig');
  t.same(rows(placeReplicas({ spus: [0], existing: [], partitions: 1, replicationFactor: 0 })), 'InvalidConfig');
  t.same(rows(placeReplicas({ spus: [0], existing: [], partitions: 1.5, replicationFactor: 1 })), 'InvalidConfig');
  t.same(rows(placeReplicas({ spus: [], existing: [], partitions: 1, replicationFactor: 1 })), 'InsufficientResources');
  t.same(rows(checkManualAssignment([[0, 1], [1, 2]], [0, 1, 2])), [[0, 1], [1, 2]]);
  t.same(rows(checkManualAssignment([[0, 0]], [0])), 'InvalidConfig');
  t.same(rows(checkManualAssignment([[0, 9]], [0])), 'InvalidConfig');
  t.same(rows(checkManualAssignment([[]], [0])), 'InvalidConfig');
  t.same(rows(checkManualAssignment([], [0])), 'InvalidConfig');
});
