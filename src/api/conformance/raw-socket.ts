import * as net from 'node:net';

/** What came back on one TCP connection. */
export interface Exchange {
  /** Everything the server sent. */
  readonly received: Buffer;
  /** The server closed (or reset) the connection before the deadline. */
  readonly closed: boolean;
  /** The deadline passed with the connection still open (we closed it). */
  readonly timedOut: boolean;
  /** A socket error (ECONNRESET, EPIPE, ...), if any. */
  readonly error: string | undefined;
}

export interface ExchangeOptions {
  /** Send FIN after the payload (half-close), as a client does that has nothing more to say. */
  readonly halfClose?: boolean;
  /** Give up (and destroy the socket) after this long. */
  readonly timeoutMs: number;
  /** Stop waiting as soon as this says the answer is complete. */
  readonly complete?: (received: Buffer) => boolean;
}

/**
 * Opens a TCP connection, writes `payload` (chunks in order), and collects what the server
 * sends until it closes the connection, `complete` says enough, or the deadline passes.
 * Never throws: errors are part of the answer.
 */
export function exchange(port: number, payload: readonly Uint8Array[], o: ExchangeOptions): Promise<Exchange> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let error: string | undefined;
    let settled = false;
    const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    const finish = (closed: boolean, timedOut: boolean): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ received: Buffer.concat(chunks), closed, timedOut, error });
    };
    const timer = setTimeout(() => finish(false, true), o.timeoutMs);
    socket.on('data', (d: Buffer) => {
      chunks.push(d);
      if (o.complete?.(Buffer.concat(chunks)) === true) finish(false, false);
    });
    socket.on('error', (e: NodeJS.ErrnoException) => {
      error = e.code ?? e.message;
    });
    socket.on('end', () => finish(true, false));
    socket.on('close', () => finish(true, false));
    socket.on('connect', () => {
      void (async () => {
        for (const p of payload) {
          if (socket.destroyed) return;
          const ok = socket.write(p);
          if (!ok) await new Promise<void>((r) => socket.once('drain', () => r()).once('close', () => r()));
        }
        if (o.halfClose === true && !socket.destroyed) socket.end();
      })();
    });
  });
}

export interface ParsedResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
  /** The body was complete (Content-Length or chunked framing satisfied). */
  readonly complete: boolean;
}

/**
 * Parses the first final (non-1xx) HTTP/1.x response in `buf`, or undefined when `buf` does not
 * start with one. Handles Content-Length and chunked bodies.
 */
export function parseHttpResponse(buf: Buffer): ParsedResponse | undefined {
  let at = 0;
  for (;;) {
    const end = buf.indexOf('\r\n\r\n', at);
    if (end < 0) return undefined;
    const head = buf.subarray(at, end).toString('latin1').split('\r\n');
    const m = /^HTTP\/1\.[01] (\d{3})/.exec(head[0] ?? '');
    if (!m) return undefined;
    const status = Number(m[1]);
    const headers: Record<string, string> = {};
    for (const line of head.slice(1)) {
      const i = line.indexOf(':');
      if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
    }
    const rest = buf.subarray(end + 4);
    if (status >= 100 && status < 200) {
      at = end + 4;
      continue;
    }
    if (headers['transfer-encoding']?.toLowerCase() === 'chunked') {
      const parts: Buffer[] = [];
      let p = 0;
      for (;;) {
        const le = rest.indexOf('\r\n', p);
        if (le < 0) return { status, headers, body: Buffer.concat(parts), complete: false };
        const size = parseInt(rest.subarray(p, le).toString('latin1'), 16);
        if (!Number.isFinite(size)) return { status, headers, body: Buffer.concat(parts), complete: false };
        if (size === 0) return { status, headers, body: Buffer.concat(parts), complete: true };
        parts.push(rest.subarray(le + 2, le + 2 + size));
        p = le + 2 + size + 2;
        if (p > rest.length) return { status, headers, body: Buffer.concat(parts), complete: false };
      }
    }
    const cl = headers['content-length'];
    if (cl !== undefined) {
      const n = Number(cl);
      return { status, headers, body: rest.subarray(0, n), complete: rest.length >= n };
    }
    return { status, headers, body: rest, complete: true };
  }
}

/** The HTTP/2 connection preface (RFC 9113 §3.4). */
export const HTTP2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

/** An HTTP/2 frame: 9-byte header (length, type, flags, stream id) and payload. */
export function http2Frame(type: number, flags: number, stream: number, payload: Uint8Array = new Uint8Array(0)): Buffer {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h.writeUInt8(type, 3);
  h.writeUInt8(flags, 4);
  h.writeUInt32BE(stream & 0x7fffffff, 5);
  return Buffer.concat([h, payload]);
}

/** True when `buf` starts with a complete HTTP/2 SETTINGS frame (type 4) on stream 0. */
export function startsWithSettingsFrame(buf: Buffer): boolean {
  if (buf.length < 9) return false;
  const len = buf.readUIntBE(0, 3);
  return buf.readUInt8(3) === 4 && (buf.readUInt32BE(5) & 0x7fffffff) === 0 && buf.length >= 9 + len;
}
