/**
 * startDaemon: the start of wg-peerd as the sequence of its named phases, in this order, each
 * in its own function (src/daemon/bring-up.ts, services.ts, serve.ts): configuration (the
 * webhooks file), kernel (the netlink sockets), state (the state directory), interface (the
 * WireGuard interface and where its caps count), restore (begun in the background), services
 * (metrics, events, the peer service, checkpoints), HTTP (the server, listening, then waiting
 * for the restore). Then, and only then, `READY=1` goes to systemd: the interface, its peers,
 * limits and caps are back and the API answers. A phase that fails throws a StartupError after
 * closing what the phases before it opened. Signals are the process's (src/main.ts): SIGHUP
 * calls the daemon's one reload path (reload.ts), SIGTERM and SIGINT its shutdown.
 */
import { formatListen, type Config } from '../config';
import {
  configurationPhase,
  interfacePhase,
  kernelPhase,
  restorePhase,
  statePhase,
} from './bring-up';
import type { Daemon, DaemonDeps } from './contract';
import { reloadPath } from './reload';
import { httpPhase, logServing, servePhase, warnRisks } from './serve';
import { servicesPhase } from './services';
import { shutdownPath } from './shutdown';

export async function startDaemon(config: Config, deps: DaemonDeps): Promise<Daemon> {
  const webhookTargets = configurationPhase(config, deps);
  const kernel = await kernelPhase(deps);
  const state = await statePhase(config, deps, kernel);
  const iface = await interfacePhase(config, deps, kernel, state);
  const restore = restorePhase(config, deps, kernel, state, iface);
  const input = { kernel, state, iface, restore, webhookTargets };
  const services = await servicesPhase(config, deps, input);
  const http = httpPhase(config, deps, services);
  const address = await servePhase(config, deps, { ...input, services }, http);
  logServing(config, deps.logger, http, address);
  // Every phase is done: the interface, its peers, limits and caps are back and the API
  // answers. systemd may start what comes After= the unit (Type=notify, contrib/systemd).
  const serving = formatListen({ host: address.address, port: address.port });
  deps.notify?.ready(`serving ${config.interfaceName} on ${serving}`);
  warnRisks(config, deps, http);
  return {
    address,
    shutdown: shutdownPath(deps, { kernel, state, services, http }),
    ...reloadPath(config, deps, http, services.events),
  };
}
