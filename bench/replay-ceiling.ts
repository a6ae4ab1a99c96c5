/**
 * Transfer ceiling for `npm run bench:api` (C) — NOT product code. A plain node http server that
 * answers every request with the same bytes, read once from a file (the daemon's own list body,
 * fetched once by the bench) and kept in memory, with the daemon's Content-Type and a
 * Content-Length: what serving that body costs when producing it costs nothing.
 *
 * Usage: node dist/bench/replay-ceiling.js --body FILE --content-type TYPE --listen HOST:PORT
 */
import { readFileSync } from 'node:fs';
import http from 'node:http';

function option(name: string): string {
  const at = process.argv.indexOf(name);
  const value = at >= 0 ? process.argv[at + 1] : undefined;
  if (value === undefined) throw new Error(`replay-ceiling: ${name} is required`);
  return value;
}

const body = readFileSync(option('--body'));
const contentType = option('--content-type');
const [host, port] = option('--listen').split(':');

const server = http.createServer((_req, res) => {
  res.writeHead(200, { 'Content-Type': contentType, 'Content-Length': body.length });
  res.end(body);
});

server.listen(Number(port), host, () => console.log(`ceiling listening on ${host}:${port}`));
process.on('SIGTERM', () => process.exit(0));
