/**
 * Webhooks (DESIGN §3): every event, or the types a target asks for, POSTed to each target of
 * `--webhooks-file` and signed per the Standard Webhooks specification with the npm
 * `standardwebhooks` library (`webhook-id` = the event id, `webhook-timestamp`,
 * `webhook-signature`). Each attempt times out and reads at most 64 KiB of the answer; a failed
 * one is retried, the first retry within 30 s, then with exponential backoff and jitter, until
 * `--webhook-retry-for` after the first attempt (36 h by default). Plain http: to another host
 * is warned of once per target. Each target has its own bounded queue and its own few attempts
 * in flight, so a target that is down fills only its own queue (new events over the bound are
 * dropped and counted) and slows neither the API nor another target. The targets file is
 * refused with one line naming the file and line, never quoting a field that may hold a secret.
 * Delivery is at least once: with a state dir (`outbox`), each event is on disk in the outbox
 * before its first attempt and leaves it once answered 2xx or given up, so what is pending at a
 * restart, a kill -9 or a power cut is delivered once more at the next start, with the same
 * `webhook-id` and body, signed anew at the attempt's time (a receiver checks the timestamp's
 * age), its retry window counted from when it was first queued. An outbox write that fails
 * delivers the event from memory, logged and counted. Without a state dir, pending deliveries
 * live in memory only.
 */
import { createHash } from 'node:crypto';
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

/** Event types a message may quote: only what looks like one, never a secret put there. */
const TYPE_LIKE = /^[a-z]{1,20}\.[a-z_]{1,40}$/;

/** Whether `text` is, or holds, a secret of the Standard Webhooks form. */
const holdsSecret = (text: string): boolean => /whsec_/i.test(text);

/**
 * The URL field of a line, checked: http: or https:, no credentials (fetch cannot send them and
 * they would be logged), no secret (a swapped line, or one pasted into the query).
 */
function checkUrl(field: string, at: string): URL {
  if (/^whsec_/i.test(field)) {
    throw new WebhooksFileError(
      `${at}: the first field holds a secret (whsec_...) where the URL belongs; a line is "<url> <secret> [<type>,<type>...]"`,
    );
  }
  if (holdsSecret(field)) {
    throw new WebhooksFileError(
      `${at}: the URL holds a secret (whsec_...); the secret goes in the second field, never in the URL`,
    );
  }
  let parsed: URL;
  try {
    parsed = new URL(field);
  } catch {
    throw new WebhooksFileError(
      `${at}: the first field is not a URL; a line is "<url> <secret> [<type>,<type>...]", like https://hooks.example/in`,
    );
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new WebhooksFileError(`${at}: the URL must be http: or https:`);
  }
  if (parsed.username !== '' || parsed.password !== '') {
    throw new WebhooksFileError(
      `${at}: the URL carries a user name or password (user:pass@), which is never sent and would be logged; the receiver checks the signature made with the secret instead`,
    );
  }
  return parsed;
}

function checkTypes(field: string, at: string): Set<EventType> {
  if (holdsSecret(field)) {
    throw new WebhooksFileError(
      `${at}: the third field holds a secret (whsec_...); a line is "<url> <secret> [<type>,<type>...]"`,
    );
  }
  const types = new Set<EventType>();
  for (const type of field.split(',')) {
    if (!isEventType(type)) {
      const named = TYPE_LIKE.test(type) ? `unknown event type ${JSON.stringify(type)}` : 'a type';
      throw new WebhooksFileError(
        `${at}: ${named} that is not an event type; the types are ${EVENT_TYPES.join(', ')}`,
      );
    }
    types.add(type);
  }
  return types;
}

/**
 * One target a line: `<url> <secret> [<type>,<type>…]`; blank lines and `#` comments are
 * ignored. `where` names the file in messages. A refused line is named by its number and what
 * is wrong, never by its text: no message quotes a field that may hold the secret.
 */
export function parseWebhooksText(text: string, where: string): WebhookTarget[] {
  const targets: WebhookTarget[] = [];
  text.split('\n').forEach((raw, index) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const at = `${where} line ${index + 1}`;
    const fields = line.split(/\s+/);
    const [url, secret, typeList] = fields as [string, string | undefined, string | undefined];
    const parsed = checkUrl(url, at);
    if (secret === undefined || fields.length > 3) {
      throw new WebhooksFileError(`${at}: expected "<url> <secret> [<type>,<type>...]"`);
    }
    const types = typeList === undefined ? null : checkTypes(typeList, at);
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
  /**
   * Each delay is drawn from [1 - jitter, 1] times the backoff's (0: none), so the retries of
   * many events to a target that comes back do not arrive in one burst.
   */
  jitter: number;
  /**
   * No attempt starts later than this after the first one (`--webhook-retry-for`): then the
   * event is given up.
   */
  giveUpAfterMs: number;
  /** Events waiting per target (retries included); a new one over it is dropped. */
  queueSize: number;
  /** Attempts in flight per target at most. */
  concurrency: number;
}

/**
 * DESIGN §3 and §4: the first retry within 30 s, then doubling up to an hour between attempts,
 * for 36 h (`--webhook-retry-for`; the Standard Webhooks example schedule spans about a day and
 * a half): about 45 attempts for an event whose target stays down.
 */
export const DEFAULT_DELIVERY_POLICY: Readonly<DeliveryPolicy> = {
  timeoutMs: 10_000,
  firstRetryMs: 5_000,
  backoffFactor: 2,
  maxDelayMs: 60 * 60_000,
  jitter: 0.5,
  giveUpAfterMs: 36 * 60 * 60_000,
  queueSize: 10_000,
  concurrency: 4,
};

/**
 * The delay before retry number `retry` (1 = the first retry): exponential backoff capped at
 * maxDelayMs, less a random part of up to `jitter` of it (`random` in [0, 1)).
 */
export function retryDelayMs(
  policy: DeliveryPolicy,
  retry: number,
  random: () => number = Math.random,
): number {
  const backoff = Math.min(
    policy.maxDelayMs,
    policy.firstRetryMs * policy.backoffFactor ** (retry - 1),
  );
  return Math.round(backoff * (1 - policy.jitter * random()));
}

/** What is read of a receiver's answer at most; the rest is not waited for. */
export const MAX_RESPONSE_BYTES = 64 * 1024;

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
  // Read (and drop) at most MAX_RESPONSE_BYTES of the body: a receiver's answer is only its
  // status, and a short one leaves the connection reusable; a longer one is cut off.
  const reader = response.body?.getReader();
  let read = 0;
  while (reader !== undefined) {
    const chunk = await reader.read();
    if (chunk.done) break;
    read += chunk.value.byteLength;
    if (read >= MAX_RESPONSE_BYTES) {
      await reader.cancel();
      break;
    }
  }
  return response.status;
};

export interface WebhooksObserver {
  attempt(target: string, outcome: AttemptOutcome): void;
  gaveUp(target: string): void;
  dropped(target: string): void;
  queueDepth(target: string, depth: number): void;
  /** A target is gone (SIGHUP): its series may go too. */
  removed(target: string): void;
  /** Writing an entry or a tombstone to the outbox failed (the event is delivered from memory). */
  outboxWriteFailed?(target: string): void;
}

export interface WebhooksLogger {
  info(object: Record<string, unknown>, message: string): void;
  warn(object: Record<string, unknown>, message: string): void;
}

/** A pending delivery as the outbox keeps it (src/state/outbox.ts, wired by main.ts). */
export interface PendingDelivery {
  /** The target's outbox key (outboxKeyOf: a hash of its URL, never the URL or the secret). */
  target: string;
  /** The event id: `webhook-id`. */
  id: string;
  type: string;
  /** The body, as first sent. */
  json: string;
  /** When it was queued, ms since the epoch: its retry window counts from here. */
  queuedAt: number;
}

/**
 * The durable outbox (with --state-dir): an event is added before its first attempt (the
 * promise resolves once it is on disk) and removed once answered 2xx or given up; what is
 * pending at start is delivered once more.
 */
export interface DeliveryOutbox {
  /** What was pending when it was opened, in the order queued. */
  pending(): readonly PendingDelivery[];
  add(entry: PendingDelivery): Promise<void>;
  remove(target: string, id: string): Promise<void>;
  /** Per outbox key: entries pending and when the oldest was queued. */
  stats(): ReadonlyMap<string, { depth: number; oldestAt: number }>;
}

/** One target's outbox as /metrics shows it. */
export interface OutboxDepth {
  /** targetLabel: the URL without credentials or query. */
  target: string;
  depth: number;
  /** When the oldest pending delivery was queued, ms since the epoch. */
  oldestAt: number;
}

export interface WebhooksOptions {
  policy?: Partial<DeliveryPolicy>;
  send?: Send;
  /** The jitter's random numbers in [0, 1) (Math.random; tests fix them). */
  random?: () => number;
  /** Milliseconds since the epoch, for webhook-timestamp. */
  now?: () => number;
  logger: WebhooksLogger;
  observer?: WebhooksObserver;
  /** With a state dir: pending deliveries survive restarts and crashes. */
  outbox?: DeliveryOutbox;
}

/** A target as metrics and logs name it: without credentials or query (either may hold a secret). */
export function targetLabel(url: string): string {
  const parsed = new URL(url);
  return `${parsed.protocol}//${parsed.host}${parsed.pathname}`;
}

/**
 * A target's key in the outbox: a hash of its URL, so the file names no URL (whose query may
 * hold a token) and a target whose secret or types change keeps its pending deliveries.
 */
export function outboxKeyOf(url: string): string {
  return createHash('sha256').update(url).digest('hex').slice(0, 24);
}

/** What a delivery sends: the event's id, type and body (also as an outbox entry holds them). */
interface Deliverable {
  readonly id: string;
  readonly type: string;
  readonly json: string;
}

interface Delivery {
  event: Deliverable;
  /** Its place among this daemon's deliveries (retries go in this order). */
  order: number;
  /** Attempts made so far. */
  attempts: number;
  /** When the retry window opened: the first attempt, or when an outbox entry was queued. */
  firstAt: number | null;
  queuedAt: number;
  /** Its outbox entry is on disk (to be removed once delivered or given up). */
  durable: boolean;
  timer: NodeJS.Timeout | null;
}

type QueueOptions = Required<Pick<WebhooksOptions, 'send' | 'now' | 'random'>> &
  WebhooksOptions & { nextOrder: () => number };

/** One target's queue: deliveries due now in event order, and those waiting for a retry. */
class TargetQueue {
  readonly label: string;
  readonly key: string;
  private readonly signer: Webhook;
  private readonly ready: Delivery[] = [];
  private readonly waiting = new Set<Delivery>();
  private inFlight = 0;
  /** Events being written to the outbox before their first attempt. */
  private writing = 0;
  private closed = false;
  /**
   * Closed: where its deliveries still pending go. `forget`: removed from the outbox (a target
   * removed at SIGHUP); `keep`: left there (shutdown); a queue: the target's new settings.
   */
  private heir: TargetQueue | 'forget' | 'keep' = 'keep';
  /** Logged once per run of drops, not once per event. */
  private dropping = false;
  private failing = false;
  private outboxFailing = false;

  constructor(
    readonly target: WebhookTarget,
    private readonly policy: DeliveryPolicy,
    private readonly options: QueueOptions,
  ) {
    this.label = targetLabel(target.url);
    this.key = outboxKeyOf(target.url);
    this.signer = new Webhook(target.secret);
    this.report();
  }

  get depth(): number {
    return this.ready.length + this.waiting.size + this.inFlight + this.writing;
  }

  offer(event: StoredEvent): void {
    if (this.closed) return;
    if (this.target.types !== null && !this.target.types.has(event.type)) return;
    if (this.full()) return;
    const delivery: Delivery = {
      event,
      order: this.options.nextOrder(),
      attempts: 0,
      firstAt: null,
      queuedAt: this.options.now(),
      durable: false,
      timer: null,
    };
    const outbox = this.options.outbox;
    if (outbox === undefined) {
      this.enqueue(delivery);
      return;
    }
    // On disk before the first attempt; a failed write still delivers from memory.
    this.writing += 1;
    const entry = { target: this.key, id: event.id, type: event.type, json: event.json };
    outbox
      .add({ ...entry, queuedAt: delivery.queuedAt })
      .then(
        () => {
          delivery.durable = true;
          this.outboxFailing = false;
        },
        (error: unknown) => this.outboxFailed(error, event.id),
      )
      .finally(() => {
        this.writing -= 1;
        this.enqueue(delivery);
      });
    this.report();
  }

  /** Deliveries the outbox held at start (or a closed queue of the same URL handed over). */
  adopt(deliveries: readonly Delivery[]): void {
    for (const delivery of deliveries) {
      if (delivery.timer) clearTimeout(delivery.timer);
      delivery.timer = null;
      this.ready.push(delivery);
    }
    this.ready.sort((a, b) => a.order - b.order);
    this.pump();
    this.report();
  }

  /**
   * The outbox's entries for this target at start, oldest first: each delivered once more,
   * its retry window counted from when it was first queued; those over the bound are dropped.
   */
  restore(entries: readonly PendingDelivery[]): void {
    const room = Math.max(0, this.policy.queueSize - this.depth);
    const over = entries.slice(room);
    if (over.length > 0) {
      for (const entry of over) {
        this.options.observer?.dropped(this.label);
        this.forgetEntry(entry.id);
      }
      this.options.logger.warn(
        {
          event: 'webhook_outbox_dropped',
          target: this.label,
          dropped: over.length,
          queueSize: this.policy.queueSize,
        },
        `the webhook outbox held ${entries.length} events for ${this.label}, more than its queue of ${this.policy.queueSize}: the ${over.length} newest are dropped`,
      );
    }
    this.adopt(
      entries.slice(0, room).map((entry) => ({
        event: { id: entry.id, type: entry.type, json: entry.json },
        order: this.options.nextOrder(),
        attempts: 0,
        firstAt: entry.queuedAt,
        queuedAt: entry.queuedAt,
        durable: true,
        timer: null,
      })),
    );
  }

  /**
   * Stops delivering. `heir`: see the field; what it had queued goes there at once, what is in
   * flight or being written once that ends.
   */
  close(heir: TargetQueue | 'forget' | 'keep'): void {
    this.closed = true;
    this.heir = heir;
    const pending = [...this.ready, ...this.waiting];
    for (const delivery of this.waiting) if (delivery.timer) clearTimeout(delivery.timer);
    this.waiting.clear();
    this.ready.length = 0;
    this.release(pending);
    this.options.observer?.removed(this.label);
  }

  /** A closed queue's pending deliveries, to its heir. */
  private release(deliveries: readonly Delivery[]): void {
    if (deliveries.length === 0) return;
    if (this.heir instanceof TargetQueue) this.heir.adopt(deliveries);
    else if (this.heir === 'forget') for (const delivery of deliveries) this.forget(delivery);
  }

  private full(): boolean {
    if (this.depth < this.policy.queueSize) {
      this.dropping = false;
      return false;
    }
    this.options.observer?.dropped(this.label);
    if (!this.dropping) {
      this.dropping = true;
      this.options.logger.warn(
        { event: 'webhook_queue_full', target: this.label, queueSize: this.policy.queueSize },
        `webhook target ${this.label} is ${this.policy.queueSize} events behind: new events for it are dropped until it catches up`,
      );
    }
    return true;
  }

  private enqueue(delivery: Delivery): void {
    if (this.closed) {
      this.release([delivery]);
      return;
    }
    this.ready.push(delivery);
    this.pump();
    this.report();
  }

  /** Delivered or given up: its outbox entry goes (a failure means one more delivery later). */
  private forget(delivery: Delivery): void {
    if (delivery.durable) this.forgetEntry(delivery.event.id);
  }

  private forgetEntry(id: string): void {
    this.options.outbox
      ?.remove(this.key, id)
      .catch((error: unknown) => this.outboxFailed(error, id));
  }

  private outboxFailed(error: unknown, id: string): void {
    this.options.observer?.outboxWriteFailed?.(this.label);
    if (this.outboxFailing) return;
    this.outboxFailing = true;
    this.options.logger.warn(
      { event: 'webhook_outbox_write_failed', target: this.label, id, reason: reasonOf(error) },
      `writing the webhook outbox for ${this.label} failed (${reasonOf(error)}): events are delivered from memory, and one pending at a crash or restart may be lost or delivered twice`,
    );
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
    delivery.firstAt ??= now;
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
      this.forget(delivery);
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
    if (this.closed) {
      this.release([delivery]);
      return;
    }
    const delay = retryDelayMs(this.policy, delivery.attempts, this.options.random);
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
    if (due - (delivery.firstAt ?? 0) > this.policy.giveUpAfterMs) {
      this.forget(delivery);
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
      this.ready.sort((a, b) => a.order - b.order);
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
  private readonly options: QueueOptions;
  private unsubscribe: (() => void) | null = null;
  /** Targets warned of for plain http: to another host, once each for the daemon's life. */
  private readonly warnedPlain = new Set<string>();
  private order = 0;
  /** The outbox's entries at start, until the first setTargets hands them to their targets. */
  private loaded: readonly PendingDelivery[] | null;

  constructor(
    private readonly hub: EventHub,
    options: WebhooksOptions,
  ) {
    this.policy = { ...DEFAULT_DELIVERY_POLICY, ...options.policy };
    // Not a spread: an option given as undefined (Events passes its own through) keeps the default.
    this.options = {
      ...options,
      send: options.send ?? fetchSend,
      now: options.now ?? Date.now,
      random: options.random ?? Math.random,
      nextOrder: () => ++this.order,
    };
    this.loaded = options.outbox?.pending() ?? null;
  }

  get targetCount(): number {
    return this.queues.length;
  }

  /**
   * Sets the targets (start, SIGHUP): a target whose URL, secret and types are unchanged keeps
   * its queue; one whose URL stays but whose secret or types change takes over its pending
   * deliveries; a removed one is dropped with what it had queued (from the outbox too). The
   * first call hands each target what the outbox held for it.
   */
  setTargets(targets: readonly WebhookTarget[]): void {
    const kept: TargetQueue[] = [];
    const fresh = new Map<string, TargetQueue>();
    const old = new Map(this.queues.map((queue) => [keyOf(queue.target), queue]));
    for (const target of targets) {
      const key = keyOf(target);
      const existing = old.get(key);
      if (existing !== undefined) {
        old.delete(key);
        kept.push(existing);
      } else {
        const queue = new TargetQueue(target, this.policy, this.options);
        this.warnPlain(queue.label, target.url);
        kept.push(queue);
        if (!fresh.has(queue.key)) fresh.set(queue.key, queue);
      }
    }
    for (const queue of old.values()) queue.close(fresh.get(queue.key) ?? 'forget');
    this.queues = kept;
    this.restoreLoaded();
    if (kept.length > 0 && this.unsubscribe === null) {
      this.unsubscribe = this.hub.subscribe((event) => {
        for (const queue of this.queues) queue.offer(event);
      });
    } else if (kept.length === 0 && this.unsubscribe !== null) {
      this.unsubscribe();
      this.unsubscribe = null;
    }
  }

  /** The outbox's entries at start, to their targets; those of a target no longer listed go. */
  private restoreLoaded(): void {
    const loaded = this.loaded;
    if (loaded === null) return;
    this.loaded = null;
    const byKey = new Map<string, PendingDelivery[]>();
    for (const entry of loaded) {
      const list = byKey.get(entry.target) ?? [];
      list.push(entry);
      byKey.set(entry.target, list);
    }
    for (const queue of this.queues) {
      const entries = byKey.get(queue.key);
      if (entries === undefined) continue;
      byKey.delete(queue.key);
      queue.restore(entries);
    }
    let orphans = 0;
    for (const [key, entries] of byKey) {
      orphans += entries.length;
      for (const entry of entries) {
        this.options.outbox?.remove(key, entry.id).catch(() => undefined);
      }
    }
    if (orphans > 0) {
      this.options.logger.warn(
        { event: 'webhook_outbox_orphans', dropped: orphans },
        `the webhook outbox held ${orphans} pending events for targets no longer in --webhooks-file: dropped`,
      );
    }
    if (loaded.length > orphans) {
      this.options.logger.info(
        { event: 'webhook_outbox_restored', pending: loaded.length - orphans },
        `the webhook outbox held ${loaded.length - orphans} pending events: each is delivered once more (same webhook-id)`,
      );
    }
  }

  /** Plain http: to a host other than this one: the payloads travel in clear (once a target). */
  private warnPlain(label: string, url: string): void {
    const { protocol, hostname } = new URL(url);
    if (protocol !== 'http:' || isLoopbackHost(hostname) || this.warnedPlain.has(label)) return;
    this.warnedPlain.add(label);
    this.options.logger.warn(
      { event: 'webhook_plain_http', target: label },
      `webhook target ${label} is plain http: to another host: every event travels in clear ` +
        '(the signature still proves it comes from wg-peerd); use https:',
    );
  }

  /** Per target label, events waiting or in flight. */
  depths(): Record<string, number> {
    return Object.fromEntries(this.queues.map((queue) => [queue.label, queue.depth]));
  }

  /** Per target, its outbox's depth and oldest entry (none without a state dir). */
  outboxDepths(): OutboxDepth[] {
    const stats = this.options.outbox?.stats();
    if (stats === undefined) return [];
    const seen = new Set<string>();
    const depths: OutboxDepth[] = [];
    for (const queue of this.queues) {
      if (seen.has(queue.label)) continue;
      seen.add(queue.label);
      const stat = stats.get(queue.key);
      depths.push({
        target: queue.label,
        depth: stat?.depth ?? 0,
        oldestAt: stat?.oldestAt ?? Number.NaN,
      });
    }
    return depths;
  }

  /**
   * Shutdown: stops delivering; what is pending stays in the outbox (delivered at the next
   * start) or, without one, is lost.
   */
  close(): void {
    for (const queue of this.queues) queue.close('keep');
    this.queues = [];
    this.unsubscribe?.();
    this.unsubscribe = null;
  }
}

/** localhost, 127.0.0.0/8 and [::1]: a receiver on this host (URL.hostname brackets IPv6). */
function isLoopbackHost(hostname: string): boolean {
  return (
    hostname === 'localhost' ||
    hostname === '[::1]' ||
    /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(hostname)
  );
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
