import * as prom from 'prom-client';

/** What the metrics read from a running controller at scrape time. */
export interface QueueGauges {
  /** Keys ready to be reconciled. */
  readonly length: number;
  /** Keys waiting for a delay (requeueAfter, backoff). */
  readonly waiting: number;
  /** Keys being reconciled. */
  readonly active: number;
}

export type ReconcileOutcome = 'success' | 'error' | 'requeue';

/**
 * The controller runtime's Prometheus metrics, labelled by controller name:
 *
 * - `cairn_controller_queue_depth{controller}`: keys ready to reconcile;
 * - `cairn_controller_queue_waiting{controller}`: keys waiting for requeueAfter or backoff;
 * - `cairn_controller_active{controller}`: 1 while the controller runs here (leader or lock holder);
 * - `cairn_controller_reconcile_seconds{controller,result}`: reconcile latency (result: success, error, requeue);
 * - `cairn_controller_reconcile_errors_total{controller}`: reconciles that threw.
 *
 * prom-client refuses a metric registered twice in one registry, and controllers start and
 * stop with leadership, so there is one instance per registry: `controllerMetrics(registry)`.
 */
export class ControllerMetrics {
  readonly reconcileSeconds: prom.Histogram<'controller' | 'result'>;
  readonly reconcileErrors: prom.Counter<'controller'>;
  private readonly running = new Map<string, () => QueueGauges>();
  /** Names seen at least once: their gauges read 0 once stopped rather than vanish. */
  private readonly known = new Set<string>();

  constructor(readonly registry: prom.Registry) {
    const gauge = (name: string, help: string, read: (g: QueueGauges) => number): void => {
      const metrics = this;
      new prom.Gauge({
        name,
        help,
        labelNames: ['controller'],
        registers: [registry],
        collect() {
          for (const c of metrics.known) {
            const g = metrics.running.get(c);
            this.set({ controller: c }, g === undefined ? 0 : read(g()));
          }
        },
      });
    };
    gauge('cairn_controller_queue_depth', 'Keys ready to be reconciled, per controller.', (g) => g.length);
    gauge('cairn_controller_queue_waiting', 'Keys waiting for requeueAfter or an error backoff, per controller.', (g) => g.waiting);
    gauge('cairn_controller_active', '1 while the controller runs on this process (leader or lock holder).', () => 1);
    this.reconcileSeconds = new prom.Histogram({
      name: 'cairn_controller_reconcile_seconds',
      help: 'Reconcile latency, per controller and result (success, error, requeue).',
      labelNames: ['controller', 'result'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry],
    });
    this.reconcileErrors = new prom.Counter({ name: 'cairn_controller_reconcile_errors_total', help: 'Reconciles that threw, per controller.', labelNames: ['controller'], registers: [registry] });
  }

  /** A controller started: its queue is read at scrape time until the returned function is called. */
  track(controller: string, read: () => QueueGauges): () => void {
    this.known.add(controller);
    this.running.set(controller, read);
    return () => {
      if (this.running.get(controller) === read) this.running.delete(controller);
    };
  }

  observe(controller: string, seconds: number, result: ReconcileOutcome): void {
    this.reconcileSeconds.observe({ controller, result }, seconds);
    if (result === 'error') this.reconcileErrors.inc({ controller });
  }
}

const byRegistry = new WeakMap<prom.Registry, ControllerMetrics>();

/** The controller metrics of `registry`, registered on first use. */
export function controllerMetrics(registry: prom.Registry): ControllerMetrics {
  let m = byRegistry.get(registry);
  if (m === undefined) {
    m = new ControllerMetrics(registry);
    byRegistry.set(registry, m);
  }
  return m;
}
