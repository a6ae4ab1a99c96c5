/**
 * The one reload path (SIGHUP, systemd's ExecReload, `kill -HUP`): `reload()` re-reads the
 * token files, the webhooks file and the TLS files, in that order, each part on its own: a bad
 * file keeps what that part served (logged at warn with why), a good one replaces it (logged at
 * info), and one part failing never stops the next. Only a SIGHUP with nothing at all to
 * re-read says so. Each part returns whether it replaced something, for the tests.
 */
import type { Config } from '../config';
import type { Events } from '../events';
import { replaceCertificate } from '../http';
import { loadTlsFiles, type TlsMaterial } from '../tls-files';
import { loadTokens } from '../token-files';
import { readWebhookTargets } from './bring-up';
import { fileReader, messageOf, type Daemon, type DaemonDeps } from './contract';
import { certificateFields, servesHttps, warnValidity, type Http } from './serve';

export type Reload = Pick<Daemon, 'reload' | 'reloadTokens' | 'reloadWebhooks' | 'reloadTls'>;

export function reloadPath(config: Config, deps: DaemonDeps, http: Http, events: Events): Reload {
  const reloadTokens = (): boolean => reloadTokenFiles(config, deps, http);
  const reloadWebhooks = (): boolean => reloadWebhooksFile(config, deps, events);
  const reloadTls = (): boolean => reloadTlsFiles(config, deps, http);
  const reload = (): void => {
    reloadTokens();
    reloadWebhooks();
    reloadTls();
  };
  return { reload, reloadTokens, reloadWebhooks, reloadTls };
}

function reloadTokenFiles(config: Config, deps: DaemonDeps, http: Http): boolean {
  const { logger } = deps;
  const tokens = http.tokens;
  if (tokens === null) {
    // Only a SIGHUP with nothing at all to re-read is worth a warning: with HTTPS or webhooks,
    // their own lines say what the signal did.
    if (config.tls === null && config.webhooksFile === null) {
      logger.warn(
        { event: 'tokens_not_reloaded' },
        'SIGHUP: no token, TLS or webhooks file is configured, nothing to re-read',
      );
    }
    return false;
  }
  try {
    tokens.replace(loadTokens(config.tokenSources, fileReader(deps)));
  } catch (error) {
    logger.warn(
      { event: 'tokens_reload_failed', reason: messageOf(error) },
      `SIGHUP: keeping the old tokens: ${messageOf(error)}`,
    );
    return false;
  }
  logger.info({ event: 'tokens_reloaded', ...tokens.counts() }, 'SIGHUP: token files re-read');
  return true;
}

function reloadWebhooksFile(config: Config, deps: DaemonDeps, events: Events): boolean {
  if (config.webhooksFile === null) return false;
  try {
    events.webhooks.setTargets(readWebhookTargets(config, deps));
  } catch (error) {
    deps.logger.warn(
      { event: 'webhooks_reload_failed', reason: messageOf(error) },
      `SIGHUP: keeping the old webhook targets: ${messageOf(error)}`,
    );
    return false;
  }
  deps.logger.info(
    { event: 'webhooks_reloaded', targets: events.webhooks.targetCount },
    'SIGHUP: webhooks file re-read',
  );
  return true;
}

function reloadTlsFiles(config: Config, deps: DaemonDeps, http: Http): boolean {
  if (config.tls === null || !servesHttps(http.server)) return false;
  let next: TlsMaterial;
  try {
    next = loadTlsFiles(config.tls.sources, fileReader(deps));
    replaceCertificate(http.server, next);
  } catch (error) {
    deps.logger.warn(
      { event: 'tls_reload_failed', reason: messageOf(error) },
      `SIGHUP: keeping the old TLS certificate and key: ${messageOf(error)}`,
    );
    return false;
  }
  http.tls.current = next;
  deps.logger.info(
    { event: 'tls_reloaded', ...certificateFields(next) },
    'SIGHUP: TLS certificate, key and client CA re-read',
  );
  warnValidity(deps, next);
  return true;
}
