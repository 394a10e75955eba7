'use strict';
// HBONE-shaped client-side tunnel used by bench/run.sh (case "h2-nghttpx"):
// accepts plain TCP on --listen-host (default 127.0.0.1):--listen and carries every accepted connection as its own
// HTTP/2 CONNECT stream (":method: CONNECT", ":authority: --target") over ONE shared mTLS
// (TLS 1.3 + client certificate) HTTP/2 session to --proxy.  The server certificate must chain
// to --ca and carry the SPIFFE URI SAN given by --expect-san.
//
// node h2connect-client.js --listen 15001 --proxy 127.0.0.1:15002 --target 127.0.0.1:19000 \
//   --ca ca.crt --cert client.crt --key client.key --sni server.local \
//   --expect-san spiffe://cluster.local/ns/default/sa/server [--ciphers TLS_AES_128_GCM_SHA256]
//   [--stream-window 4194304] [--conn-window 16777216] [--max-resets 900]
const http2 = require('http2');
const tls = require('tls');
const net = require('net');
const fs = require('fs');

const opt = {};
for (let i = 2; i < process.argv.length; i += 2) opt[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const [proxyHost, proxyPort] = opt.proxy.split(':');
const ca = fs.readFileSync(opt.ca);
const cert = fs.readFileSync(opt.cert);
const key = fs.readFileSync(opt.key);
// Flow-control windows like ztunnel's defaults (4 MiB per stream, 16 MiB per connection).
const STREAM_WINDOW = Number(opt['stream-window'] || 4 << 20);
const CONN_WINDOW = Number(opt['conn-window'] || 16 << 20);
// nghttpx (nghttp2 with the CVE-2023-44487 "rapid reset" limit: 1000 RST_STREAM burst, then
// ~33/s) sends GOAWAY(INTERNAL_ERROR) to a client that resets too many streams.  Every tunnel
// here ends with a reset (see below), so the session is rotated before that limit is reached.
const MAX_RESETS = Number(opt['max-resets'] || 900);
const { NGHTTP2_CANCEL } = http2.constants;

let session = null;
let sessions = 0;

function checkServerIdentity(host, peer) {
  if (!opt['expect-san']) return tls.checkServerIdentity(host, peer);
  const sans = (peer.subjectaltname || '').split(', ');
  return sans.includes('URI:' + opt['expect-san']) ? undefined : new Error('peer lacks SAN URI:' + opt['expect-san']);
}

function getSession() {
  if (session && !session.closed && !session.destroyed) return session;
  sessions++;
  const s = http2.connect(`https://${opt.proxy}`, {
    settings: { initialWindowSize: STREAM_WINDOW, enablePush: false },
    maxSessionMemory: 64,
    createConnection: () => {
      const sock = tls.connect({
        host: proxyHost, port: Number(proxyPort), servername: opt.sni || proxyHost,
        ca, cert, key, minVersion: 'TLSv1.3', ALPNProtocols: ['h2'], checkServerIdentity,
        ciphers: opt.ciphers || undefined,
      });
      sock.setNoDelay(true);
      return sock;
    },
  });
  s.resets = 0;
  s.on('connect', () => s.setLocalWindowSize(CONN_WINDOW));
  s.on('error', (e) => console.error('h2 session error:', e.message));
  s.on('goaway', (code) => { if (code) console.error('h2 GOAWAY error code', code); });
  s.on('close', () => { if (session === s) session = null; });
  session = s;
  return s;
}

function noteReset(s) {
  if (++s.resets === MAX_RESETS && session === s) {
    session = null;   // new tunnels go to a fresh session
    s.close();        // graceful: streams still open on s finish normally
  }
}

const server = net.createServer({ noDelay: true }, (sock) => {
  let s, st;
  try {
    s = getSession();
    st = s.request({ ':method': 'CONNECT', ':authority': opt.target }, { endStream: false });
  } catch (e) {
    sock.destroy();
    return;
  }
  let done = false;
  const rst = () => {
    if (done) return;
    done = true;
    if (!st.closed && !st.destroyed) { st.close(NGHTTP2_CANCEL); noteReset(s); }
  };
  const kill = () => { sock.destroy(); rst(); };
  st.on('response', (h) => { if (h[':status'] !== 200) kill(); });
  st.on('error', kill);
  sock.on('error', kill);
  sock.pipe(st);   // bytes from the local app -> DATA frames (local FIN -> END_STREAM)
  st.pipe(sock);   // DATA frames -> local app (END_STREAM -> FIN)
  // nghttpx does not turn END_STREAM of a CONNECT stream into a FIN towards its backend, so a
  // half-closed tunnel would stay open for ever: once the local socket is closed and our
  // END_STREAM is queued, reset the stream (RST_STREAM CANCEL) so the proxy closes upstream.
  sock.on('close', (hadError) => {
    if (hadError || st.writableFinished) rst();
    else { st.once('finish', rst); setTimeout(rst, 2000).unref(); }
  });
});
server.listen(Number(opt.listen), opt['listen-host'] || '127.0.0.1');
getSession();
const bye = () => { console.error(`h2connect-client: ${sessions} h2 session(s) used`); process.exit(0); };
process.on('SIGTERM', bye);
process.on('SIGINT', bye);
