import { expect } from 'chai';
import { UsageFence } from '../../../src/peers/usage-fence';

const A = 'hS5kTn5b3Ve1pQHnaeNmZ2k4M5eyJ1xCqFe2hDeHjlA=';
const B = 'xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=';

describe('peers/usage-fence: which counted bytes a checkpoint may save', () => {
  it('keeps a count read after every change to its cap had ended', async () => {
    const fence = new UsageFence();
    await fence.around(A, () => Promise.resolve());
    const token = fence.token();
    expect(fence.stale(A, token)).to.equal(false);
    expect(fence.stale(B, token)).to.equal(false);
  });

  it('drops a count read before a change of its own cap ended, and only that peer’s', async () => {
    const fence = new UsageFence();
    const token = fence.token();
    await fence.around(A, () => Promise.resolve());
    expect(fence.stale(A, token)).to.equal(true);
    expect(fence.stale(B, token)).to.equal(false);
    expect(fence.stale(A, fence.token()), 'a read started after the change').to.equal(false);
  });

  it('drops the count of a peer whose change runs now, even one begun before the read', async () => {
    const fence = new UsageFence();
    let finish: () => void = () => undefined;
    const running = fence.around(A, () => new Promise<void>((resolve) => (finish = resolve)));
    const token = fence.token();
    expect(fence.stale(A, token)).to.equal(true);
    finish();
    await running;
    expect(fence.stale(A, token), 'it ended after the read began').to.equal(true);
  });

  it('counts overlapping changes of one peer: stale until the last of them ends', async () => {
    const fence = new UsageFence();
    const ends: Array<() => void> = [];
    const first = fence.around(A, () => new Promise<void>((resolve) => ends.push(resolve)));
    const second = fence.around(A, () => new Promise<void>((resolve) => ends.push(resolve)));
    ends[0]!();
    await first;
    expect(fence.stale(A, fence.token())).to.equal(true);
    ends[1]!();
    await second;
    expect(fence.stale(A, fence.token())).to.equal(false);
  });

  it('ends the change when it fails too, and passes the failure on', async () => {
    const fence = new UsageFence();
    const token = fence.token();
    const failed = fence.around(A, () => Promise.reject(new Error('EPERM')));
    await failed.then(
      () => expect.fail('the failure was swallowed'),
      (error: Error) => expect(error.message).to.equal('EPERM'),
    );
    expect(fence.stale(A, token)).to.equal(true);
    expect(fence.stale(A, fence.token())).to.equal(false);
  });

  it('forgets only changes that no read at or after the given token can be stale for', async () => {
    const fence = new UsageFence();
    const early = fence.token();
    await fence.around(A, () => Promise.resolve());
    const later = fence.token();
    await fence.around(B, () => Promise.resolve());
    fence.forget(later);
    expect(fence.stale(A, later)).to.equal(false);
    expect(fence.stale(B, later), 'B ended after the later read began').to.equal(true);
    // A's change is forgotten: it could only make reads older than `later` stale, such as `early`.
    expect(fence.stale(A, early)).to.equal(false);
  });
});
