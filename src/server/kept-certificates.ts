import { createHash, X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createSecureContext } from 'node:tls';
import type { experimental } from '@grpc/grpc-js';

type CaListener = experimental.CaCertificateUpdateListener;
type IdentityListener = experimental.IdentityCertificateUpdateListener;

/** The gRPC port's certificate, key and client CA, re-read every interval and put in force only when they can be
 * used together. grpc-js's FileWatcherCertificateProvider hands its server whatever the files hold: a CA file
 * replaced by one that is not PEM made every new client's handshake fail while open sessions went on, /readyz
 * stayed 200, and grpc-js logged it at debug (round 5). Here files that cannot be used keep the last good ones
 * in force, are logged at warn once for each change of the files, and counted; `problem` says when the
 * certificate in force has expired, so /readyz can say the port can no longer take new clients. */

export interface TlsFileNames {
  cert: string;
  key: string;
  clientCa: string | undefined;
}

export interface KeptEvents {
  /** Files that changed and cannot be used: `what` names the files (never their content) and `code` the cause. */
  onUnusable(what: string, code: string): void;
}

interface Files {
  cert: Buffer;
  key: Buffer;
  ca: Buffer | undefined;
}

export class KeptCertificates implements experimental.CertificateProvider {
  private good: Files | undefined;
  private goodFingerprint = '';
  private badFingerprint = '';
  private readonly caListeners = new Set<CaListener>();
  private readonly identityListeners = new Set<IdentityListener>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly names: TlsFileNames,
    private readonly events: KeptEvents,
    private readonly refreshMs: number,
  ) {}

  /** The first read: the files must be usable, or the port cannot be served (the code of the cause). */
  async start(): Promise<string | undefined> {
    const problem = await this.refresh();
    if (problem) return problem;
    this.timer = setInterval(() => void this.refresh(), this.refreshMs);
    this.timer.unref();
    return undefined;
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Why the port cannot take a new client now, or undefined: the certificate in force has expired. */
  problem(now = Date.now()): string | undefined {
    if (!this.good) return 'no usable TLS certificate';
    const expires = Date.parse(new X509Certificate(this.good.cert).validTo);
    return expires < now ? 'the gRPC TLS certificate in force has expired, and its files hold none usable' : undefined;
  }

  /** Reads the files; puts them in force if they changed and can be used, else keeps what is. */
  private async refresh(): Promise<string | undefined> {
    let files: Files;
    try {
      const [cert, key, ca] = await Promise.all([
        readFile(this.names.cert),
        readFile(this.names.key),
        this.names.clientCa ? readFile(this.names.clientCa) : undefined,
      ]);
      files = { cert, key, ca };
    } catch (err) {
      return this.unusable(`unreadable:${(err as NodeJS.ErrnoException).code}`, (err as NodeJS.ErrnoException).code ?? 'EIO');
    }
    const fingerprint = createHash('sha256')
      .update(files.cert)
      .update(files.key)
      .update(files.ca ?? '')
      .digest('hex');
    if (fingerprint === this.goodFingerprint) return undefined;
    try {
      createSecureContext({ cert: files.cert, key: files.key, ...(files.ca ? { ca: files.ca } : {}) });
      new X509Certificate(files.cert);
      if (files.ca) everyCertificate(files.ca);
    } catch (err) {
      return this.unusable(fingerprint, (err as NodeJS.ErrnoException).code ?? 'invalid');
    }
    this.good = files;
    this.goodFingerprint = fingerprint;
    this.badFingerprint = '';
    for (const l of this.identityListeners) l({ certificate: files.cert, privateKey: files.key });
    if (files.ca) for (const l of this.caListeners) l({ caCertificate: files.ca });
    return undefined;
  }

  /** Said once for each content (or read error) that cannot be used; the last good files stay in force. */
  private unusable(fingerprint: string, code: string): string {
    if (fingerprint !== this.badFingerprint) {
      this.badFingerprint = fingerprint;
      if (this.good) this.events.onUnusable(this.names.clientCa ? 'certificate, key and client CA' : 'certificate and key', code);
    }
    return code;
  }

  // A new listener hears what is in force on the next tick, as grpc-js's own provider tells it: grpc-js adds its
  // listener before the watcher that the update must reach (server-credentials.js _addWatcher).
  addCaCertificateListener(l: CaListener): void {
    this.caListeners.add(l);
    const ca = this.good?.ca;
    if (ca) process.nextTick(() => this.caListeners.has(l) && l({ caCertificate: ca }));
  }
  removeCaCertificateListener(l: CaListener): void {
    this.caListeners.delete(l);
  }
  addIdentityCertificateListener(l: IdentityListener): void {
    this.identityListeners.add(l);
    const good = this.good;
    if (good) process.nextTick(() => this.identityListeners.has(l) && l({ certificate: good.cert, privateKey: good.key }));
  }
  removeIdentityCertificateListener(l: IdentityListener): void {
    this.identityListeners.delete(l);
  }
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** Node takes a CA file with no certificate in it (empty, not PEM, a PEM block that is not one) without a word,
 * and then trusts no client: each block must be a certificate, and there must be one. */
function everyCertificate(pem: Buffer): void {
  const blocks = pem.toString('latin1').match(PEM_CERTIFICATE);
  if (!blocks) throw Object.assign(new Error('no certificate'), { code: 'NO_CERTIFICATE' });
  for (const b of blocks) new X509Certificate(b);
}
