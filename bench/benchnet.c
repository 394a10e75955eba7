// benchnet: tiny load / helper tool for bench/run.sh (network namespaces only).
// Servers listen on $BENCHNET_LISTEN (default 0.0.0.0).
//
//   benchnet echo PORT                              epoll echo server on PORT
//   benchnet rr HOST PORT SECS SIZE [WARMUP_S]      1 connection, ping-pong SIZE bytes; prints
//                                                   "n=.. p50_us=.. p90_us=.. p99_us=.. p999_us=.. mean_us=.. max_us=.."
//   benchnet cps HOST PORT SECS SIZE THREADS        THREADS closed loops of connect/send/recv/close;
//                                                   prints "conns=.. errors=.. cps=.. p50_us=.. p99_us=.."
//   benchnet connect-proxy PORT                     HTTP/1.1 CONNECT forward proxy (thread per connection,
//                                                   splice relay); used behind nghttpx --http2-proxy
//   benchnet inpod-relay PORT...                   the floor of meshnode's plain-TCP hops: accepts what the
//                                                   pod's nft rules redirect to PORT, dials its original
//                                                   destination with SO_MARK 0x539, copies both ways
//                                                   (one thread, edge-triggered epoll, no TLS/HTTP/2)
//   benchnet inpod-tls-relay client|server PORT CERT_PEM CA_PEM
//                                                   the floor of meshnode's HBONE hops for bulk bytes: the
//                                                   same positions with one mutual-TLS connection (OpenSSL,
//                                                   AES-128-GCM) per TCP connection, no HTTP/2 (see below)
//   benchnet waitport HOST PORT TIMEOUT_S           exit 0 once a TCP connect succeeds
//   benchnet http-server PORT                       epoll HTTP/1.1 keep-alive server: reads a request
//                                                   (headers + Content-Length body), answers 200 "ok"
//   benchnet http-load HOST PORT SECS RATE CONNS SIZE
//                                                   fixed-rate load: CONNS keep-alive connections, each
//                                                   sending POSTs with a SIZE-byte body at RATE/CONNS per
//                                                   second on a fixed schedule; prints
//                                                   "reqs=.. errors=.. rps=.. p50_us=.. p99_us=.."
//
// Every loop is bounded by SECS (plus socket timeouts of a few seconds).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}
static void die(const char *m) {
  perror(m);
  exit(2);
}
static void nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}
static void timeouts(int fd, int secs) {
  struct timeval tv = {secs, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}
static int resolve(const char *host, int port, struct sockaddr_in *sa) {
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  sa->sin_port = htons(port);
  if (inet_pton(AF_INET, host, &sa->sin_addr) == 1) return 0;
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_INET;
  if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return -1;
  sa->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return 0;
}
static int dial(const struct sockaddr_in *sa) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeouts(fd, 5);
  if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) < 0) {
    close(fd);
    return -1;
  }
  nodelay(fd);
  return fd;
}
static int listen_on(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sa;
  const char *lh = getenv("BENCHNET_LISTEN");
  resolve(lh && *lh ? lh : "0.0.0.0", port, &sa);
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) die("bind");
  if (listen(fd, 4096) < 0) die("listen");
  return fd;
}
static int write_all(int fd, const char *b, size_t n) {
  while (n) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    b += w;
    n -= (size_t)w;
  }
  return 0;
}
static int read_all(int fd, char *b, size_t n) {
  while (n) {
    ssize_t r = read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    b += r;
    n -= (size_t)r;
  }
  return 0;
}
static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}
static double pct(uint32_t *v, size_t n, double p) {
  if (!n) return 0;
  size_t i = (size_t)(p * (double)(n - 1) + 0.5);
  return v[i] / 1000.0;
}

/* ---------------- echo server ---------------- */
static int echo_main(int port) {
  int lfd = listen_on(port);
  fcntl(lfd, F_SETFL, O_NONBLOCK);
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  static char buf[65536];
  struct epoll_event evs[256];
  for (;;) {
    int n = epoll_wait(ep, evs, 256, -1);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == lfd) {
        for (;;) {
          int c = accept4(lfd, NULL, NULL, 0);
          if (c < 0) break;
          nodelay(c);
          timeouts(c, 5);
          struct epoll_event e2 = {.events = EPOLLIN, .data.fd = c};
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &e2);
        }
        continue;
      }
      ssize_t r = read(fd, buf, sizeof buf);
      if (r <= 0 || write_all(fd, buf, (size_t)r) < 0) {
        epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
        close(fd);
      }
    }
  }
  return 0;
}

/* ---------------- request/response latency ---------------- */
static int rr_main(const char *host, int port, double secs, int size, double warm) {
  struct sockaddr_in sa;
  if (resolve(host, port, &sa) < 0) die("resolve");
  int fd = dial(&sa);
  if (fd < 0) die("connect");
  char *b = calloc(1, size), *r = malloc(size);
  size_t cap = 1 << 20, n = 0;
  uint32_t *v = malloc(cap * sizeof *v);
  double t0 = now_s(), tw = t0 + warm, te = tw + secs;
  double sum = 0;
  for (;;) {
    uint64_t a = now_ns();
    if (write_all(fd, b, size) < 0 || read_all(fd, r, size) < 0) {
      fprintf(stderr, "rr: io error after %zu samples: %s\n", n, strerror(errno));
      return 1;
    }
    uint64_t d = now_ns() - a;
    double t = now_s();
    if (t >= te) break;
    if (t < tw) continue;
    if (n == cap) v = realloc(v, (cap *= 2) * sizeof *v);
    v[n++] = d > 0xffffffffu ? 0xffffffffu : (uint32_t)d;
    sum += d;
  }
  close(fd);
  qsort(v, n, sizeof *v, cmp_u32);
  printf("n=%zu p50_us=%.1f p90_us=%.1f p99_us=%.1f p999_us=%.1f mean_us=%.1f max_us=%.1f\n", n,
         pct(v, n, .5), pct(v, n, .9), pct(v, n, .99), pct(v, n, .999), n ? sum / n / 1000 : 0,
         n ? v[n - 1] / 1000.0 : 0);
  return n ? 0 : 1;
}

/* ---------------- connections per second ---------------- */
struct cps_arg {
  struct sockaddr_in sa;
  double end;
  int size;
  size_t ok, err, cap;
  uint32_t *lat;
};
static void *cps_thread(void *p) {
  struct cps_arg *a = p;
  char *b = calloc(1, a->size), *r = malloc(a->size);
  while (now_s() < a->end) {
    uint64_t t = now_ns();
    int fd = dial(&a->sa);
    if (fd < 0 || write_all(fd, b, a->size) < 0 || read_all(fd, r, a->size) < 0) {
      if (fd >= 0) close(fd);
      a->err++;
      usleep(1000);
      continue;
    }
    close(fd);
    uint64_t d = now_ns() - t;
    if (a->ok == a->cap) a->lat = realloc(a->lat, (a->cap = a->cap ? a->cap * 2 : 65536) * sizeof *a->lat);
    a->lat[a->ok++] = d > 0xffffffffu ? 0xffffffffu : (uint32_t)d;
  }
  return NULL;
}
static int cps_main(const char *host, int port, double secs, int size, int threads) {
  struct cps_arg *a = calloc(threads, sizeof *a);
  pthread_t *th = calloc(threads, sizeof *th);
  double t0 = now_s();
  for (int i = 0; i < threads; i++) {
    if (resolve(host, port, &a[i].sa) < 0) die("resolve");
    a[i].end = t0 + secs;
    a[i].size = size;
    pthread_create(&th[i], NULL, cps_thread, &a[i]);
  }
  size_t ok = 0, err = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(th[i], NULL);
    ok += a[i].ok;
    err += a[i].err;
  }
  double el = now_s() - t0;
  uint32_t *v = malloc((ok + 1) * sizeof *v);
  size_t k = 0;
  for (int i = 0; i < threads; i++)
    for (size_t j = 0; j < a[i].ok; j++) v[k++] = a[i].lat[j];
  qsort(v, k, sizeof *v, cmp_u32);
  printf("conns=%zu errors=%zu cps=%.0f p50_us=%.1f p99_us=%.1f\n", ok, err, ok / el, pct(v, k, .5),
         pct(v, k, .99));
  return ok ? 0 : 1;
}

/* ---------------- HTTP/1.1 CONNECT proxy ---------------- */
struct relay_arg {
  int in, out;
};
static void relay(int in, int out) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) return;
  fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
  for (;;) {
    ssize_t n = splice(in, NULL, p[1], NULL, 1 << 20, SPLICE_F_MOVE);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    while (n > 0) {
      ssize_t m = splice(p[0], NULL, out, NULL, (size_t)n, SPLICE_F_MOVE);
      if (m < 0 && errno == EINTR) continue;
      if (m <= 0) goto done;
      n -= m;
    }
  }
done:
  shutdown(out, SHUT_WR);
  close(p[0]);
  close(p[1]);
}
static void *relay_thread(void *p) {
  struct relay_arg *a = p;
  relay(a->in, a->out);
  return NULL;
}
static void *conn_thread(void *p) {
  int c = (int)(intptr_t)p, t = -1;
  char hdr[8192];
  size_t got = 0;
  char *end = NULL;
  nodelay(c);
  while (!end && got < sizeof hdr - 1) {
    ssize_t r = read(c, hdr + got, sizeof hdr - 1 - got);
    if (r <= 0) goto out;
    got += (size_t)r;
    hdr[got] = 0;
    end = strstr(hdr, "\r\n\r\n");
  }
  if (!end) goto out;
  char host[256];
  int port = 0;
  if (sscanf(hdr, "CONNECT %255[^:]:%d ", host, &port) != 2) {
    { static const char e[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"; write_all(c, e, sizeof e - 1); }
    goto out;
  }
  struct sockaddr_in sa;
  if (resolve(host, port, &sa) < 0 || (t = dial(&sa)) < 0) {
    { static const char e[] = "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n"; write_all(c, e, sizeof e - 1); }
    goto out;
  }
  struct timeval tv0 = {0, 0};
  setsockopt(t, SOL_SOCKET, SO_RCVTIMEO, &tv0, sizeof tv0);
  setsockopt(t, SOL_SOCKET, SO_SNDTIMEO, &tv0, sizeof tv0);
  static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
  if (write_all(c, ok, sizeof ok - 1) < 0) goto out;
  size_t hlen = (size_t)(end + 4 - hdr);
  if (got > hlen && write_all(t, hdr + hlen, got - hlen) < 0) goto out;
  struct relay_arg back = {t, c};
  pthread_t th;
  if (pthread_create(&th, NULL, relay_thread, &back) != 0) goto out;
  relay(c, t);
  pthread_join(th, NULL);
out:
  if (t >= 0) close(t);
  close(c);
  return NULL;
}
static int connect_proxy_main(int port) {
  int lfd = listen_on(port);
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&at, 256 * 1024);
  for (;;) {
    int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      usleep(1000);
      continue;
    }
    pthread_t th;
    if (pthread_create(&th, &at, conn_thread, (void *)(intptr_t)c) != 0) close(c);
  }
  return 0;
}

/* ---------------- in-pod relay: the floor of meshnode's plain-TCP hops ----------------
 * What a proxy at meshnode's in-pod positions must do at the least, and nothing more: accept a
 * connection the pod's nft rules redirected to PORT, read its original destination
 * (SO_ORIGINAL_DST), dial it with SO_MARK 0x539 (the mark the pod's rules let through) and
 * TCP_NODELAY, and copy both ways (read/write through a buffer, as any TLS proxy must; no
 * splice), half-closing on EOF and resetting both sides on an error. One thread, one epoll,
 * edge-triggered, one epoll_ctl per socket. No TLS, no HTTP/2, no routing, no metrics, no log. */
#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80
#endif
#define RELAY_BUF 16384
struct rconn;
struct rend {
  struct rconn *c;
  int side; /* 0 = downstream (accepted), 1 = upstream (dialled) */
};
struct rconn {
  int fd[2];
  struct rend end[2];
  int connected, dead;
  /* buf[i]: bytes read from fd[i], not yet written to fd[1 - i] */
  char *buf[2];
  size_t off[2], len[2];
  int eof[2], shut[2];
  struct rconn *next_dead;
};
static struct rconn *dead_list;
static void rconn_kill(struct rconn *c, int reset) {
  if (c->dead) return;
  c->dead = 1;
  for (int i = 0; i < 2; i++) {
    if (c->fd[i] < 0) continue;
    if (reset) {
      struct linger lg = {1, 0};
      setsockopt(c->fd[i], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    close(c->fd[i]); /* also leaves the epoll set */
  }
  c->next_dead = dead_list;
  dead_list = c;
}
/* Moves direction i (fd[i] -> fd[1 - i]) as far as the sockets allow; 0, or -1 on an error. */
static int rconn_pump(struct rconn *c, int i) {
  int in = c->fd[i], out = c->fd[1 - i];
  for (;;) {
    while (c->off[i] < c->len[i]) {
      ssize_t w = send(out, c->buf[i] + c->off[i], c->len[i] - c->off[i], MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == EAGAIN) return 0;
      if (w < 0) return -1;
      c->off[i] += (size_t)w;
    }
    c->off[i] = c->len[i] = 0;
    if (c->eof[i]) {
      if (!c->shut[i]) {
        shutdown(out, SHUT_WR);
        c->shut[i] = 1;
      }
      return 0;
    }
    if (!c->buf[i] && !(c->buf[i] = malloc(RELAY_BUF))) return -1;
    ssize_t r = recv(in, c->buf[i], RELAY_BUF, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) return 0;
    if (r < 0) return -1;
    if (r == 0) c->eof[i] = 1;
    c->len[i] = (size_t)r;
  }
}
static void rconn_run(struct rconn *c) {
  if (c->dead || !c->connected) return;
  if (rconn_pump(c, 0) < 0 || rconn_pump(c, 1) < 0) {
    rconn_kill(c, 1);
    return;
  }
  if (c->shut[0] && c->shut[1]) rconn_kill(c, 0);
}
static void relay_accept(int ep, int lfd) {
  for (;;) {
    int d = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (d < 0) return;
    struct sockaddr_in dst;
    socklen_t len = sizeof dst;
    int u = -1, mark = 0x539, one = 1;
    if (getsockopt(d, SOL_IP, SO_ORIGINAL_DST, &dst, &len) < 0 ||
        (u = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) {
      close(d);
      continue;
    }
    setsockopt(u, SOL_SOCKET, SO_MARK, &mark, sizeof mark);
    setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(d, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(u, (struct sockaddr *)&dst, sizeof dst) < 0 && errno != EINPROGRESS) {
      close(u);
      close(d);
      continue;
    }
    struct rconn *c = calloc(1, sizeof *c);
    c->fd[0] = d;
    c->fd[1] = u;
    for (int i = 0; i < 2; i++) {
      c->end[i] = (struct rend){c, i};
      struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = &c->end[i]};
      epoll_ctl(ep, EPOLL_CTL_ADD, c->fd[i], &ev);
    }
  }
}
static int inpod_relay_main(int nports, char **ports) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  static int lfds[8];
  if (nports > 8) nports = 8;
  for (int i = 0; i < nports; i++) {
    lfds[i] = listen_on(atoi(ports[i]));
    fcntl(lfds[i], F_SETFL, O_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &lfds[i]};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfds[i], &ev);
  }
  struct epoll_event evs[256];
  for (;;) {
    int n = epoll_wait(ep, evs, 256, -1);
    for (int k = 0; k < n; k++) {
      void *p = evs[k].data.ptr;
      if (p >= (void *)lfds && p < (void *)(lfds + 8)) {
        relay_accept(ep, *(int *)p);
        continue;
      }
      struct rend *e = p;
      struct rconn *c = e->c;
      if (c->dead) continue;
      if (e->side == 1 && !c->connected) {
        if (!(evs[k].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) continue;
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &el);
        if (err) {
          rconn_kill(c, 1);
          continue;
        }
        c->connected = 1;
      }
      rconn_run(c);
    }
    while (dead_list) {
      struct rconn *c = dead_list;
      dead_list = c->next_dead;
      free(c->buf[0]);
      free(c->buf[1]);
      free(c);
    }
  }
  return 0;
}

/* ---------------- in-pod TLS relay: the floor of meshnode's HBONE hops for bulk bytes ----------------
 * What any mutual-TLS tunnel at meshnode's in-pod positions must do per byte, with the TLS library
 * the project uses (OpenSSL 3), and nothing more: no HTTP/2, no pooling (one TLS connection per
 * TCP connection), no routing, no metrics, no log.
 *   client: accepts what the pod's nft rules redirect to PORT, dials its original destination's
 *           address at port 15008 with SO_MARK 0x539, TLS 1.3 client (verifies the peer's chain),
 *           sends the original port as 2 bytes (big-endian), then copies both ways;
 *   server: accepts TLS on PORT (client certificate required), reads those 2 bytes, dials its own
 *           pod address at that port with SO_MARK 0x539, then copies both ways.
 * TLS_AES_128_GCM_SHA256 only, P-256 certificates (the bench's throwaway CA). A thread per
 * connection (it dials, handshakes and copies), poll() when nothing moved. OpenSSL works on a BIO
 * pair, the same buffering as meshnode's own BIOs: ciphertext is received into the pair and sent
 * from it in chunks of up to 256 KiB, and OpenSSL copies its records into and out of it (and each
 * record's plaintext into its record buffer, as in every OpenSSL user). */
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>

#define TLS_RELAY_PLAIN (256 * 1024)
#define TLS_RELAY_PAIR (256 * 1024)
#define TLS_RELAY_HBONE_PORT 15008

struct tconn {
  int p, t; /* plaintext side (-1 until the server dialled), TLS side */
  SSL *ssl;
  BIO *net; /* our half of the BIO pair: ciphertext to send / room for what we receive */
  int server;
  struct sockaddr_in local; /* client: the original destination; server: this pod's address */
};
static SSL_CTX *tls_relay_ctx;

static int dial_marked(const struct sockaddr_in *dst) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), mark = 0x539;
  if (fd < 0) return -1;
  setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof mark);
  if (connect(fd, (const struct sockaddr *)dst, sizeof *dst) < 0) {
    close(fd);
    return -1;
  }
  nodelay(fd);
  fcntl(fd, F_SETFL, O_NONBLOCK);
  return fd;
}

/* Runs one connection until both directions ended (0) or one failed (-1). */
static int tconn_run(struct tconn *c) {
  SSL *s = c->ssl;
  BIO *net = c->net;
  char *up = malloc(TLS_RELAY_PLAIN), *down = malloc(TLS_RELAY_PLAIN), *q;
  if (!up || !down) {
    free(up);
    free(down);
    return -1;
  }
  size_t up_len = 0, up_off = 0, down_len = 0, down_off = 0;
  int hs = 0, p_eof = 0, t_eof = 0, down_eof = 0, up_shut = 0, down_shut = 0, t_shut = 0;
  int p_rd = 1, p_wr = 1, t_rd = 1, t_wr = 1, rc = -1;
  if (!c->server) { /* the original port goes first, in the first record */
    uint16_t port = c->local.sin_port;
    memcpy(up, &port, 2);
    up_len = 2;
  }
  for (;;) {
    int moved = 0;
    int avail;
    /* ciphertext out */
    while (t_wr && (avail = BIO_nread0(net, &q)) > 0) {
      ssize_t n = send(c->t, q, (size_t)avail, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) t_wr = 0;
      else if (n <= 0) goto out;
      else {
        BIO_nread(net, &q, (int)n);
        moved = 1;
      }
    }
    /* ciphertext in */
    if (t_rd && !t_eof && (avail = BIO_nwrite0(net, &q)) > 0) {
      ssize_t n = recv(c->t, q, (size_t)avail, 0);
      if (n > 0) {
        BIO_nwrite(net, &q, (int)n);
        moved = 1;
      } else if (n == 0) {
        t_eof = 1;
        BIO_shutdown_wr(net);
        moved = 1;
      } else if (errno == EAGAIN) t_rd = 0;
      else if (errno != EINTR) goto out;
    }
    if (!hs) {
      int r = SSL_do_handshake(s);
      if (r == 1) hs = moved = 1;
      else {
        int e = SSL_get_error(s, r);
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) goto out;
        if (t_eof) goto out;
      }
    } else {
      /* plaintext in -> TLS */
      if (c->p >= 0 && up_off == up_len && !p_eof && p_rd) {
        ssize_t n = recv(c->p, up, TLS_RELAY_PLAIN, 0);
        if (n > 0) {
          up_len = (size_t)n;
          up_off = 0;
          moved = 1;
        } else if (n == 0) p_eof = moved = 1;
        else if (errno == EAGAIN) p_rd = 0;
        else if (errno != EINTR) goto out;
      }
      while (up_off < up_len) { /* partial-write mode returns after each record: all of them, then one send */
        size_t w = 0;
        if (SSL_write_ex(s, up + up_off, up_len - up_off, &w) == 1) {
          up_off += w;
          if (up_off == up_len) up_off = up_len = 0;
          moved = 1;
        } else if (SSL_get_error(s, 0) != SSL_ERROR_WANT_WRITE) goto out;
        else break;
      }
      if (p_eof && up_len == 0 && !up_shut) { /* close_notify; the FIN follows it (below) */
        int r = SSL_shutdown(s);
        if (r >= 0) up_shut = moved = 1;
        else if (SSL_get_error(s, r) != SSL_ERROR_WANT_WRITE) goto out;
        /* else the pair is full: it drains above, and this retries the rest of the alert */
      }
      /* TLS -> plaintext */
      if (down_off == down_len && !down_eof) {
        size_t r = 0, want = c->p < 0 ? 2 - down_len : TLS_RELAY_PLAIN;
        if (SSL_read_ex(s, down + (c->p < 0 ? down_len : 0), want, &r) == 1) {
          moved = 1;
          if (c->p >= 0) {
            /* Several records, one send (as meshnode's gathered write to the app). */
            down_len = r;
            down_off = 0;
            while (down_len + 16384 <= TLS_RELAY_PLAIN &&
                   SSL_read_ex(s, down + down_len, TLS_RELAY_PLAIN - down_len, &r) == 1)
              down_len += r;
          } else if ((down_len += r) == 2) { /* server: the port has come; dial */
            struct sockaddr_in dst = c->local;
            memcpy(&dst.sin_port, down, 2);
            down_len = 0;
            if ((c->p = dial_marked(&dst)) < 0) goto out;
          }
        } else {
          /* close_notify, or a FIN without it (SSL_OP_IGNORE_UNEXPECTED_EOF, as meshnode) */
          int e = SSL_get_error(s, 0);
          if (e == SSL_ERROR_ZERO_RETURN) down_eof = moved = 1;
          else if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) goto out;
          if (c->p < 0 && down_eof) goto out;
        }
      }
      while (down_off < down_len && p_wr) {
        ssize_t n = send(c->p, down + down_off, down_len - down_off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) p_wr = 0;
        else if (n <= 0) goto out;
        else {
          down_off += (size_t)n;
          moved = 1;
        }
      }
      if (down_off == down_len) down_off = down_len = 0;
      if (down_eof && down_len == 0 && !down_shut) {
        shutdown(c->p, SHUT_WR);
        down_shut = moved = 1;
      }
      if (up_shut && !t_shut && BIO_ctrl_pending(net) == 0) {
        shutdown(c->t, SHUT_WR);
        t_shut = moved = 1;
      }
      if (t_shut && down_shut) {
        rc = 0;
        goto out;
      }
    }
    if (moved || (t_wr && BIO_ctrl_pending(net) > 0)) continue; /* e.g. a handshake flight to send */
    /* Only fds that wait for something are polled (poll reports HUP/ERR even for no events). */
    struct pollfd f[2] = {{.fd = -1}, {.fd = -1}};
    if (c->p >= 0 && !p_rd && !p_eof && up_len == 0) f[0].events |= POLLIN;
    if (c->p >= 0 && !p_wr && down_off < down_len) f[0].events |= POLLOUT;
    if (!t_rd && !t_eof) f[1].events |= POLLIN;
    if (!t_wr && BIO_ctrl_pending(net) > 0) f[1].events |= POLLOUT;
    if (f[0].events) f[0].fd = c->p;
    if (f[1].events) f[1].fd = c->t;
    if (!f[0].events && !f[1].events) goto out; /* nothing can move: a bug, end the connection */
    if (poll(f, 2, -1) < 0 && errno != EINTR) goto out;
    for (int i = 0; i < 2; i++) {
      int rd = (f[i].revents & (POLLIN | POLLHUP | POLLERR)) != 0, wr = (f[i].revents & (POLLOUT | POLLHUP | POLLERR)) != 0;
      if (i == 0) p_rd |= rd, p_wr |= wr;
      else t_rd |= rd, t_wr |= wr;
    }
  }
out:
  free(up);
  free(down);
  return rc;
}

/* The connection's thread: the client dials the destination's port 15008; both make their SSL
 * on a BIO pair, then run the connection. */
static void *tconn_thread(void *arg) {
  struct tconn *c = arg;
  BIO *inner = NULL;
  int ok = 1;
  if (!c->server) {
    struct sockaddr_in hbone = c->local; /* c->local keeps the original port for the preamble */
    hbone.sin_port = htons(TLS_RELAY_HBONE_PORT);
    ok = (c->t = dial_marked(&hbone)) >= 0;
  } else {
    nodelay(c->t);
    fcntl(c->t, F_SETFL, O_NONBLOCK);
  }
  if (ok) ok = (c->ssl = SSL_new(tls_relay_ctx)) != NULL;
  if (ok) ok = BIO_new_bio_pair(&inner, TLS_RELAY_PAIR, &c->net, TLS_RELAY_PAIR) == 1;
  if (ok) {
    SSL_set_bio(c->ssl, inner, inner);
    if (c->server) SSL_set_accept_state(c->ssl);
    else SSL_set_connect_state(c->ssl);
  }
  if (!ok || tconn_run(c) < 0) { /* an error: reset both sides, as a proxy does */
    struct linger lg = {1, 0};
    for (int i = 0; i < 2; i++) {
      int fd = i ? c->t : c->p;
      if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
  }
  if (c->p >= 0) close(c->p);
  if (c->t >= 0) close(c->t);
  SSL_free(c->ssl); /* frees the internal half of the pair (NULL-safe) */
  BIO_free(c->net);
  free(c);
  return NULL;
}

static int inpod_tls_relay_main(const char *role, int port, const char *pem, const char *ca) {
  int server = !strcmp(role, "server");
  if (!server && strcmp(role, "client")) return 2;
  SSL_CTX *x = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!x || SSL_CTX_set_min_proto_version(x, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_ciphersuites(x, "TLS_AES_128_GCM_SHA256") != 1 ||
      SSL_CTX_use_certificate_chain_file(x, pem) != 1 ||
      SSL_CTX_use_PrivateKey_file(x, pem, SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_load_verify_locations(x, ca, NULL) != 1) {
    ERR_print_errors_fp(stderr);
    return 2;
  }
  SSL_CTX_set_verify(x, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
  SSL_CTX_set_num_tickets(x, 0);
  SSL_CTX_set_mode(x, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_options(x, SSL_OP_IGNORE_UNEXPECTED_EOF); /* a FIN without close_notify is EOF */
  tls_relay_ctx = x;
  int lfd = listen_on(port);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  for (;;) {
    int d = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (d < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOMEM) usleep(10000); /* no busy loop */
      continue;
    }
    struct tconn *c = calloc(1, sizeof *c);
    socklen_t len = sizeof c->local;
    int ok = c != NULL;
    if (ok) {
      c->server = server;
      c->p = c->t = -1;
      if (server) {
        c->t = d;
        ok = getsockname(d, (struct sockaddr *)&c->local, &len) == 0;
      } else {
        c->p = d;
        ok = getsockopt(d, SOL_IP, SO_ORIGINAL_DST, &c->local, &len) == 0;
        nodelay(d);
        fcntl(d, F_SETFL, O_NONBLOCK);
      }
    }
    pthread_t th;
    if (ok) ok = pthread_create(&th, &attr, tconn_thread, c) == 0;
    if (!ok) {
      close(d);
      free(c);
    }
  }
}

static int waitport_main(const char *host, int port, double secs) {
  struct sockaddr_in sa;
  if (resolve(host, port, &sa) < 0) return 2;
  double end = now_s() + secs;
  while (now_s() < end) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
      close(fd);
      return 0;
    }
    close(fd);
    usleep(50000);
  }
  return 1;
}

/* ---------------- HTTP/1.1 server (keep-alive, Content-Length bodies) ---------------- */
struct hconn {
  char *buf;
  size_t len, cap;
};
static int http_server_main(int port) {
  int lfd = listen_on(port);
  fcntl(lfd, F_SETFL, O_NONBLOCK);
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  static struct hconn conns[65536];
  static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok";
  struct epoll_event evs[256];
  for (;;) {
    int n = epoll_wait(ep, evs, 256, -1);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == lfd) {
        for (;;) {
          int c = accept4(lfd, NULL, NULL, 0);
          if (c < 0) break;
          if (c >= 65536) { close(c); continue; }
          nodelay(c);
          conns[c].len = 0;
          struct epoll_event e2 = {.events = EPOLLIN, .data.fd = c};
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &e2);
        }
        continue;
      }
      struct hconn *h = &conns[fd];
      if (h->cap - h->len < 16384) {
        h->cap = h->cap ? h->cap * 2 : 65536;
        h->buf = realloc(h->buf, h->cap);
      }
      ssize_t r = read(fd, h->buf + h->len, h->cap - h->len - 1);
      if (r <= 0) {
        epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
        close(fd);
        h->len = 0;
        continue;
      }
      h->len += (size_t)r;
      int bad = 0;
      for (;;) {
        h->buf[h->len] = 0;
        char *end = strstr(h->buf, "\r\n\r\n");
        if (!end) break;
        size_t hl = (size_t)(end + 4 - h->buf), cl = 0;
        char *p = strcasestr(h->buf, "\r\ncontent-length:");
        if (p && p < end) cl = strtoul(p + 17, NULL, 10);
        if (h->len < hl + cl) break;
        if (write_all(fd, resp, sizeof resp - 1) < 0) { bad = 1; break; }
        memmove(h->buf, h->buf + hl + cl, h->len - hl - cl);
        h->len -= hl + cl;
      }
      if (bad) {
        epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
        close(fd);
        h->len = 0;
      }
    }
  }
  return 0;
}

/* ---------------- fixed-rate HTTP/1.1 load ---------------- */
struct hl_arg {
  struct sockaddr_in sa;
  double start, end, interval;
  int size;
  const char *host;
  size_t ok, err, cap;
  uint32_t *lat;
};
static int read_response(int fd, char *buf, size_t cap) {
  size_t got = 0;
  for (;;) {
    ssize_t r = read(fd, buf + got, cap - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
    buf[got] = 0;
    char *end = strstr(buf, "\r\n\r\n");
    if (!end) continue;
    size_t hl = (size_t)(end + 4 - buf), cl = 0;
    char *p = strcasestr(buf, "\r\ncontent-length:");
    if (p && p < end) cl = strtoul(p + 17, NULL, 10);
    if (got >= hl + cl) return strncmp(buf, "HTTP/1.1 200", 12) == 0 ? 0 : -1;
  }
}
static void *hl_thread(void *p) {
  struct hl_arg *a = p;
  char hdr[256];
  int hl = snprintf(hdr, sizeof hdr,
                    "POST /bench HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\n"
                    "Content-Length: %d\r\n\r\n", a->host, a->size);
  char *req = malloc((size_t)hl + a->size);
  memcpy(req, hdr, (size_t)hl);
  memset(req + hl, 'x', (size_t)a->size);
  char resp[4096];
  int fd = -1;
  double next = a->start;
  while (next < a->end) {
    double t = now_s();
    if (t < next) usleep((useconds_t)((next - t) * 1e6));
    next += a->interval;
    if (fd < 0 && (fd = dial(&a->sa)) < 0) { a->err++; continue; }
    uint64_t t0 = now_ns();
    if (write_all(fd, req, (size_t)hl + a->size) < 0 || read_response(fd, resp, sizeof resp) < 0) {
      close(fd);
      fd = -1;
      a->err++;
      continue;
    }
    uint64_t d = now_ns() - t0;
    if (a->ok == a->cap) a->lat = realloc(a->lat, (a->cap = a->cap ? a->cap * 2 : 65536) * sizeof *a->lat);
    a->lat[a->ok++] = d > 0xffffffffu ? 0xffffffffu : (uint32_t)d;
  }
  if (fd >= 0) close(fd);
  return NULL;
}
static int http_load_main(const char *host, int port, double secs, double rate, int conns, int size) {
  struct hl_arg *a = calloc(conns, sizeof *a);
  pthread_t *th = calloc(conns, sizeof *th);
  double t0 = now_s() + 0.05;
  for (int i = 0; i < conns; i++) {
    if (resolve(host, port, &a[i].sa) < 0) die("resolve");
    a[i].interval = conns / rate;
    a[i].start = t0 + a[i].interval * i / conns;  /* stagger the connections */
    a[i].end = t0 + secs;
    a[i].size = size;
    a[i].host = host;
    pthread_create(&th[i], NULL, hl_thread, &a[i]);
  }
  size_t ok = 0, err = 0;
  for (int i = 0; i < conns; i++) {
    pthread_join(th[i], NULL);
    ok += a[i].ok;
    err += a[i].err;
  }
  double el = now_s() - t0;
  uint32_t *v = malloc((ok + 1) * sizeof *v);
  size_t k = 0;
  for (int i = 0; i < conns; i++)
    for (size_t j = 0; j < a[i].ok; j++) v[k++] = a[i].lat[j];
  qsort(v, k, sizeof *v, cmp_u32);
  printf("reqs=%zu errors=%zu rps=%.1f p50_us=%.1f p99_us=%.1f\n", ok, err, ok / el, pct(v, k, .5),
         pct(v, k, .99));
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 3 && !strcmp(argv[1], "echo")) return echo_main(atoi(argv[2]));
  if (argc >= 6 && !strcmp(argv[1], "rr"))
    return rr_main(argv[2], atoi(argv[3]), atof(argv[4]), atoi(argv[5]), argc > 6 ? atof(argv[6]) : 0.5);
  if (argc >= 7 && !strcmp(argv[1], "cps"))
    return cps_main(argv[2], atoi(argv[3]), atof(argv[4]), atoi(argv[5]), atoi(argv[6]));
  if (argc >= 3 && !strcmp(argv[1], "connect-proxy")) return connect_proxy_main(atoi(argv[2]));
  if (argc >= 3 && !strcmp(argv[1], "http-server")) return http_server_main(atoi(argv[2]));
  if (argc >= 8 && !strcmp(argv[1], "http-load"))
    return http_load_main(argv[2], atoi(argv[3]), atof(argv[4]), atof(argv[5]), atoi(argv[6]), atoi(argv[7]));
  if (argc >= 3 && !strcmp(argv[1], "inpod-relay")) return inpod_relay_main(argc - 2, argv + 2);
  if (argc >= 6 && !strcmp(argv[1], "inpod-tls-relay"))
    return inpod_tls_relay_main(argv[2], atoi(argv[3]), argv[4], argv[5]);
  if (argc >= 5 && !strcmp(argv[1], "waitport")) return waitport_main(argv[2], atoi(argv[3]), atof(argv[4]));
  fprintf(stderr,
          "usage: benchnet echo PORT | rr HOST PORT SECS SIZE [WARMUP] | cps HOST PORT SECS SIZE THREADS |\n"
          "       connect-proxy PORT | waitport HOST PORT TIMEOUT | http-server PORT |\n"
          "       http-load HOST PORT SECS RATE CONNS SIZE | inpod-relay PORT... |\n"
          "       inpod-tls-relay client|server PORT CERT_PEM CA_PEM\n");
  return 2;
}
