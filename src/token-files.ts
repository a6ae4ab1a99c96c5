/**
 * Token files (DESIGN §3, §4): what a file may hold and who may read it, checked the same way at
 * start and on every SIGHUP re-read.
 *
 * Format: one token per line; surrounding whitespace (also a CRLF) is ignored; blank lines and
 * lines whose first non-blank character is `#` are ignored, so an operator can annotate a token
 * ("# grafana, added 2026-11") and keep the old one next to the new while rotating. A token is
 * visible ASCII without spaces (it travels in a header), at least 16 characters, and cannot
 * start with `#`.
 */
import { closeSync, fstatSync, openSync, readFileSync } from 'node:fs';

/** Fewer characters than this are guessable; `openssl rand -hex 32` gives 64. */
export const MIN_TOKEN_LENGTH = 16;

const TOKEN = /^[\x21-\x7e]+$/;

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

/** The tokens of a file's text, in order, without duplicates. */
export function parseTokenText(text: string, where: string): string[] {
  const tokens: string[] = [];
  text.split('\n').forEach((raw, index) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const token = checkToken(line, `${where} line ${index + 1}`);
    if (!tokens.includes(token)) tokens.push(token);
  });
  if (tokens.length === 0) throw new TokenFileError(`${where} holds no token`);
  return tokens;
}

/** Reads, checks and parses a token file; `flag` names it in messages ("--token-file"). */
export function loadTokenFile(path: string, flag: string, read: ReadTokenFile): string[] {
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
  { kind: 'file'; path: string; flag: string } | { kind: 'value'; tokens: string[] };

export interface TokenSources {
  admin: TokenSource | null;
  read: TokenSource | null;
}

export interface Tokens {
  admin: string[];
  read: string[];
}

function load(source: TokenSource | null, read: ReadTokenFile): string[] {
  if (source === null) return [];
  return source.kind === 'value' ? source.tokens : loadTokenFile(source.path, source.flag, read);
}

/**
 * Every token of both scopes. A token listed under both counts as admin only (the stronger
 * scope wins; listing it as read too is a harmless leftover of a rotation).
 */
export function loadTokens(sources: TokenSources, read: ReadTokenFile): Tokens {
  const admin = load(sources.admin, read);
  const readOnly = load(sources.read, read).filter((token) => !admin.includes(token));
  return { admin, read: readOnly };
}
