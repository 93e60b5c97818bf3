import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { CairnError, ErrorCode } from '../base/index.js';
import { errorBody, GRPC_ERROR_DETAILS_KEY, grpcErrorOf, publicDetails } from './errors.js';

/**
 * Error details have one shape on every front end (docs/api.md "Errors"): top-level keys in
 * snake_case, versions, revisions and indexes as decimal strings. The store builds CAS
 * details with numbers (its revisions are numbers), the replica a TIMEOUT's `index`, and the
 * FSM's de-duplication window may answer details an older version stored; all of them leave
 * the node through errorBody (HTTP) or grpcErrorOf (gRPC trailers).
 */

const grpcDetails = (e: CairnError): unknown => JSON.parse(String(grpcErrorOf(e).metadata.get(GRPC_ERROR_DETAILS_KEY)[0]));

t.test('CAS_FAILED: expected and actual as decimal strings, over HTTP and gRPC', async (t) => {
  const e = new CairnError(ErrorCode.CAS_FAILED, 'write x: expected version 1 but the stored version is 3', { expected: 1, actual: 3 });
  t.same(errorBody(e), { error: { expected: '1', actual: '3', code: 'CAS_FAILED', message: e.message } });
  t.same(grpcDetails(e), { expected: '1', actual: '3' });
  t.same(grpcErrorOf(e).code, grpc.status.ABORTED);
});

t.test('camelCase keys become snake_case; every log position is a decimal string; other values are kept', async (t) => {
  const gv = new CairnError(ErrorCode.GROUP_VERSION_MISMATCH, 'read x: stored as demo.v1.Artist', { storedType: 'demo.v1.Artist', requestedType: 'demo.v2.Artist' });
  t.same(errorBody(gv).error, { stored_type: 'demo.v1.Artist', requested_type: 'demo.v2.Artist', code: 'GROUP_VERSION_MISMATCH', message: gv.message });
  t.same(grpcDetails(gv), { stored_type: 'demo.v1.Artist', requested_type: 'demo.v2.Artist' });
  t.same(publicDetails({ storedOwner: 'demo.v1.Artist default/default/a' }), { stored_owner: 'demo.v1.Artist default/default/a' });
  t.same(publicDetails({ index: 42 }), { index: '42' }, "a TIMEOUT's log index");
  t.same(publicDetails({ watch: 2, revision: 17 }), { watch: 2, revision: '17' }, 'a watch error: the index in the request stays a number, the revision is a string');
  t.same(publicDetails({ commitIndex: 5, oldestRevision: 6n, storedVersion: 7 }), { commit_index: '5', oldest_revision: '6', stored_version: '7' });
  t.same(publicDetails({ limit: 1048576 }), { limit: 1048576 }, 'a byte limit is a number');
  const ajv = [{ instancePath: '/genre', keyword: 'enum' }];
  t.same(publicDetails({ schema_errors: ajv }), { schema_errors: ajv }, "ajv's error objects are passed as ajv makes them");
  t.same(publicDetails({ expected: '01ARZ3NDEKTSV4RRFFQ69G5FAV', actual: '01ARZ3NDEKTSV4RRFFQ69G5FAW' }), { expected: '01ARZ3NDEKTSV4RRFFQ69G5FAV', actual: '01ARZ3NDEKTSV4RRFFQ69G5FAW' }, 'UID_MISMATCH uids stay as they are');
});
