/**
 * The simulator's one door into the code under test: everything it uses from src/ comes
 * through here (and through the modules' front doors), so the rest of cluster-test/sim names
 * the core in one place.
 */
export * from '../../src/base/index.js';
export * from '../../src/raft/index.js';
