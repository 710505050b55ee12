// libfabric's man-page semantics through the C ABI, over one provider's RDM
// endpoints in one process, each check against what fi_cq(3), fi_msg(3),
// fi_tagged(3), fi_rma(3), fi_atomic(3), fi_cntr(3), fi_av(3) and fi_mr(3) say:
// every CQ format (and nothing written past its entry), truncation as an error
// entry, FI_SELECTIVE_COMPLETION, inject, FI_MULTI_RECV with
// FI_OPT_MIN_MULTI_RECV, directed receive, FI_PEEK | FI_CLAIM then FI_DISCARD,
// fi_cq_sreadfrom driving progress, counters (add, set, errors, wait), AV
// remove, fi_writedata's remote CQ data and remote counter, fi_inject_write,
// the atomic validity queries, thread levels, FI_CONTEXT2 contexts,
// FI_DELIVERY_COMPLETE, fi_mr_regv and fi_mr_regattr.
// Prints one "<check>: ok" line per check and "ok" at the end; exits 1 with
// the line and values of the first failed check.
// usage: semantics PROVIDER [CHECK...]
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include "check.h"

// A post, retried while the provider answers -FI_EAGAIN (fi_msg(3): any post
// may, for instance while a connection is being set up), driving everything.
#define POST(x) do { long _p; double _end = now() + 30; while ((_p = (long)(x)) == -FI_EAGAIN && now() < _end) progress(); CK(_p); } while (0)

static void progress(void);
static const char *prov;
static const char *node;
static struct fi_info *info;
static struct fid_fabric *fab;
static struct fid_domain *dom;

// Every CQ open, driven by progress(): our providers progress manually.
static struct fid_cq *all[16];
static int nall;

// Drive every endpoint: a read of no entries progresses a CQ's endpoints and
// consumes nothing.
static void progress(void) {
  char scratch[sizeof(struct fi_cq_err_entry)];
  for (int i = 0; i < nall; i++) (void)fi_cq_read(all[i], scratch, 0);
}

struct side {
  struct fid_ep *ep;
  struct fid_cq *cq;
  struct fid_av *av;
  struct fid_cntr *tx, *rx;
  char name[256];
  size_t namelen;
};

// An RDM endpoint with its CQ in `format`, bound with `txflags` for transmits,
// counters for sends and for receives (and remote writes).
static void mk(struct side *s, enum fi_cq_format format, uint64_t txflags) {
  struct fi_cq_attr ca = { .format = format, .wait_obj = FI_WAIT_UNSPEC };
  struct fi_av_attr aa = { .type = FI_AV_MAP };
  struct fi_cntr_attr ka = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC };
  memset(s, 0, sizeof *s);
  CK(fi_cq_open(dom, &ca, &s->cq, NULL));
  all[nall++] = s->cq;
  CK(fi_av_open(dom, &aa, &s->av, NULL));
  CK(fi_cntr_open(dom, &ka, &s->tx, NULL));
  CK(fi_cntr_open(dom, &ka, &s->rx, NULL));
  CK(fi_endpoint(dom, info, &s->ep, NULL));
  CK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | txflags));
  CK(fi_ep_bind(s->ep, &s->cq->fid, FI_RECV));
  CK(fi_ep_bind(s->ep, &s->av->fid, 0));
  CK(fi_ep_bind(s->ep, &s->tx->fid, FI_SEND | FI_WRITE | FI_READ));
  CK(fi_ep_bind(s->ep, &s->rx->fid, FI_RECV | FI_REMOTE_WRITE));
  CK(fi_enable(s->ep));
  s->namelen = sizeof s->name;
  CK(fi_getname(&s->ep->fid, s->name, &s->namelen));
}

// `from`'s address in `to`'s AV.
static fi_addr_t know(struct side *to, struct side *from) {
  fi_addr_t a = FI_ADDR_NOTAVAIL;
  EXPECT(fi_av_insert(to->av, from->name, 1, &a, 0, NULL), 1);
  return a;
}

static void rm(struct side *s) {
  for (int i = 0; i < nall; i++)
    if (all[i] == s->cq) all[i] = all[--nall];
  CK(fi_close(&s->ep->fid));
  CK(fi_close(&s->tx->fid));
  CK(fi_close(&s->rx->fid));
  CK(fi_close(&s->av->fid));
  CK(fi_close(&s->cq->fid));
}

// One entry from `cq` (of the format's size), driving everything; an error
// entry fails the program.
static void one(struct fid_cq *cq, void *entry, fi_addr_t *src) {
  double end = now() + 30;
  while (now() < end) {
    ssize_t r = fi_cq_readfrom(cq, entry, 1, src);
    if (r == 1) return;
    if (r != -FI_EAGAIN) {
      struct fi_cq_err_entry ee = { 0 };
      fi_cq_readerr(cq, &ee, 0);
      fprintf(stderr, "cq: %zd, error %d %s\n", r, ee.err, fi_strerror(ee.err));
      exit(1);
    }
    progress();
  }
  fprintf(stderr, "no completion in 30 s\n");
  exit(1);
}

static void one_t(struct fid_cq *cq, struct fi_cq_tagged_entry *e) { one(cq, e, NULL); }

// The next entry of `cq` must be an error entry: read it into `ee`.
static void one_err(struct fid_cq *cq, struct fi_cq_err_entry *ee) {
  double end = now() + 30;
  struct fi_cq_tagged_entry e;
  while (now() < end) {
    ssize_t r = fi_cq_read(cq, &e, 1);
    if (r == -FI_EAVAIL) { EXPECT(fi_cq_readerr(cq, ee, 0), 1); return; }
    if (r == 1) { fprintf(stderr, "a completion (flags %#lx) where an error was due\n", (unsigned long)e.flags); exit(1); }
    EXPECT(r, -FI_EAGAIN);
    progress();
  }
  fprintf(stderr, "no error entry in 30 s\n");
  exit(1);
}

// `cq` stays empty while everything is driven `rounds` times.
static void none(struct fid_cq *cq, int rounds) {
  struct fi_cq_tagged_entry e;
  for (int i = 0; i < rounds; i++) {
    progress();
    ssize_t r = fi_cq_read(cq, &e, 1);
    if (r != -FI_EAGAIN) { fprintf(stderr, "an entry (%zd, context %p) where none was due\n", r, r == 1 ? e.op_context : NULL); exit(1); }
  }
}

static void fill(char *p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) p[i] = (char)(seed + i * 7);
}

static int same(const char *p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (char)(seed + i * 7)) return 0;
  return 1;
}

// Every CQ format returns its own entry, filled as fi_cq(3) says, and writes
// nothing past it.
static void formats(void) {
  static const struct { enum fi_cq_format f; size_t size; } fs[] = {
    { FI_CQ_FORMAT_CONTEXT, sizeof(struct fi_cq_entry) },
    { FI_CQ_FORMAT_MSG, sizeof(struct fi_cq_msg_entry) },
    { FI_CQ_FORMAT_DATA, sizeof(struct fi_cq_data_entry) },
    { FI_CQ_FORMAT_TAGGED, sizeof(struct fi_cq_tagged_entry) },
  };
  for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) {
    struct side a, b;
    mk(&a, fs[i].f, 0); mk(&b, fs[i].f, 0);
    fi_addr_t ab = know(&a, &b);
    char in[64], out[32];
    fill(out, sizeof out, (int)i);
    struct fi_context rctx, sctx;
    POST(fi_recv(b.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, &rctx));
    POST(fi_senddata(a.ep, out, sizeof out, NULL, 0x1234, ab, &sctx));
    unsigned char got[2 * sizeof(struct fi_cq_tagged_entry)];
    memset(got, 0xab, sizeof got);
    one(b.cq, got, NULL);
    for (size_t k = fs[i].size; k < sizeof got; k++) EXPECT(got[k], 0xab);
    struct fi_cq_tagged_entry e = { 0 };
    memcpy(&e, got, fs[i].size);
    EXPECT(e.op_context, &rctx);
    if (fs[i].f != FI_CQ_FORMAT_CONTEXT) {
      EXPECT(e.flags & (FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA), FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
      EXPECT(e.len, sizeof out);
    }
    // buf is only defined for FI_MULTI_RECV buffers (checked below).
    if (fs[i].f == FI_CQ_FORMAT_DATA || fs[i].f == FI_CQ_FORMAT_TAGGED) EXPECT(e.data, 0x1234);
    TRUE(same(in, sizeof out, (int)i));
    memset(got, 0xab, sizeof got);
    one(a.cq, got, NULL);
    for (size_t k = fs[i].size; k < sizeof got; k++) EXPECT(got[k], 0xab);
    memcpy(&e, got, fs[i].size);
    EXPECT(e.op_context, &sctx);
    if (fs[i].f != FI_CQ_FORMAT_CONTEXT) EXPECT(e.flags & (FI_SEND | FI_MSG), FI_SEND | FI_MSG);
    rm(&a); rm(&b);
  }
  printf("formats: ok\n");
}

// A message longer than the buffer: an FI_ETRUNC error entry with the overflow
// in olen, the receive counter's error count raised; fi_cq_strerror answers.
static void truncation(void) {
  struct side a, b;
  mk(&a, FI_CQ_FORMAT_TAGGED, 0); mk(&b, FI_CQ_FORMAT_TAGGED, 0);
  fi_addr_t ab = know(&a, &b);
  char in[16], out[100];
  fill(out, sizeof out, 3);
  struct fi_context rctx;
  POST(fi_recv(b.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, &rctx));
  POST(fi_send(a.ep, out, sizeof out, NULL, ab, NULL));
  struct fi_cq_err_entry ee;
  memset(&ee, 0, sizeof ee);
  one_err(b.cq, &ee);
  EXPECT(ee.err, FI_ETRUNC);
  EXPECT(ee.op_context, &rctx);
  EXPECT(ee.olen, sizeof out - sizeof in);
  EXPECT(ee.len, sizeof in);
  EXPECT(ee.flags & (FI_RECV | FI_MSG), FI_RECV | FI_MSG);
  TRUE(same(in, sizeof in, 3));
  char text[128];
  TRUE(fi_cq_strerror(b.cq, ee.prov_errno, ee.err_data, text, sizeof text) != NULL);
  EXPECT(fi_cntr_readerr(b.rx), 1);
  struct fi_cq_tagged_entry e;
  one_t(a.cq, &e);  // the sender's completion is a success
  rm(&a); rm(&b);
  printf("truncation: ok\n");
}

// With FI_SELECTIVE_COMPLETION on the transmit binding only operations flagged
// FI_COMPLETION complete in the CQ; the counter counts them all. Injects never
// complete, their buffer is free on return, and inject_size is enforced.
static void selective_and_inject(void) {
  struct side a, b;
  mk(&a, FI_CQ_FORMAT_TAGGED, FI_SELECTIVE_COMPLETION); mk(&b, FI_CQ_FORMAT_TAGGED, 0);
  fi_addr_t ab = know(&a, &b);
  char in[4][64], out[64];
  struct fi_context rctx[4], sctx[2];
  for (int i = 0; i < 4; i++) POST(fi_trecv(b.ep, in[i], sizeof in[i], NULL, FI_ADDR_UNSPEC, 10 + i, 0, &rctx[i]));
  fill(out, sizeof out, 1);
  POST(fi_tsend(a.ep, out, sizeof out, NULL, ab, 10, &sctx[0]));
  struct iovec iov = { out, sizeof out };
  struct fi_msg_tagged m = { .msg_iov = &iov, .iov_count = 1, .addr = ab, .tag = 11, .context = &sctx[1] };
  POST(fi_tsendmsg(a.ep, &m, FI_COMPLETION));
  char inj[8];
  fill(inj, sizeof inj, 5);
  POST(fi_tinject(a.ep, inj, sizeof inj, ab, 12));
  memset(inj, 0, sizeof inj);  // free on return
  POST(fi_tinjectdata(a.ep, out, 8, 0x77, ab, 13));
  size_t big = info->tx_attr->inject_size + 1;
  char *huge = calloc(1, big);
  EXPECT(fi_tinject(a.ep, huge, big, ab, 14), -FI_EINVAL);
  free(huge);
  struct fi_cq_tagged_entry e;
  for (int i = 0; i < 4; i++) {
    one_t(b.cq, &e);
    int k = (int)(e.tag - 10);
    TRUE(k >= 0 && k < 4);
    EXPECT(e.op_context, &rctx[k]);
    TRUE(same(in[k], k == 2 ? 8 : (size_t)e.len, k == 2 ? 5 : 1));
    if (k == 3) { EXPECT(e.data, 0x77); EXPECT(!!(e.flags & FI_REMOTE_CQ_DATA), 1); }
  }
  one_t(a.cq, &e);
  EXPECT(e.op_context, &sctx[1]);
  none(a.cq, 200);
  EXPECT(fi_cntr_read(a.tx), 4);
  EXPECT(fi_cntr_read(b.rx), 4);
  rm(&a); rm(&b);
  printf("selective completion and inject: ok\n");
}

// One buffer posted with FI_MULTI_RECV takes several messages, each completion
// pointing into it; when less than FI_OPT_MIN_MULTI_RECV is left the buffer is
// released with FI_MULTI_RECV.
static void multi_recv(void) {
  struct side a, b;
  mk(&a, FI_CQ_FORMAT_DATA, 0); mk(&b, FI_CQ_FORMAT_DATA, 0);
  fi_addr_t ab = know(&a, &b);
  size_t min = 200, got = 0, glen = sizeof got;
  CK(fi_setopt(&b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min));
  CK(fi_getopt(&b.ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got, &glen));
  EXPECT(got, 200);
  EXPECT(fi_getopt(&b.ep->fid, FI_OPT_ENDPOINT, 12345, &got, &glen), -FI_ENOPROTOOPT);
  static char pool[1024];
  struct iovec iov = { pool, sizeof pool };
  struct fi_context rctx;
  struct fi_msg m = { .msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &rctx };
  POST(fi_recvmsg(b.ep, &m, FI_MULTI_RECV));
  char out[3][300];
  for (int i = 0; i < 3; i++) { fill(out[i], 300, 20 + i); POST(fi_send(a.ep, out[i], 300, NULL, ab, NULL)); }
  int released = 0, n = 0;
  char *seen[3];
  while (n < 3 || !released) {
    struct fi_cq_data_entry e;
    one(b.cq, &e, NULL);
    EXPECT(e.op_context, &rctx);
    if (e.flags & FI_MULTI_RECV) released++;
    if (e.len == 0) { TRUE(e.flags & FI_MULTI_RECV); continue; }
    EXPECT(e.len, 300);
    TRUE((char *)e.buf >= pool && (char *)e.buf + 300 <= pool + sizeof pool);
    seen[n++] = e.buf;
    TRUE(n <= 3);
  }
  EXPECT(released, 1);
  for (int i = 0; i < 3; i++) {
    TRUE(same(seen[i], 300, 20 + i));
    for (int j = 0; j < i; j++) TRUE(seen[i] != seen[j]);
  }
  for (int i = 0; i < 3; i++) { struct fi_cq_data_entry e; one(a.cq, &e, NULL); }
  rm(&a); rm(&b);
  printf("multi-receive: ok\n");
}

// A receive directed at A takes A's message even when B's, with the same tag,
// arrived first; a wildcard one then takes B's. fi_cq_sreadfrom drives
// progress and names the source.
static void directed(void) {
  struct side a, b, c;
  mk(&a, FI_CQ_FORMAT_TAGGED, 0); mk(&b, FI_CQ_FORMAT_TAGGED, 0); mk(&c, FI_CQ_FORMAT_TAGGED, 0);
  fi_addr_t ac = know(&a, &c), bc = know(&b, &c), ca = know(&c, &a), cb = know(&c, &b);
  char fa[32], fb[32], in[32];
  fill(fa, sizeof fa, 40); fill(fb, sizeof fb, 50);
  struct fi_cq_tagged_entry e;
  POST(fi_tsend(b.ep, fb, sizeof fb, NULL, bc, 7, NULL));
  // B's message reaches C (unexpected) before A sends.
  struct fi_msg_tagged pm = { .msg_iov = NULL, .iov_count = 0, .addr = cb, .tag = 7 };
  for (;;) {
    struct fi_context pctx;
    pm.context = &pctx;
    POST(fi_trecvmsg(c.ep, &pm, FI_PEEK));
    fi_addr_t src;
    ssize_t r;
    while ((r = fi_cq_readfrom(c.cq, &e, 1, &src)) == -FI_EAGAIN) progress();
    if (r == 1) { EXPECT(e.op_context, &pctx); EXPECT(src, cb); break; }
    EXPECT(r, -FI_EAVAIL);
    struct fi_cq_err_entry ee = { 0 };
    EXPECT(fi_cq_readerr(c.cq, &ee, 0), 1);
    EXPECT(ee.err, FI_ENOMSG);
    progress();  // the sender's side too
  }
  POST(fi_tsend(a.ep, fa, sizeof fa, NULL, ac, 7, NULL));
  struct fi_context r1, r2;
  POST(fi_trecv(c.ep, in, sizeof in, NULL, ca, 7, 0, &r1));
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  ssize_t r;
  while ((r = fi_cq_sreadfrom(c.cq, &e, 1, &src, NULL, 100)) == -FI_EAGAIN) progress();
  EXPECT(r, 1);
  EXPECT(e.op_context, &r1);
  EXPECT(src, ca);
  TRUE(same(in, sizeof in, 40));
  POST(fi_trecv(c.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, 7, 0, &r2));
  src = FI_ADDR_NOTAVAIL;
  while ((r = fi_cq_sreadfrom(c.cq, &e, 1, &src, NULL, 100)) == -FI_EAGAIN) progress();
  EXPECT(r, 1);
  EXPECT(e.op_context, &r2);
  EXPECT(src, cb);
  TRUE(same(in, sizeof in, 50));
  one_t(a.cq, &e); one_t(b.cq, &e);
  rm(&a); rm(&b); rm(&c);
  printf("directed receive: ok\n");
}

// FI_PEEK | FI_CLAIM finds and reserves a message; FI_CLAIM | FI_DISCARD then
// completes it without copying; a second peek finds nothing.
static void discard(void) {
  struct side a, b;
  mk(&a, FI_CQ_FORMAT_TAGGED, 0); mk(&b, FI_CQ_FORMAT_TAGGED, 0);
  fi_addr_t ab = know(&a, &b);
  char out[40], in[64];
  fill(out, sizeof out, 60);
  POST(fi_tsend(a.ep, out, sizeof out, NULL, ab, 21, NULL));
  struct fi_context claim;
  struct iovec iov = { in, sizeof in };
  struct fi_msg_tagged m = { .msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 21, .context = &claim };
  struct fi_cq_tagged_entry e;
  for (;;) {
    POST(fi_trecvmsg(b.ep, &m, FI_PEEK | FI_CLAIM));
    ssize_t r;
    while ((r = fi_cq_read(b.cq, &e, 1)) == -FI_EAGAIN) progress();
    if (r == 1) break;
    EXPECT(r, -FI_EAVAIL);
    struct fi_cq_err_entry ee = { 0 };
    EXPECT(fi_cq_readerr(b.cq, &ee, 0), 1);
    EXPECT(ee.err, FI_ENOMSG);
    progress();  // the sender's side too
  }
  EXPECT(e.op_context, &claim);
  EXPECT(e.len, sizeof out);
  EXPECT(e.tag, 21);
  memset(in, 0x5a, sizeof in);
  POST(fi_trecvmsg(b.ep, &m, FI_CLAIM | FI_DISCARD));
  one_t(b.cq, &e);
  EXPECT(e.op_context, &claim);
  for (size_t i = 0; i < sizeof in; i++) EXPECT(in[i], 0x5a);
  struct fi_context again;
  m.context = &again;
  POST(fi_trecvmsg(b.ep, &m, FI_PEEK));
  struct fi_cq_err_entry ee = { 0 };
  one_err(b.cq, &ee);
  EXPECT(ee.err, FI_ENOMSG);
  EXPECT(ee.op_context, &again);
  one_t(a.cq, &e);
  rm(&a); rm(&b);
  printf("peek, claim, discard: ok\n");
}

// Counters by hand: add, set, errors, and waits for a threshold.
static void counters(void) {
  struct fi_cntr_attr ka = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC };
  struct fid_cntr *c;
  CK(fi_cntr_open(dom, &ka, &c, NULL));
  EXPECT(fi_cntr_read(c), 0);
  CK(fi_cntr_add(c, 5));
  EXPECT(fi_cntr_read(c), 5);
  CK(fi_cntr_set(c, 2));
  EXPECT(fi_cntr_read(c), 2);
  CK(fi_cntr_adderr(c, 3));
  EXPECT(fi_cntr_readerr(c), 3);
  CK(fi_cntr_seterr(c, 1));
  EXPECT(fi_cntr_readerr(c), 1);
  EXPECT(fi_cntr_read(c), 2);
  long w = fi_cntr_wait(c, 3, 20);
  TRUE(w == -FI_ETIMEDOUT || w == -FI_EAVAIL);
  CK(fi_cntr_seterr(c, 0));
  EXPECT(fi_cntr_wait(c, 3, 20), -FI_ETIMEDOUT);
  CK(fi_cntr_add(c, 1));
  CK(fi_cntr_wait(c, 3, 1000));
  CK(fi_close(&c->fid));
  printf("counters: ok\n");
}

// An address removed from an AV can no longer be looked up.
static void av_remove(void) {
  struct side a, b;
  mk(&a, FI_CQ_FORMAT_TAGGED, 0); mk(&b, FI_CQ_FORMAT_TAGGED, 0);
  fi_addr_t ab = know(&a, &b);
  char back[256];
  size_t bl = sizeof back;
  CK(fi_av_lookup(a.av, ab, back, &bl));
  EXPECT(bl, b.namelen);
  CK(fi_av_remove(a.av, &ab, 1, 0));
  bl = sizeof back;
  TRUE(fi_av_lookup(a.av, ab, back, &bl) != 0);
  fi_addr_t again = know(&a, &b);
  bl = sizeof back;
  CK(fi_av_lookup(a.av, again, back, &bl));
  EXPECT(memcmp(back, b.name, b.namelen), 0);
  rm(&a); rm(&b);
  printf("av remove: ok\n");
}

// RMA: a write with remote CQ data completes at the target with FI_RMA |
// FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA and no context, taking no receive
// (the application did not ask for FI_RX_CQ_DATA), and counts on its
// remote-write counter;
// an injected write needs no completion; a read brings both back; a wrong key
// is an error completion, not a crash.
static void rma(void) {
  if (!(info->caps & FI_RMA)) { printf("rma: absent\n"); return; }
  struct side a, b;
  mk(&a, FI_CQ_FORMAT_TAGGED, 0); mk(&b, FI_CQ_FORMAT_TAGGED, 0);
  fi_addr_t ab = know(&a, &b);
  static char target[4096], local[4096];
  struct fid_mr *mr;
  struct iovec riov = { target, sizeof target };
  CK(fi_mr_regv(dom, &riov, 1, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
  uint64_t key = fi_mr_key(mr);
  uint64_t base = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)target : 0;
  fill(local, 1000, 70);
  struct fi_context wctx;
  POST(fi_writedata(a.ep, local, 1000, NULL, 0xfeed, ab, base + 100, key, &wctx));
  struct fi_cq_tagged_entry e;
  one_t(b.cq, &e);
  EXPECT(e.op_context, NULL);  // no receive consumed (no FI_RX_CQ_DATA mode)
  EXPECT(e.flags & (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA), FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA);
  EXPECT(e.data, 0xfeed);
  TRUE(same(target + 100, 1000, 70));
  one_t(a.cq, &e);
  EXPECT(e.op_context, &wctx);
  EXPECT(e.flags & (FI_RMA | FI_WRITE), FI_RMA | FI_WRITE);
  EXPECT(fi_cntr_read(b.rx), 1);
  fill(local, 16, 80);
  POST(fi_inject_write(a.ep, local, 16, ab, base + 2000, key));
  memset(local, 0, 16);
  // An inject completes nothing but counts (fi_cntr(3)); its data lands.
  for (double end = now() + 30; fi_cntr_read(a.tx) < 2; progress())
    if (now() > end) { fprintf(stderr, "the injected write was not counted: %lu\n", (unsigned long)fi_cntr_read(a.tx)); exit(1); }
  TRUE(same(target + 2000, 16, 80));
  memset(local, 0, sizeof local);
  struct fi_context rctx;
  POST(fi_read(a.ep, local, 2100, NULL, ab, base, key, &rctx));
  one_t(a.cq, &e);
  EXPECT(e.op_context, &rctx);
  EXPECT(e.flags & (FI_RMA | FI_READ), FI_RMA | FI_READ);
  TRUE(same(local + 100, 1000, 70));
  TRUE(same(local + 2000, 16, 80));
  none(a.cq, 100);
  POST(fi_write(a.ep, local, 8, NULL, ab, base, key + 0x1000, &wctx));
  struct fi_cq_err_entry ee = { 0 };
  one_err(a.cq, &ee);
  EXPECT(ee.op_context, &wctx);
  TRUE(ee.err != 0);
  EXPECT(fi_cntr_readerr(a.tx), 1);
  CK(fi_close(&mr->fid));
  rm(&a); rm(&b);
  printf("rma: ok\n");
}

// The validity queries: what fi_atomic(3) allows is valid with a count, what it
// does not is -FI_EOPNOTSUPP; fi_query_atomic agrees.
static void atomic_valid(void) {
  if (!(info->caps & FI_ATOMIC)) { printf("atomic validity: absent\n"); return; }
  struct side a;
  mk(&a, FI_CQ_FORMAT_TAGGED, 0);
  size_t n = 0;
  CK(fi_atomicvalid(a.ep, FI_INT32, FI_SUM, &n)); TRUE(n >= 1);
  CK(fi_fetch_atomicvalid(a.ep, FI_DOUBLE, FI_MAX, &n)); TRUE(n >= 1);
  CK(fi_compare_atomicvalid(a.ep, FI_UINT64, FI_CSWAP, &n)); TRUE(n >= 1);
  EXPECT(fi_atomicvalid(a.ep, FI_FLOAT, FI_BOR, &n), -FI_EOPNOTSUPP);
  EXPECT(fi_compare_atomicvalid(a.ep, FI_INT32, FI_SUM, &n), -FI_EOPNOTSUPP);
  EXPECT(fi_fetch_atomicvalid(a.ep, FI_INT32, FI_CSWAP, &n), -FI_EOPNOTSUPP);
  struct fi_atomic_attr at;
  CK(fi_query_atomic(dom, FI_DOUBLE, FI_SUM, &at, 0)); EXPECT(at.size, 8);
  CK(fi_query_atomic(dom, FI_INT16, FI_CSWAP, &at, FI_COMPARE_ATOMIC)); EXPECT(at.size, 2);
  EXPECT(fi_query_atomic(dom, FI_INT16, FI_CSWAP, &at, 0), -FI_EOPNOTSUPP);
  rm(&a);
  printf("atomic validity: ok\n");
}

// Contexts of FI_CONTEXT2's size come back as given.
static void context2(void) {
  struct side a, b;
  mk(&a, FI_CQ_FORMAT_TAGGED, 0); mk(&b, FI_CQ_FORMAT_TAGGED, 0);
  fi_addr_t ab = know(&a, &b);
  struct fi_context2 c1, c2;
  char in[8], out[8] = "ctx2";
  POST(fi_trecv(b.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, 3, 0, &c1));
  POST(fi_tsend(a.ep, out, sizeof out, NULL, ab, 3, &c2));
  struct fi_cq_tagged_entry e;
  one_t(b.cq, &e); EXPECT(e.op_context, &c1);
  one_t(a.cq, &e); EXPECT(e.op_context, &c2);
  EXPECT(strcmp(in, "ctx2"), 0);
  rm(&a); rm(&b);
  printf("FI_CONTEXT2: ok\n");
}

// FI_DELIVERY_COMPLETE: when the send completes, the data is in the
// receiver's buffer.
static void delivery(void) {
  struct side a, b;
  mk(&a, FI_CQ_FORMAT_TAGGED, 0); mk(&b, FI_CQ_FORMAT_TAGGED, 0);
  fi_addr_t ab = know(&a, &b);
  static char in[65536], out[65536];
  for (size_t size = 64; size <= sizeof out; size *= 32) {
    memset(in, 0, sizeof in);
    fill(out, size, (int)size);
    POST(fi_trecv(b.ep, in, size, NULL, FI_ADDR_UNSPEC, 5, 0, NULL));
    struct iovec iov = { out, size };
    struct fi_msg_tagged m = { .msg_iov = &iov, .iov_count = 1, .addr = ab, .tag = 5 };
    POST(fi_tsendmsg(a.ep, &m, FI_DELIVERY_COMPLETE | FI_COMPLETION));
    struct fi_cq_tagged_entry e;
    one_t(a.cq, &e);
    TRUE(same(in, size, (int)size));
    one_t(b.cq, &e);
    EXPECT(e.len, size);
  }
  rm(&a); rm(&b);
  printf("FI_DELIVERY_COMPLETE: ok\n");
}

// fi_mr_regattr with an iovec and access flags; the key and descriptor stay
// stable; closing it is clean.
static void mr_attr(void) {
  static char region[8192];
  struct iovec iov = { region, sizeof region };
  struct fi_mr_attr ma = { .mr_iov = &iov, .iov_count = 1, .access = FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV };
  struct fid_mr *mr;
  CK(fi_mr_regattr(dom, &ma, 0, &mr));
  uint64_t k = fi_mr_key(mr);
  EXPECT(fi_mr_key(mr), k);
  TRUE(k != FI_KEY_NOTAVAIL);
  void *d = fi_mr_desc(mr);
  EXPECT(fi_mr_desc(mr), d);
  CK(fi_close(&mr->fid));
  EXPECT(fi_mr_regattr(dom, NULL, 0, &mr), -FI_EINVAL);
  printf("mr regattr: ok\n");
}

struct job { struct side *s; fi_addr_t to; int n; };
static volatile int received_all;

// Sends `n` tagged messages and reaps their completions on its own endpoint,
// then keeps driving it (retransmissions, acknowledgements: progress is
// manual) until the receiver has everything.
static void *sender(void *p) {
  struct job *j = p;
  char out[16] = "thread";
  for (int i = 0; i < j->n; i++) {
    ssize_t r;
    while ((r = fi_tsend(j->s->ep, out, sizeof out, NULL, j->to, 1, NULL)) == -FI_EAGAIN) {
      struct fi_cq_tagged_entry x;
      (void)fi_cq_read(j->s->cq, &x, 0);
    }
    CK(r);
    struct fi_cq_tagged_entry e;
    while ((r = fi_cq_read(j->s->cq, &e, 1)) == -FI_EAGAIN) {}
    EXPECT(r, 1);
  }
  while (!__atomic_load_n(&received_all, __ATOMIC_ACQUIRE)) {
    struct fi_cq_tagged_entry x;
    (void)fi_cq_read(j->s->cq, &x, 0);
  }
  return NULL;
}

// Every thread level opens, and under FI_THREAD_SAFE two threads each drive
// their own endpoint against a third at once.
static void threads(void) {
  static const int levels[] = { FI_THREAD_SAFE, FI_THREAD_DOMAIN, FI_THREAD_COMPLETION, FI_THREAD_ENDPOINT };
  for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
    struct fi_info *h = fi_dupinfo(info), *got;
    h->domain_attr->threading = levels[i];
    free(h->domain_attr->name); h->domain_attr->name = NULL;
    free(h->fabric_attr->name); h->fabric_attr->name = NULL;
    free(h->src_addr); h->src_addr = NULL; h->src_addrlen = 0;
    CK(fi_getinfo(FI_VERSION(1, 17), node, NULL, node ? FI_SOURCE : 0, h, &got));
    TRUE(got->domain_attr->threading == levels[i] || got->domain_attr->threading == FI_THREAD_SAFE);
    fi_freeinfo(got); fi_freeinfo(h);
  }
  struct side a, b, c;
  mk(&a, FI_CQ_FORMAT_TAGGED, 0); mk(&b, FI_CQ_FORMAT_TAGGED, 0); mk(&c, FI_CQ_FORMAT_TAGGED, 0);
  // The receiver's own thread (this one) drives only its queue: the senders
  // drive theirs.
  nall = 0;
  all[nall++] = c.cq;
  enum { N = 200 };
  struct job ja = { &a, know(&a, &c), N }, jb = { &b, know(&b, &c), N };
  static char in[2 * N][16];
  for (int i = 0; i < 2 * N; i++) POST(fi_trecv(c.ep, in[i], 16, NULL, FI_ADDR_UNSPEC, 1, 0, NULL));
  pthread_t ta, tb;
  pthread_create(&ta, NULL, sender, &ja);
  pthread_create(&tb, NULL, sender, &jb);
  struct fi_cq_tagged_entry e;
  for (int i = 0; i < 2 * N; i++) one_t(c.cq, &e);
  __atomic_store_n(&received_all, 1, __ATOMIC_RELEASE);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  for (int i = 0; i < 2 * N; i++) EXPECT(strcmp(in[i], "thread"), 0);
  all[nall++] = a.cq; all[nall++] = b.cq;
  rm(&a); rm(&b); rm(&c);
  printf("threads: ok\n");
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  prov = argc > 1 ? argv[1] : "shm";
  node = strcmp(prov, "shm") ? "127.0.0.1" : NULL;
  struct fi_info *hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED | FI_MSG | FI_RMA | FI_ATOMIC | FI_MULTI_RECV | FI_DIRECTED_RECV | FI_SOURCE | FI_RMA_EVENT | FI_REMOTE_CQ_DATA;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->fabric_attr->prov_name = strdup(prov);
  hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  if (fi_getinfo(FI_VERSION(1, 17), node, NULL, node ? FI_SOURCE : 0, hints, &info)) {
    // Without RMA and atomics (their checks then say "absent").
    hints->caps &= ~(FI_RMA | FI_ATOMIC | FI_RMA_EVENT);
    CK(fi_getinfo(FI_VERSION(1, 17), node, NULL, node ? FI_SOURCE : 0, hints, &info));
  }
  CK(fi_fabric(info->fabric_attr, &fab, NULL));
  CK(fi_domain(fab, info, &dom, NULL));
  static const struct { const char *name; void (*run)(void); } checks[] = {
    { "formats", formats }, { "truncation", truncation }, { "selective", selective_and_inject },
    { "multi_recv", multi_recv }, { "directed", directed }, { "discard", discard },
    { "counters", counters }, { "av_remove", av_remove }, { "rma", rma },
    { "atomic_valid", atomic_valid }, { "context2", context2 }, { "delivery", delivery },
    { "mr_attr", mr_attr }, { "threads", threads },
  };
  // Every check, or those named after the provider.
  for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
    int run = argc <= 2;
    for (int k = 2; k < argc; k++) run |= !strcmp(argv[k], checks[i].name);
    if (run) checks[i].run();
  }
  CK(fi_close(&dom->fid));
  CK(fi_close(&fab->fid));
  fi_freeinfo(info);
  fi_freeinfo(hints);
  printf("ok\n");
  return 0;
}
