import t from 'tap';
import { LocalCluster, testClock } from '../../replica/testing/index.js';
import { registerDemoTypes } from '../demo-types.js';
import { TypeRegistry } from '../registry.js';
import { registryWriteHooks } from '../write-hooks.js';
import { ResourceService } from '../resource-service.js';
import { runningNode } from '../served-node.js';
import { serviceTarget } from './service-target.js';
import { resourceApiConformance } from './suite.js';

// Target (a): ResourceService in-process over a one-node replica (real Raft core, FSM and
// store; in-memory disk and network). No HTTP: what this target cannot say (unknown JSON
// fields, query strings, body limits) is covered by the HTTP targets.
const registry = new TypeRegistry();
registerDemoTypes(registry);
const cluster = new LocalCluster({ seed: 1, tickMs: 10, writeHooks: registryWriteHooks(registry) });
t.teardown(() => cluster.close());
await cluster.bootstrap(['n1']);
const node = await cluster.waitForLeader();
const svc = new ResourceService(runningNode({ coordinator: node.coordinator }), registry, testClock);

resourceApiConformance(t, serviceTarget('in-process ResourceService over a one-node replica', svc));
