import type { NodeId } from '../base/index.js';
import type { Config, ConfigChange, Member } from '../raft/index.js';

export type { ConfigChange };

export function memberOfConfig(config: Config, id: NodeId): Member | undefined {
  return config.members.find((m) => m.id === id);
}
