import { expect } from 'chai';
import { SerialQueue } from '../../../src/netlink/serial-queue';

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('netlink/serial-queue: the one serialization primitive', () => {
  it('runs tasks one at a time in arrival order', async () => {
    const queue = new SerialQueue();
    const events: string[] = [];
    let running = 0;
    await Promise.all(
      [1, 2, 3].map((n) =>
        queue.run(async () => {
          running += 1;
          expect(running).to.equal(1);
          events.push(`start ${n}`);
          await tick();
          events.push(`end ${n}`);
          running -= 1;
        }),
      ),
    );
    expect(events).to.deep.equal(['start 1', 'end 1', 'start 2', 'end 2', 'start 3', 'end 3']);
  });

  it('goes on after a task fails', async () => {
    const queue = new SerialQueue();
    const failed = queue.run(async () => {
      throw new Error('boom');
    });
    const next = queue.run(async () => 'ran');
    await failed.then(
      () => expect.fail('should reject'),
      (error: Error) => expect(error.message).to.equal('boom'),
    );
    expect(await next).to.equal('ran');
  });

  it('runs work queued from inside a task at once (re-entrant), and other work after it', async () => {
    const queue = new SerialQueue();
    const events: string[] = [];
    const outer = queue.run(async () => {
      events.push('outer start');
      await tick();
      await queue.run(async () => {
        events.push('inner');
      });
      events.push('outer end');
    });
    const later = queue.run(async () => {
      events.push('later');
    });
    await Promise.all([outer, later]);
    expect(events).to.deep.equal(['outer start', 'inner', 'outer end', 'later']);
  });

  it('is still re-entrant after every queue went idle (the storage is turned off then on)', async () => {
    const a = new SerialQueue();
    const b = new SerialQueue();
    for (let cycle = 0; cycle < 2; cycle++) {
      const events: string[] = [];
      const outer = a.run(async () => {
        await tick();
        await b.run(async () => {
          await tick();
          await a.run(async () => {
            events.push('a again, inside a');
          });
        });
        events.push('outer end');
      });
      const later = a.run(async () => {
        events.push('later');
      });
      await Promise.all([outer, later]);
      expect(events).to.deep.equal(['a again, inside a', 'outer end', 'later']);
      await tick();
    }
  });

  it('keeps two queues apart: being inside one does not let work jump the other', async () => {
    const a = new SerialQueue();
    const b = new SerialQueue();
    const events: string[] = [];
    let release!: () => void;
    const holder = b.run(
      () =>
        new Promise<void>((resolve) => {
          release = () => {
            events.push('b released');
            resolve();
          };
        }),
    );
    const nested = a.run(() =>
      b.run(async () => {
        events.push('b from inside a');
      }),
    );
    await tick();
    release();
    await Promise.all([holder, nested]);
    expect(events).to.deep.equal(['b released', 'b from inside a']);
  });
});
