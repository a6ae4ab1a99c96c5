/**
 * A reader of Server-Sent Events as a client sees them: chunks in, whole events out (id, event,
 * data). Only what wg-peerd writes: one `data:` line per event; comments and `retry:` skipped.
 */
export interface SseEvent {
  id: string;
  type: string;
  /** The `data:` line's JSON, parsed. */
  data: Record<string, unknown>;
}

export class SseReader {
  private buffer = '';

  /** The events completed by this chunk, in order. */
  push(chunk: string): SseEvent[] {
    this.buffer += chunk;
    const events: SseEvent[] = [];
    let end: number;
    while ((end = this.buffer.indexOf('\n\n')) >= 0) {
      const frame = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      const id = /^id: (.*)$/m.exec(frame)?.[1];
      const type = /^event: (.*)$/m.exec(frame)?.[1];
      const data = /^data: (.*)$/m.exec(frame)?.[1];
      if (id !== undefined && type !== undefined && data !== undefined) {
        events.push({ id, type, data: JSON.parse(data) as Record<string, unknown> });
      }
    }
    return events;
  }
}
