import { expect } from 'chai';
import { ConfigError, helpText, parseConfig, type Config } from '../../../src/config';
import { readTokenFileFromDisk } from '../../../src/token-files';
import { TestPki } from '../../support/pki';

// Issue 22: --tls-cert, --tls-key, --tls-client-ca and their variables. The files' own checks
// are in tls-files.test.ts; the process's exit status 2 in main-process.test.ts.
describe('config: --tls-cert, --tls-key, --tls-client-ca (issue 22)', function () {
  this.timeout(60_000);
  const pki = new TestPki();
  const ca = pki.ca('options-ca');
  const server = pki.issue(ca, 'server', '/CN=vpn1.example.net', 'server');

  const parse = (argv: string[], env: Record<string, string> = {}): Config => {
    const outcome = parseConfig(argv, env, readTokenFileFromDisk);
    if (outcome.kind !== 'run') throw new Error('expected a configuration');
    return outcome.config;
  };
  const refusal = (argv: string[], env: Record<string, string> = {}): string => {
    try {
      parseConfig(argv, env, readTokenFileFromDisk);
    } catch (error) {
      expect(error).to.be.instanceOf(ConfigError);
      return (error as Error).message;
    }
    throw new Error('expected a ConfigError');
  };

  it('serves plain HTTP when none is given', () => {
    expect(parse([]).tls).to.equal(null);
  });

  it('takes the pair from the flags, the client CA too, and reads the files at once', () => {
    const config = parse([
      '--tls-cert',
      server.cert,
      `--tls-key=${server.key}`,
      '--tls-client-ca',
      ca.cert,
    ]);
    expect(config.tls?.sources).to.deep.equal({
      cert: server.cert,
      key: server.key,
      clientCa: ca.cert,
    });
    expect(config.tls?.material.certificate.subject).to.equal('CN=vpn1.example.net');
    expect(config.tls?.material.ca).to.equal(pki.read(ca.cert));
  });

  it('takes them from WG_PEERD_TLS_CERT, WG_PEERD_TLS_KEY and WG_PEERD_TLS_CLIENT_CA, a flag winning', () => {
    const env = {
      WG_PEERD_TLS_CERT: pki.file('absent.pem'),
      WG_PEERD_TLS_KEY: server.key,
      WG_PEERD_TLS_CLIENT_CA: ca.cert,
    };
    const config = parse(['--tls-cert', server.cert], env);
    expect(config.tls?.sources).to.deep.equal({
      cert: server.cert,
      key: server.key,
      clientCa: ca.cert,
    });
    expect(parse([], { ...env, WG_PEERD_TLS_CERT: server.cert }).tls?.sources.cert).to.equal(
      server.cert,
    );
  });

  it('treats an empty variable as unset', () => {
    expect(parse([], { WG_PEERD_TLS_CERT: '', WG_PEERD_TLS_KEY: '' }).tls).to.equal(null);
  });

  it('refuses half a pair, naming what was given and what is missing', () => {
    expect(refusal(['--tls-cert', server.cert])).to.equal(
      '--tls-cert needs --tls-key (WG_PEERD_TLS_KEY): HTTPS takes a certificate and its key',
    );
    expect(refusal([], { WG_PEERD_TLS_KEY: server.key })).to.equal(
      'WG_PEERD_TLS_KEY needs --tls-cert (WG_PEERD_TLS_CERT): HTTPS takes a certificate and its key',
    );
  });

  it('refuses a client CA without the pair: mutual TLS runs over HTTPS', () => {
    expect(refusal(['--tls-client-ca', ca.cert])).to.equal(
      '--tls-client-ca needs --tls-cert and --tls-key: mutual TLS runs over HTTPS',
    );
  });

  it('turns a bad file into the one-line ConfigError of the file check', () => {
    expect(refusal(['--tls-cert', server.cert, '--tls-key', ca.key])).to.match(
      /^--tls-key \S+options-ca\.key is not the key of the certificate in --tls-cert /,
    );
  });

  it('lists the three options and their variables in --help', () => {
    const text = helpText();
    for (const name of [
      '--tls-cert',
      '--tls-key',
      '--tls-client-ca',
      'WG_PEERD_TLS_CERT',
      'WG_PEERD_TLS_KEY',
      'WG_PEERD_TLS_CLIENT_CA',
    ]) {
      expect(text).to.contain(name);
    }
  });
});
