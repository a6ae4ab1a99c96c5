/**
 * Webhooks (DESIGN §3): every event, or the types a target asks for, POSTed to each target of
 * `--webhooks-file` and signed per the Standard Webhooks specification with the npm
 * `standardwebhooks` library (`webhook-id` = the event id, `webhook-timestamp`,
 * `webhook-signature`). Each attempt times out; a failed one is retried, the first retry within
 * 30 s, then with exponential backoff, until a bounded time after the first attempt. Each target
 * has its own bounded queue and its own few attempts in flight, so a target that is down fills
 * only its own queue (new events over the bound are dropped and counted) and slows neither the
 * API nor another target.
 */
import { Webhook } from 'standardwebhooks';
import type { EventHub } from './hub';
import { EVENT_TYPES, isEventType, type EventType, type StoredEvent } from './types';

// ---------------------------------------------------------------------------------------------
// The targets file.

export interface WebhookTarget {
  url: string;
  /** `whsec_<base64>`, as the Standard Webhooks specification writes secrets. */
  secret: string;
  /** Only these types; null: all. */
  types: ReadonlySet<EventType> | null;
}

/** A targets file that cannot be used; one line, never the secret. */
export class WebhooksFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WebhooksFileError';
  }
}

/** Standard Webhooks secrets are 24 to 64 bytes; fewer than 16 are guessable. */
const MIN_SECRET_BYTES = 16;

function checkSecret(secret: string, where: string): string {
  if (!secret.startsWith('whsec_')) {
    throw new WebhooksFileError(
      `${where}: the secret must be whsec_<base64> (make one with: echo whsec_$(openssl rand -base64 32))`,
    );
  }
  let bytes: number;
  try {
    bytes = Buffer.from(secret.slice(6), 'base64').length;
    new Webhook(secret);
  } catch {
    throw new WebhooksFileError(`${where}: the secret after whsec_ is not base64`);
  }
  if (bytes < MIN_SECRET_BYTES) {
    throw new WebhooksFileError(
      `${where}: the secret holds ${bytes} bytes; it needs at least ${MIN_SECRET_BYTES} (openssl rand -base64 32)`,
    );
  }
  return secret;
}

/**
 * One target a line: `<url> <secret> [<type>,<type>…]`; blank lines and `#` comments are
 * ignored. `where` names the file in messages.
 */
export function parseWebhooksText(text: string, where: string): WebhookTarget[] {
  const targets: WebhookTarget[] = [];
  text.split('\n').forEach((raw, index) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const at = `${where} line ${index + 1}`;
    const fields = line.split(/\s+/);
    if (fields.length < 2 || fields.length > 3) {
      throw new WebhooksFileError(`${at}: expected "<url> <secret> [<type>,<type>...]"`);
    }
    const [url, secret, typeList] = fields as [string, string, string | undefined];
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new WebhooksFileError(`${at}: ${JSON.stringify(url)} is not a URL`);
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
      throw new WebhooksFileError(`${at}: the URL must be http: or https:`);
    }
    let types: Set<EventType> | null = null;
    if (typeList !== undefined) {
      types = new Set();
      for (const type of typeList.split(',')) {
        if (!isEventType(type)) {
          throw new WebhooksFileError(
            `${at}: unknown event type ${JSON.stringify(type)}; the types are ${EVENT_TYPES.join(', ')}`,
          );
        }
        types.add(type);
      }
    }
    targets.push({ url: parsed.href, secret: checkSecret(secret, at), types });
  });
  return targets;
}

/** A file's text and permission bits, read from one open file. */
export interface FileContent {
  text: string;
  mode: number;
}

/** Reads and checks `--webhooks-file`: private to the daemon's user (it holds secrets). */
export function loadWebhooksFile(
  path: string,
  read: (path: string) => FileContent,
): WebhookTarget[] {
  const where = `--webhooks-file ${path}`;
  let content: FileContent;
  try {
    content = read(path);
  } catch (error) {
    const reason =
      error instanceof Error && 'code' in error ? String(error.code) : 'cannot be read';
    throw new WebhooksFileError(`${where} cannot be read (${reason})`);
  }
  if ((content.mode & 0o077) !== 0) {
    const octal = (content.mode & 0o777).toString(8).padStart(4, '0');
    throw new WebhooksFileError(
      `${where} may be read by group or others (mode ${octal}): chmod 600 it and give it to the daemon's user`,
    );
  }
  return parseWebhooksText(content.text, where);
}

// ---------------------------------------------------------------------------------------------
// Delivery.

export interface DeliveryPolicy {
  /** One attempt's time limit. */
  timeoutMs: number;
  /** Delay before the first retry (at most 30 s, DESIGN §3). */
  firstRetryMs: number;
  /** Each further delay is the last one times this. */
  backoffFactor: number;
  /** No delay is longer than this. */
  maxDelayMs: number;
  /** No attempt starts later than this after the first one: then the event is given up. */
  giveUpAfterMs: number;
  /** Events waiting per target (retries included); a new one over it is dropped. */
  queueSize: number;
  /** Attempts in flight per target at most. */
  concurrency: number;
}

export const DEFAULT_DELIVERY_POLICY: Readonly<DeliveryPolicy> = {
  timeoutMs: 10_000,
  firstRetryMs: 5_000,
  backoffFactor: 2,
  maxDelayMs: 10 * 60_000,
  giveUpAfterMs: 60 * 60_000,
  queueSize: 1_000,
  concurrency: 4,
};

/** The delay before retry number `retry` (1 = the first retry). */
export function retryDelayMs(policy: DeliveryPolicy, retry: number): number {
  return Math.min(policy.maxDelayMs, policy.firstRetryMs * policy.backoffFactor ** (retry - 1));
}

/** The outcome of one attempt. */
export type AttemptOutcome = 'success' | 'http_error' | 'timeout' | 'network_error';

export interface DeliveryRequest {
  url: string;
  headers: Record<string, string>;
  body: string;
  signal: AbortSignal;
}

/** Sends one attempt; resolves with the HTTP status, rejects on a network error or the abort. */
export type Send = (request: DeliveryRequest) => Promise<number>;

export const fetchSend: Send = async (request) => {
  const response = await fetch(request.url, {
    method: 'POST',
    headers: request.headers,
    body: request.body,
    signal: request.signal,
    redirect: 'manual',
  });
  // Read (and drop) the body so the connection can be reused.
  await response.arrayBuffer();
  return response.status;
};

export interface WebhooksObserver {
  attempt(target: string, outcome: AttemptOutcome): void;
  gaveUp(target: string): void;
  dropped(target: string): void;
  queueDepth(target: string, depth: number): void;
  /** A target is gone (SIGHUP): its series may go too. */
  removed(target: string): void;
}

export interface WebhooksLogger {
  info(object: Record<string, unknown>, message: string): void;
  warn(object: Record<string, unknown>, message: string): void;
}

export interface WebhooksOptions {
  policy?: Partial<DeliveryPolicy>;
  send?: Send;
  /** Milliseconds since the epoch, for webhook-timestamp. */
  now?: () => number;
  logger: WebhooksLogger;
  observer?: WebhooksObserver;
}

/** A target as metrics and logs name it: without credentials or query (either may hold a secret). */
export function targetLabel(url: string): string {
  const parsed = new URL(url);
  return `${parsed.protocol}//${parsed.host}${parsed.pathname}`;
}

interface Delivery {
  event: StoredEvent;
  /** Attempts made so far. */
  attempts: number;
  /** When the first attempt started (the retry bound counts from it). */
  firstAt: number;
  timer: NodeJS.Timeout | null;
}

/** One target's queue: deliveries due now in event order, and those waiting for a retry. */
class TargetQueue {
  readonly label: string;
  private readonly signer: Webhook;
  private readonly ready: Delivery[] = [];
  private readonly waiting = new Set<Delivery>();
  private inFlight = 0;
  private closed = false;
  /** Logged once per run of drops, not once per event. */
  private dropping = false;
  private failing = false;

  constructor(
    readonly target: WebhookTarget,
    private readonly policy: DeliveryPolicy,
    private readonly options: Required<Pick<WebhooksOptions, 'send' | 'now'>> & WebhooksOptions,
  ) {
    this.label = targetLabel(target.url);
    this.signer = new Webhook(target.secret);
    this.report();
  }

  get depth(): number {
    return this.ready.length + this.waiting.size + this.inFlight;
  }

  offer(event: StoredEvent): void {
    if (this.closed) return;
    if (this.target.types !== null && !this.target.types.has(event.type)) return;
    if (this.depth >= this.policy.queueSize) {
      this.options.observer?.dropped(this.label);
      if (!this.dropping) {
        this.dropping = true;
        this.options.logger.warn(
          { event: 'webhook_queue_full', target: this.label, queueSize: this.policy.queueSize },
          `webhook target ${this.label} is ${this.policy.queueSize} events behind: new events for it are dropped until it catches up`,
        );
      }
      return;
    }
    this.dropping = false;
    this.ready.push({ event, attempts: 0, firstAt: 0, timer: null });
    this.pump();
    this.report();
  }

  close(): void {
    this.closed = true;
    for (const delivery of this.waiting) if (delivery.timer) clearTimeout(delivery.timer);
    this.waiting.clear();
    this.ready.length = 0;
    this.options.observer?.removed(this.label);
  }

  private pump(): void {
    while (!this.closed && this.inFlight < this.policy.concurrency && this.ready.length > 0) {
      const delivery = this.ready.shift()!;
      this.inFlight += 1;
      void this.attempt(delivery).finally(() => {
        this.inFlight -= 1;
        this.pump();
        this.report();
      });
    }
  }

  private async attempt(delivery: Delivery): Promise<void> {
    const now = this.options.now();
    if (delivery.attempts === 0) delivery.firstAt = now;
    delivery.attempts += 1;
    const { event } = delivery;
    const headers = {
      'content-type': 'application/json',
      'user-agent': 'wg-peerd',
      'webhook-id': event.id,
      'webhook-timestamp': String(Math.floor(now / 1000)),
      'webhook-signature': this.signer.sign(event.id, new Date(now), event.json),
    };
    const controller = new AbortController();
    const timeout = setTimeout(() => controller.abort(), this.policy.timeoutMs);
    let outcome: AttemptOutcome;
    let status: number | null = null;
    let reason: string | null = null;
    try {
      status = await this.options.send({
        url: this.target.url,
        headers,
        body: event.json,
        signal: controller.signal,
      });
      outcome = status >= 200 && status < 300 ? 'success' : 'http_error';
    } catch (error) {
      outcome = controller.signal.aborted ? 'timeout' : 'network_error';
      reason = reasonOf(error);
    } finally {
      clearTimeout(timeout);
    }
    this.options.observer?.attempt(this.label, outcome);
    if (outcome === 'success') {
      if (this.failing) {
        this.failing = false;
        this.options.logger.info(
          { event: 'webhook_target_recovered', target: this.label },
          `webhook target ${this.label} accepts deliveries again`,
        );
      }
      return;
    }
    this.retryLater(delivery, outcome, status, reason);
  }

  private retryLater(
    delivery: Delivery,
    outcome: AttemptOutcome,
    status: number | null,
    reason: string | null,
  ): void {
    if (this.closed) return;
    const delay = retryDelayMs(this.policy, delivery.attempts);
    const due = this.options.now() + delay;
    const detail = {
      target: this.label,
      id: delivery.event.id,
      type: delivery.event.type,
      outcome,
      status,
      reason,
      attempts: delivery.attempts,
    };
    if (due - delivery.firstAt > this.policy.giveUpAfterMs) {
      this.options.observer?.gaveUp(this.label);
      this.options.logger.warn(
        { event: 'webhook_given_up', ...detail },
        `gave up delivering event ${delivery.event.id} to ${this.label} after ${delivery.attempts} attempts (last: ${outcome})`,
      );
      return;
    }
    if (!this.failing) {
      this.failing = true;
      this.options.logger.warn(
        { event: 'webhook_attempt_failed', ...detail, retryInMs: delay },
        `webhook target ${this.label} failed (${outcome}${status === null ? '' : ` ${status}`}); retrying with backoff`,
      );
    }
    delivery.timer = setTimeout(() => {
      delivery.timer = null;
      this.waiting.delete(delivery);
      this.ready.push(delivery);
      // Retries go in event order among the deliveries due.
      this.ready.sort((a, b) => a.event.seq - b.event.seq);
      this.pump();
      this.report();
    }, delay);
    delivery.timer.unref();
    this.waiting.add(delivery);
  }

  private report(): void {
    this.options.observer?.queueDepth(this.label, this.depth);
  }
}

export class Webhooks {
  private queues: TargetQueue[] = [];
  private readonly policy: DeliveryPolicy;
  private readonly options: Required<Pick<WebhooksOptions, 'send' | 'now'>> & WebhooksOptions;
  private unsubscribe: (() => void) | null = null;

  constructor(
    private readonly hub: EventHub,
    options: WebhooksOptions,
  ) {
    this.policy = { ...DEFAULT_DELIVERY_POLICY, ...options.policy };
    // Not a spread: an option given as undefined (Events passes its own through) keeps the default.
    this.options = { ...options, send: options.send ?? fetchSend, now: options.now ?? Date.now };
  }

  get targetCount(): number {
    return this.queues.length;
  }

  /**
   * Sets the targets (start, SIGHUP): a target whose URL, secret and types are unchanged keeps
   * its queue; a removed one is dropped with what it had queued.
   */
  setTargets(targets: readonly WebhookTarget[]): void {
    const kept: TargetQueue[] = [];
    const old = new Map(this.queues.map((queue) => [keyOf(queue.target), queue]));
    for (const target of targets) {
      const key = keyOf(target);
      const existing = old.get(key);
      if (existing !== undefined) {
        old.delete(key);
        kept.push(existing);
      } else {
        kept.push(new TargetQueue(target, this.policy, this.options));
      }
    }
    for (const queue of old.values()) queue.close();
    this.queues = kept;
    if (kept.length > 0 && this.unsubscribe === null) {
      this.unsubscribe = this.hub.subscribe((event) => {
        for (const queue of this.queues) queue.offer(event);
      });
    } else if (kept.length === 0 && this.unsubscribe !== null) {
      this.unsubscribe();
      this.unsubscribe = null;
    }
  }

  /** Per target label, events waiting or in flight. */
  depths(): Record<string, number> {
    return Object.fromEntries(this.queues.map((queue) => [queue.label, queue.depth]));
  }

  close(): void {
    this.setTargets([]);
  }
}

/** What a failed attempt's error says: fetch puts the system error (ECONNREFUSED) in `cause`. */
function reasonOf(error: unknown): string {
  const cause =
    error instanceof Error ? (error.cause as { code?: unknown } | undefined) : undefined;
  if (typeof cause?.code === 'string') return cause.code;
  return error instanceof Error ? error.message : String(error);
}

function keyOf(target: WebhookTarget): string {
  const types = target.types === null ? '*' : [...target.types].sort().join(',');
  return `${target.url} ${target.secret} ${types}`;
}
