/**
 * Token files (DESIGN §3, §4): what a file may hold and who may read it, checked the same way at
 * start and on every SIGHUP re-read.
 *
 * Format: one token per line; surrounding whitespace (also a CRLF) is ignored; blank lines and
 * lines whose first non-blank character is `#` are ignored, so an operator can annotate a token
 * ("# grafana, added 2026-11") and keep the old one next to the new while rotating. A token is
 * visible ASCII without spaces (it travels in a header), at least 16 characters, and cannot
 * start with `#`.
 *
 * A line may name its token, `name:token` (issue 21): the name, never the token, is what the
 * change lines of the log say made the change. The part before the first `:` is the name:
 * letters, digits, `_ . @ -`, 1 to 64 characters, starting with a letter or digit; a token that
 * holds a `:` itself therefore needs a name in front. Two lines may share a name (the old and
 * the new token of a rotation); one token under two names is refused. A token without a name is
 * shown in the log by its fingerprint instead (auth.ts).
 */
import { closeSync, fstatSync, openSync, readFileSync } from 'node:fs';

/** Fewer characters than this are guessable; `openssl rand -hex 32` gives 64. */
export const MIN_TOKEN_LENGTH = 16;

const TOKEN = /^[\x21-\x7e]+$/;
const NAME = /^[A-Za-z0-9][\w.@-]{0,63}$/;

/** A token with the name its file gave it. */
export interface NamedToken {
  token: string;
  name: string;
}

/** A token as a file or variable gives it: the bare token, or the token with its name. */
export type TokenEntry = string | NamedToken;

export function secretOf(entry: TokenEntry): string {
  return typeof entry === 'string' ? entry : entry.token;
}

export function nameOf(entry: TokenEntry): string | null {
  return typeof entry === 'string' ? null : entry.name;
}

/** A token file's text and permission bits, read from one open file (no race between the two). */
export interface TokenFileContent {
  text: string;
  mode: number;
}

export type ReadTokenFile = (path: string) => TokenFileContent;

/** A token file or token that must not be used; the message is one line, never the token. */
export class TokenFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TokenFileError';
  }
}

export const readTokenFileFromDisk: ReadTokenFile = (path) => {
  const fd = openSync(path, 'r');
  try {
    return { mode: fstatSync(fd).mode, text: readFileSync(fd, 'utf8') };
  } finally {
    closeSync(fd);
  }
};

/** Checks one token; `where` names its origin ("--token-file /x line 3", "WG_PEERD_TOKEN"). */
export function checkToken(token: string, where: string): string {
  if (!TOKEN.test(token)) {
    throw new TokenFileError(
      `${where} must hold tokens of visible ASCII characters without spaces`,
    );
  }
  if (token.length < MIN_TOKEN_LENGTH) {
    throw new TokenFileError(
      `${where} holds a token of ${token.length} characters; tokens need at least ` +
        `${MIN_TOKEN_LENGTH} (make one with: openssl rand -hex 32)`,
    );
  }
  return token;
}

/** One line's token, with its name when the line is `name:token`. */
function parseLine(line: string, where: string): TokenEntry {
  const colon = line.indexOf(':');
  if (colon === -1) return checkToken(line, where);
  const name = line.slice(0, colon);
  if (!NAME.test(name)) {
    throw new TokenFileError(
      `${where}: the name before ":" must be 1 to 64 letters, digits, "_", ".", "@" or "-" ` +
        '(a token that holds ":" needs a name in front: name:token)',
    );
  }
  return { name, token: checkToken(line.slice(colon + 1), where) };
}

/** The tokens of a file's text, in order, without duplicates. */
export function parseTokenText(text: string, where: string): TokenEntry[] {
  const entries: TokenEntry[] = [];
  text.split('\n').forEach((raw, index) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const lineWhere = `${where} line ${index + 1}`;
    const entry = parseLine(line, lineWhere);
    const twin = entries.find((e) => secretOf(e) === secretOf(entry));
    if (twin === undefined) {
      entries.push(entry);
    } else if (nameOf(twin) !== nameOf(entry)) {
      throw new TokenFileError(
        `${lineWhere} repeats an earlier token under another name: a token has one name`,
      );
    }
  });
  if (entries.length === 0) throw new TokenFileError(`${where} holds no token`);
  return entries;
}

/** Reads, checks and parses a token file; `flag` names it in messages ("--token-file"). */
export function loadTokenFile(path: string, flag: string, read: ReadTokenFile): TokenEntry[] {
  const where = `${flag} ${path}`;
  let content: TokenFileContent;
  try {
    content = read(path);
  } catch (error) {
    throw new TokenFileError(unreadableReason(error, where));
  }
  const exposed = exposedFileReason(content.mode, where);
  if (exposed !== null) throw new TokenFileError(exposed);
  return parseTokenText(content.text, where);
}

/** Why the file `where` names could not be read: the error's code (ENOENT, EACCES...). */
export function unreadableReason(error: unknown, where: string): string {
  const code = error instanceof Error && 'code' in error ? String(error.code) : 'cannot be read';
  return `${where} cannot be read (${code})`;
}

/**
 * Why a secret's file (a token file, a TLS key) must not be used: any permission for group or
 * others, as fstat reported `mode`; it must be private to the daemon's user. null when private.
 */
export function exposedFileReason(mode: number, where: string): string | null {
  if ((mode & 0o077) === 0) return null;
  const octal = (mode & 0o777).toString(8).padStart(4, '0');
  return (
    `${where} may be read by group or others (mode ${octal}): chmod 600 it and give it to ` +
    "the daemon's user"
  );
}

/** Where the tokens come from: a file (re-read on SIGHUP) or the variable's own value. */
export type TokenSource =
  { kind: 'file'; path: string; flag: string } | { kind: 'value'; tokens: TokenEntry[] };

export interface TokenSources {
  admin: TokenSource | null;
  read: TokenSource | null;
}

export interface Tokens {
  admin: TokenEntry[];
  read: TokenEntry[];
}

function load(source: TokenSource | null, read: ReadTokenFile): TokenEntry[] {
  if (source === null) return [];
  return source.kind === 'value' ? source.tokens : loadTokenFile(source.path, source.flag, read);
}

/**
 * Every token of both scopes. A token listed under both counts as admin only (the stronger
 * scope wins; listing it as read too is a harmless leftover of a rotation).
 */
export function loadTokens(sources: TokenSources, read: ReadTokenFile): Tokens {
  const admin = load(sources.admin, read);
  const adminSecrets = new Set(admin.map(secretOf));
  const readOnly = load(sources.read, read).filter((entry) => !adminSecrets.has(secretOf(entry)));
  return { admin, read: readOnly };
}
