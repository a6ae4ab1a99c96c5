/**
 * The graceful stop (SIGTERM, SIGINT): says STOPPING=1 to systemd, stops accepting, ends the
 * event streams, the cap notifications and the billing periods, lets requests in flight finish
 * (cutting those still running after the grace period), then takes the last usage checkpoint
 * (a clean reboot loses no counted byte), closes the webhook outbox (what is pending is
 * delivered once more at the next start), the journal and the netlink sockets, and resolves.
 * Called twice, it returns the same promise.
 */
import type { Kernel } from '../kernel/types';
import type { OpenedState } from './bring-up';
import { SHUTDOWN_GRACE_MS, messageOf, type DaemonDeps } from './contract';
import type { Http } from './serve';
import type { Services } from './services';

/** What the stop closes: everything the phases opened. */
export interface Opened {
  readonly kernel: Kernel;
  readonly state: OpenedState;
  readonly services: Services;
  readonly http: Http;
}

export function shutdownPath(deps: DaemonDeps, opened: Opened): () => Promise<void> {
  const { logger } = deps;
  const { server } = opened.http;
  const { events, capWatch, service } = opened.services;
  let stopped: Promise<void> | null = null;
  return () => {
    stopped ??= new Promise<void>((resolve) => {
      logger.info({}, 'shutting down: finishing requests in flight');
      deps.notify?.stopping();
      const graceMs = deps.graceMs ?? SHUTDOWN_GRACE_MS;
      const force = setTimeout(() => {
        logger.warn({ graceMs }, 'requests still running after the grace period: closing them');
        server.closeAllConnections();
      }, graceMs);
      force.unref();
      // Event streams never end by themselves: end them, and stop reading and delivering.
      events.close();
      capWatch?.close();
      service.stopPeriods();
      // Stops accepting; keep-alive connections close once their request is answered.
      server.close(() => {
        clearTimeout(force);
        void closeAfterServing(deps, opened).then(resolve);
      });
      server.closeIdleConnections();
    });
    return stopped;
  };
}

/** Once the last request was answered: the last checkpoint, the outbox, the journal, netlink. */
async function closeAfterServing(deps: DaemonDeps, opened: Opened): Promise<void> {
  const { logger } = deps;
  const { store, outbox } = opened.state;
  await opened.services.checkpoints?.stop();
  // What is pending stays in the outbox: the next start delivers it once more.
  await outbox?.close().catch(() => undefined);
  await store?.close().catch((error: unknown) => {
    logger.error({ event: 'state_close_failed', error: messageOf(error) }, messageOf(error));
  });
  opened.kernel.close();
  logger.info({}, 'stopped');
}
