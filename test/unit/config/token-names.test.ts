import { expect } from 'chai';
import { TokenFileError, loadTokens, parseTokenText } from '../../../src/token-files';

const A = 'aaaaaaaaaaaaaaaaaaaa0001';
const B = 'bbbbbbbbbbbbbbbbbbbb0002';

function refusal(text: string): string {
  try {
    parseTokenText(text, '--token-file /t');
  } catch (error) {
    expect(error).to.be.instanceOf(TokenFileError);
    return (error as Error).message;
  }
  throw new Error('parseTokenText accepted it');
}

// Issue 21: token files may name their tokens, `name:token`, so the log can say which token
// made a change without ever writing the token.
describe('token files: names', () => {
  it('reads name:token lines beside bare tokens, in order', () => {
    expect(parseTokenText(`# ops\nalice:${A}\n${B}\n`, '/t')).to.deep.equal([
      { name: 'alice', token: A },
      B,
    ]);
  });

  it('takes names of letters, digits and _ . @ -, up to 64 characters', () => {
    for (const name of ['grafana', 'ops.alice@example.net', 'ci-bot_2', 'x'.repeat(64), '7']) {
      expect(parseTokenText(`${name}:${A}`, '/t')).to.deep.equal([{ name, token: A }]);
    }
  });

  it('splits at the first colon: a token that holds ":" is written with a name in front', () => {
    expect(parseTokenText(`bot:${A}:${B}`, '/t')).to.deep.equal([
      { name: 'bot', token: `${A}:${B}` },
    ]);
  });

  it('refuses a bad name with the line number and how to write a token holding ":"', () => {
    for (const name of ['', 'has space', '-leading-dash', 'x'.repeat(65), 'a/b', 'é']) {
      const message = refusal(`${A}\n${name}:${B}`);
      expect(message).to.contain('--token-file /t line 2');
      expect(message).to.contain('name:token');
      expect(message).to.not.contain(B);
    }
  });

  it('still checks the token after the name (length, characters)', () => {
    expect(refusal('alice:short')).to.match(/line 1 holds a token of 5 characters/);
    expect(refusal(`alice:${A} ${B}`)).to.contain('visible ASCII characters without spaces');
  });

  it('lets the old and the new token of a rotation share one name', () => {
    expect(parseTokenText(`alice:${A}\nalice:${B}`, '/t')).to.deep.equal([
      { name: 'alice', token: A },
      { name: 'alice', token: B },
    ]);
  });

  it('drops a repeated token with the same name, refuses one token under two names', () => {
    expect(parseTokenText(`alice:${A}\nalice:${A}\n${B}\n${B}`, '/t')).to.deep.equal([
      { name: 'alice', token: A },
      B,
    ]);
    expect(refusal(`alice:${A}\nbob:${A}`)).to.contain('line 2 repeats an earlier token');
    expect(refusal(`${A}\nbob:${A}`)).to.contain('line 2 repeats an earlier token');
  });

  it('keeps a token of both files as admin only, whatever its names', () => {
    const files: Record<string, string> = { '/a': `ops:${A}`, '/r': `grafana:${A}\n${B}` };
    const tokens = loadTokens(
      {
        admin: { kind: 'file', path: '/a', flag: '--token-file' },
        read: { kind: 'file', path: '/r', flag: '--read-token-file' },
      },
      (path) => ({ text: files[path]!, mode: 0o100600 }),
    );
    expect(tokens).to.deep.equal({ admin: [{ name: 'ops', token: A }], read: [B] });
  });
});
