/**
 * What a start of the daemon promises and needs, shared by its phases (src/daemon/start.ts runs
 * them in order): the exit statuses (2 for configuration the daemon cannot start with, 1
 * otherwise, DESIGN §4), StartupError (a start that cannot go on, with its status and one line
 * that says why), DaemonDeps (what the process hands the start: the kernel's opener, the logger,
 * and the seams tests replace), Daemon (what a started daemon offers: its address, the one
 * SIGHUP reload and its three parts, shutdown), and the helpers every phase uses. This file
 * imports no phase, so every phase imports it and nothing imports back.
 */
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { DeliveryPolicy } from '../events';
import type { Kernel } from '../kernel/types';
import type { CapExhaustedNotice, CapWatch } from '../kernel/quota/exhaustion';
import type { Logger } from '../log';
import { NativeAddonMissingError } from '../netlink/native';
import type { StateFs } from '../state';
import type { StartNotices } from '../systemd-notify';
import { readTokenFileFromDisk, type ReadTokenFile } from '../token-files';

/** Exit status for configuration the daemon cannot start with (DESIGN §4). */
export const EXIT_CONFIG = 2;
export const EXIT_FAILURE = 1;
/** How long requests in flight may take after SIGTERM before their connections are cut. */
export const SHUTDOWN_GRACE_MS = 10_000;

/** A start that cannot go on; `exitStatus` is 2 for configuration, 1 otherwise. */
export class StartupError extends Error {
  constructor(
    message: string,
    readonly exitStatus: number,
  ) {
    super(message);
    this.name = 'StartupError';
  }
}

export interface DaemonDeps {
  openKernel: () => Promise<Kernel>;
  logger: Logger;
  graceMs?: number;
  /** How token files (and TLS files) are read on reload; from disk when absent. */
  readTokenFile?: ReadTokenFile;
  /** The clock of the certificate's expiry warning; the system's when absent. */
  now?: () => Date;
  /** Webhook delivery timings (tests shorten them); DESIGN §3's defaults when absent. */
  webhookPolicy?: Partial<DeliveryPolicy>;
  /** The kernel's boot id (/proc/sys/kernel/random/boot_id when absent); for tests. */
  readBootId?: () => Promise<string>;
  /** The state directory's file system (the real one when absent); for tests. */
  stateFs?: StateFs;
  /** systemd's notifications (src/systemd-notify.ts): STATUS while restoring, READY=1. */
  notify?: StartNotices;
  /**
   * The kernel's notices of exhausted caps (peer.cap_exhausted), and of every change to the
   * interface's nf_tables tables (`onTablesChanged`: the list reads its caps and suspended set
   * again, issue 29); none when absent.
   */
  watchCaps?: (
    ifname: string,
    onExhausted: (notice: CapExhaustedNotice) => void,
    onError: (error: Error) => void,
    onTablesChanged: () => void,
  ) => Promise<CapWatch>;
}

export interface Daemon {
  address: AddressInfo;
  /** Stops accepting, lets requests in flight finish, closes the kernel sockets. */
  shutdown(): Promise<void>;
  /**
   * What SIGHUP does, the one reload path (src/daemon/reload.ts): reloadTokens, reloadWebhooks
   * and reloadTls, in that order, each logging what it did; one failing keeps the others.
   */
  reload(): void;
  /**
   * Part of reload: re-reads the token files. Success replaces the tokens (logged at info with
   * how many of each scope); a failure keeps the old ones and logs why at warn. True on success.
   */
  reloadTokens(): boolean;
  /** Part of reload: re-reads --webhooks-file; a bad file keeps the old targets. */
  reloadWebhooks(): boolean;
  /**
   * Part of reload, with HTTPS: re-reads certificate, key and client CA together. Success
   * serves them to every new connection (connections open keep theirs) and is logged at info; a
   * bad file keeps the old ones and logs why at warn. True on success; false without TLS.
   */
  reloadTls(): boolean;
}

/** The version of package.json, next to dist/ (dist/src/daemon/ → ../../../package.json). */
export function packageVersion(root: string = path.resolve(__dirname, '..', '..', '..')): string {
  const manifest: unknown = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
  const version =
    typeof manifest === 'object' && manifest !== null && 'version' in manifest
      ? manifest.version
      : undefined;
  if (typeof version !== 'string') throw new Error(`${root}/package.json has no version`);
  return version;
}

/** A start failure the operator fixes outside wg-peerd keeps its own message, unprefixed. */
export function explains(error: unknown): boolean {
  return error instanceof NativeAddonMissingError;
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** How the daemon reads token, TLS and webhooks files: the injected reader, else the disk. */
export function fileReader(deps: DaemonDeps): ReadTokenFile {
  return deps.readTokenFile ?? readTokenFileFromDisk;
}
