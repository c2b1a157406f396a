// What the browser tests run against: the agentwire binary (hubs, a Rust echo agent), a
// static server for the SDK and the test page, and headless Chromium driven over the DevTools
// protocol (chrome-remote-interface; the system's `chromium`, nothing downloaded).
import { spawn, execFileSync } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, normalize, resolve, extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import CDP from 'chrome-remote-interface';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const REPO = resolve(ROOT, '../..');

/** The agentwire binary: $AGENTWIRE_BIN, or the workspace's debug build. */
export function agentwireBin() {
  const bin = process.env.AGENTWIRE_BIN ?? join(REPO, 'target/debug/agentwire');
  return existsSync(bin) ? bin : null;
}

export function chromiumBin() {
  for (const name of ['chromium', 'chromium-browser']) {
    try {
      return execFileSync('which', [name], { encoding: 'utf8' }).trim();
    } catch {
      // not this one
    }
  }
  return null;
}

/** Why the browser suite cannot run here, or null. CI sets AGENTWIRE_REQUIRE_BROWSER. */
export function missing() {
  const why = !agentwireBin()
    ? 'no agentwire binary (cargo build -p agentwire-cli, or set AGENTWIRE_BIN)'
    : !chromiumBin()
      ? 'no chromium on the PATH (Debian: apt-get install chromium)'
      : null;
  if (why && process.env.AGENTWIRE_REQUIRE_BROWSER) throw new Error(`AGENTWIRE_REQUIRE_BROWSER is set but: ${why}`);
  return why;
}

/** A child process whose output lines can be waited for. */
export class Proc {
  /** `group`: the child leads a process group of its own, stopped as a whole (a browser). */
  constructor(name, cmd, args, { group = false } = {}) {
    this.name = name;
    this.lines = [];
    this.waiters = [];
    this.group = group;
    this.child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: group });
    this.exited = new Promise((r) => this.child.on('exit', (code, signal) => r({ code, signal })));
    for (const s of [this.child.stdout, this.child.stderr]) {
      let buf = '';
      s.setEncoding('utf8');
      s.on('data', (d) => {
        buf += d;
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          this.line(buf.slice(0, i));
          buf = buf.slice(i + 1);
        }
      });
    }
  }

  line(l) {
    this.lines.push(l);
    if (process.env.AGENTWIRE_TEST_VERBOSE) console.error(`[${this.name}] ${l}`);
    for (const w of [...this.waiters]) w(l);
  }

  /** The first line (seen or to come) matching `re`: its match. */
  wait(re, ms = 20000) {
    for (const l of this.lines) {
      const m = l.match(re);
      if (m) return Promise.resolve(m);
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== check);
        reject(new Error(`${this.name}: no line matching ${re} within ${ms} ms; output:\n${this.lines.slice(-20).join('\n')}`));
      }, ms);
      const check = (l) => {
        const m = l.match(re);
        if (m) {
          clearTimeout(timer);
          this.waiters = this.waiters.filter((w) => w !== check);
          resolve(m);
        }
      };
      this.waiters.push(check);
    });
  }

  async stop(signal = 'SIGTERM') {
    const kill = (sig) => {
      try {
        if (this.group) process.kill(-this.child.pid, sig);
        else this.child.kill(sig);
      } catch {
        // gone already
      }
    };
    if (this.child.exitCode === null && this.child.signalCode === null) kill(signal);
    const timer = setTimeout(() => kill('SIGKILL'), 5000);
    await this.exited;
    clearTimeout(timer);
    if (this.group) kill('SIGKILL'); // what is left of the group
  }
}

/** A certificate directory with the hub's certificates and the browsers' one. */
export function certDir(dir) {
  const out = execFileSync(agentwireBin(), ['cert', '--out', dir, '--webtransport'], { encoding: 'utf8' });
  return { dir, sha256: out.match(/sha-256:\s+([0-9a-f]{64})/)[1], ca: join(dir, 'ca.pem') };
}

/**
 * A hub on loopback: `quic://` (WebTransport on it when `webtransport`) and `wss://`.
 * `ports` pins them (a restart); otherwise the system picks.
 */
export async function startHub({ certs, token, webtransport = true, origins = webtransport ? ['*'] : [], ports = null, extra = [] }) {
  const args = ['hub', '--cert-dir', certs.dir, '--auth-token', token,
    '--listen', `quic://127.0.0.1:${ports?.quic ?? 0}`, '--listen', `wss://127.0.0.1:${ports?.wss ?? 0}`];
  if (webtransport) args.push('--webtransport');
  for (const o of origins) args.push('--allow-origin', o);
  args.push(...extra);
  const proc = new Proc('hub', agentwireBin(), args);
  const quic = Number((await proc.wait(/hub listening on quic:\/\/127\.0\.0\.1:(\d+)/))[1]);
  const wss = Number((await proc.wait(/hub listening on wss:\/\/127\.0\.0\.1:(\d+)/))[1]);
  const pin = (await proc.wait(/hub key pin: sha256:([0-9a-f]{64})/))[1];
  return { proc, ports: { quic, wss }, pin };
}

/** A Rust agent answering every request with its body (`agentwire agent --echo`). */
export async function startEcho(hub, certs, token, id = 'echo') {
  const proc = new Proc(id, agentwireBin(), ['agent', '--hub', `quic://127.0.0.1:${hub.ports.quic}`, '--ca', certs.ca,
    '--auth-token', token, '--id', id, '--echo']);
  await proc.wait(/connected|welcome|session/i);
  return proc;
}

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.map': 'application/json', '.png': 'image/png' };

/** Serves the package's files (dist/, test/browser/) on loopback. */
export async function serveFiles() {
  const server = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url, 'http://x').pathname)).replace(/^\/+/, '');
    const file = join(ROOT, path);
    if (!file.startsWith(ROOT) || !existsSync(file)) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream' }).end(readFileSync(file));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { server, origin: `http://127.0.0.1:${server.address().port}` };
}

/** Headless Chromium trusting the hub's key for wss:// (by its SPKI hash) and a tab on it. */
export async function startBrowser(pins) {
  const profile = mkdtempSync(join(tmpdir(), 'agentwire-chromium-'));
  const spki = pins.map((p) => Buffer.from(p, 'hex').toString('base64')).join(',');
  const proc = new Proc('chromium', chromiumBin(), ['--headless=new', '--no-sandbox', '--disable-gpu', '--no-first-run',
    '--disable-extensions', '--remote-debugging-port=0', `--user-data-dir=${profile}`,
    `--ignore-certificate-errors-spki-list=${spki}`, 'about:blank'], { group: true });
  const stop = async () => {
    await proc.stop();
    rmSync(profile, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
  };
  let client;
  try {
    // A first launch on a fresh machine has taken 20 s before Chromium printed anything (the
    // Rust browser test allows 60 s too).
    const port = Number((await proc.wait(/DevTools listening on ws:\/\/127\.0\.0\.1:(\d+)\//, 60000))[1]);
    client = await CDP({ port });
  } catch (e) {
    // Nobody else holds this browser yet: left running, it kept node's test runner alive
    // after the suite had failed.
    await stop();
    throw e;
  }
  await client.Page.enable();
  await client.Runtime.enable();
  const console = [];
  client.Runtime.consoleAPICalled(({ args }) => console.push(args.map((a) => a.value ?? a.description).join(' ')));
  return {
    proc,
    client,
    console,
    /** Opens `url` and waits for the SDK to have loaded. */
    async open(url) {
      await client.Page.navigate({ url });
      const until = Date.now() + 10000;
      while (!(await this.eval('window.ready === true'))) {
        if (Date.now() > until) throw new Error(`${url}: the SDK did not load`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    /** Runs `fn` (an async function's source) in the page with `arg`; its JSON result. */
    async run(fn, arg = {}) {
      return this.eval(`(${fn.toString()})(${JSON.stringify(arg)})`);
    },
    async eval(expression) {
      const r = await client.Runtime.evaluate({ expression, awaitPromise: true, returnByValue: true });
      if (r.exceptionDetails) {
        throw new Error(`in the page: ${r.exceptionDetails.exception?.description ?? r.exceptionDetails.text}`);
      }
      return r.result.value;
    },
    async close() {
      await client.close().catch(() => {});
      await stop();
    },
  };
}

export function tempDir() {
  return mkdtempSync(join(tmpdir(), 'agentwire-web-'));
}
