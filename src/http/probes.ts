/**
 * GET /healthz and GET /readyz (issue 9), for systemd, load balancers and orchestrators. No
 * token (mounted before authentication) and nothing about peers. /healthz only says the process
 * answers; /readyz asks the kernel (src/peers/readiness.ts) and answers 503 with the usual error
 * envelope plus `checks` when something is missing. The handlers of the route table's healthz
 * and readyz (public routes: no token); without readiness, /readyz is not served.
 */
import type { RequestHandler } from 'express';
import type { ReadinessApi } from '../peers';
import { toErrorResponse } from './errors';

export function probes(
  readiness: ReadinessApi | null,
): Partial<Record<'healthz' | 'readyz', RequestHandler>> {
  const healthz: RequestHandler = (_req, res) => {
    res.set('Cache-Control', 'no-store').json({ success: true, status: 'ok' });
  };
  if (readiness === null) return { healthz };
  return {
    healthz,
    readyz: (_req, res, next) => {
      readiness.check().then((result) => {
        res.set('Cache-Control', 'no-store');
        if (result.ready) {
          res.json({ success: true, status: 'ready', checks: result.checks });
          return;
        }
        const { body } = toErrorResponse(result.error);
        // 503 whatever the cause: not ready is not a server fault the client should retry on.
        res.status(503).json({ ...body, checks: result.checks });
      }, next);
    },
  };
}
