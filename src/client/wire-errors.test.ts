import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { decodeFailure } from './wire.js';

/** The client reads error details in the one public shape (snake_case, decimal-string versions), whichever server sent them. */

function failure(code: string, details: string): grpc.ServiceError {
  const metadata = new grpc.Metadata();
  metadata.set('cairn-error-code', code);
  metadata.set('cairn-error-details-json', details);
  return Object.assign(new Error('x'), { code: grpc.status.ABORTED, details: 'x', metadata });
}

t.test('details as this server sends them are passed through', async (t) => {
  const f = decodeFailure(failure('CAS_FAILED', '{"expected":"1","actual":"3"}'), 'n1:7500');
  t.same([f.error.code, f.error.details], ['CAS_FAILED', { expected: '1', actual: '3' }]);
});

t.test("an older server's camelCase keys and numeric versions are read into the same shape", async (t) => {
  t.same(decodeFailure(failure('CAS_FAILED', '{"expected":1,"actual":3}'), 'n1:7500').error.details, { expected: '1', actual: '3' });
  t.same(decodeFailure(failure('GROUP_VERSION_MISMATCH', '{"storedType":"demo.v1.Artist","requestedType":"demo.v2.Artist"}'), 'n1:7500').error.details, {
    stored_type: 'demo.v1.Artist',
    requested_type: 'demo.v2.Artist',
  });
  t.same(decodeFailure(failure('COMPACTED', '{"watch":0,"revision":7}'), 'n1:7500').error.details, { watch: 0, revision: '7' }, 'the watch index stays a number');
});
