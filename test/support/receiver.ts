/**
 * One transfer between two helper processes, as every kernel test that moves bytes through a
 * tunnel runs it: the receiver is started first and says `listening` on a line of its own, then
 * the sender is started, and the receiver's result is the first line of its stdout that is a
 * JSON object. Both processes are killed however it ends. A receiver that exits before giving
 * its line fails the transfer with its stderr, so a helper's crash reads as a crash and not as
 * a timeout.
 */
import type { ChildProcess } from 'node:child_process';

/** Resolves with the first line of the child's stdout that `wanted` accepts. */
export function firstLineOf(
  child: ChildProcess,
  wanted: (line: string) => boolean,
  name: string,
): Promise<string> {
  return new Promise((resolve, reject) => {
    let buffer = '';
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout?.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      const lines = buffer.split('\n');
      buffer = lines.pop() ?? '';
      const line = lines.find(wanted);
      if (line !== undefined) resolve(line);
    });
    child.on('exit', (code) => reject(new Error(`${name} exited (${code}) early: ${stderr}`)));
  });
}

/** Runs one transfer (see the top of this file) and gives the receiver's JSON result. */
export async function receive<T>(
  receiver: ChildProcess,
  startSender: () => ChildProcess,
  name: string,
): Promise<T> {
  let sender: ChildProcess | undefined;
  try {
    await firstLineOf(receiver, (line) => line === 'listening', name);
    const result = firstLineOf(receiver, (line) => line.startsWith('{'), name);
    sender = startSender();
    return JSON.parse(await result) as T;
  } finally {
    receiver.kill();
    sender?.kill();
  }
}
