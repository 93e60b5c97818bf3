import type { NodeId } from '../../base/index.js';
import type { Message } from '../../raft/index.js';
import type { Transport } from '../ports.js';

/**
 * An in-process network for multi-node tests: messages are structured-cloned (no aliasing)
 * and delivered on a later macrotask, in send order; links can be cut to make partitions.
 */
export class MemoryNetwork {
  private readonly handlers = new Map<NodeId, (m: Message) => void>();
  private readonly cut = new Set<string>();
  private readonly down = new Set<NodeId>();
  delivered = 0;
  dropped = 0;

  transport(id: NodeId): Transport {
    return {
      send: (messages) => {
        for (const m of messages) this.post(m);
      },
      onMessage: (h) => {
        this.handlers.set(id, h);
        this.down.delete(id);
      },
      close: async () => {
        this.handlers.delete(id);
      },
    };
  }

  private post(m: Message): void {
    if (this.cut.has(`${m.from}>${m.to}`) || this.down.has(m.from)) {
      this.dropped++;
      return;
    }
    const copy = structuredClone(m);
    setImmediate(() => {
      const h = this.handlers.get(copy.to);
      if (!h || this.cut.has(`${copy.from}>${copy.to}`) || this.down.has(copy.to)) {
        this.dropped++;
        return;
      }
      this.delivered++;
      h(copy);
    });
  }

  /**
   * Delivers a message as the network would, whoever its `from` claims to be (no transport of
   * that name needs to exist): a stranger or an impostor speaking to a node.
   */
  inject(m: Message): void {
    this.post(m);
  }

  isolate(id: NodeId, others: readonly NodeId[]): void {
    for (const o of others) {
      if (o === id) continue;
      this.cut.add(`${id}>${o}`);
      this.cut.add(`${o}>${id}`);
    }
  }

  /** Stops delivery to and from a node (it looks crashed to the others). */
  takeDown(id: NodeId): void {
    this.down.add(id);
    this.handlers.delete(id);
  }

  heal(): void {
    this.cut.clear();
  }
}
