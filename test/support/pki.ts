/**
 * Test certificates made by the `openssl` command line (an oracle outside the code under test):
 * a CA, server certificates it signs (for 127.0.0.1, ::1 and localhost), client certificates it
 * signs, and a client certificate of another CA. EC P-256 keys: quick to make, even in the VM.
 * Keys are written mode 0600, as the daemon requires.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

export interface KeyPairFiles {
  cert: string;
  key: string;
}

/**
 * Runs `openssl` in `cwd` with a command line split on spaces: file names are relative to `cwd`
 * and made here, subjects are written without spaces.
 */
function openssl(cwd: string, commandLine: string): void {
  execFileSync('openssl', commandLine.split(' '), {
    cwd,
    stdio: ['ignore', 'ignore', 'pipe'],
    timeout: 60_000,
  });
}

const EC_KEY = '-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes';

/** One directory of test certificates; every path it returns is absolute. */
export class TestPki {
  readonly dir: string;
  private serial = 0;

  constructor(dir: string = mkdtempSync(path.join(tmpdir(), 'wg-peerd-pki-'))) {
    this.dir = dir;
  }

  file(name: string): string {
    return path.join(this.dir, name);
  }

  /** A self-signed CA (basicConstraints CA:TRUE); `name` without spaces. */
  ca(name: string): KeyPairFiles {
    const files = { cert: this.file(`${name}.pem`), key: this.file(`${name}.key`) };
    openssl(
      this.dir,
      `req -x509 ${EC_KEY} -keyout ${name}.key -out ${name}.pem -days 3 -subj /CN=${name} ` +
        '-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign',
    );
    chmodSync(files.key, 0o600);
    return files;
  }

  /**
   * A certificate that `ca`, made by this same TestPki, signs: a server's (subjectAltName for
   * the loopback addresses and `localhost`) or a client's. `subject` is OpenSSL's form without
   * spaces: "/O=billing/CN=panel-1".
   */
  issue(
    ca: KeyPairFiles,
    name: string,
    subject: string,
    usage: 'server' | 'client',
    days = 2,
  ): KeyPairFiles {
    const files = { cert: this.file(`${name}.pem`), key: this.file(`${name}.key`) };
    writeFileSync(
      this.file(`${name}.ext`),
      usage === 'server'
        ? 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\nextendedKeyUsage=serverAuth\n'
        : 'extendedKeyUsage=clientAuth\n',
    );
    openssl(this.dir, `req ${EC_KEY} -keyout ${name}.key -out ${name}.csr -subj ${subject}`);
    this.serial += 1;
    const signer = `-CA ${path.basename(ca.cert)} -CAkey ${path.basename(ca.key)}`;
    openssl(
      this.dir,
      `x509 -req -in ${name}.csr ${signer} -set_serial ${1000 + this.serial} -days ${days} ` +
        `-extfile ${name}.ext -out ${name}.pem`,
    );
    chmodSync(files.key, 0o600);
    return files;
  }

  /** The SHA-256 fingerprint OpenSSL gives a certificate file, as "AB:CD:...". */
  fingerprint(certFile: string): string {
    const out = execFileSync(
      'openssl',
      ['x509', '-in', certFile, '-noout', '-fingerprint', '-sha256'],
      { encoding: 'utf8' },
    );
    return out.trim().replace(/^.*=/, '');
  }

  /** The end of validity OpenSSL reads in a certificate file. */
  notAfter(certFile: string): Date {
    const out = execFileSync('openssl', ['x509', '-in', certFile, '-noout', '-enddate'], {
      encoding: 'utf8',
    });
    return new Date(out.trim().replace(/^notAfter=/, ''));
  }

  read(file: string): string {
    return readFileSync(file, 'utf8');
  }
}
