// The object calls over one provider, in one process: two RDM endpoints A and B.
// Bad input (wrong class, NULL, short buffers) must answer -FI_EINVAL/-FI_ETOOSMALL;
// tagged messages with FI_REMOTE_CQ_DATA read back with fi_cq_readfrom, fi_cancel,
// FI_PEEK/FI_CLAIM, blocking reads, wait objects; fi_eq_write; -FI_EBUSY for a
// close in the wrong order; AV insertsvc/insertsym; then RMA and atomics
// (inject, several fi_iocs) and fi_mr_refresh when the provider offers them
// (else "rma: absent"). Prints "ok" at the end.
// usage: objects PROVIDER
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include "check.h"
struct side { struct fid_ep *ep; struct fid_cq *cq; struct fid_av *av; struct fid_cntr *cntr; fi_addr_t peer; };
static struct fi_info *info; static struct fid_fabric *fab; static struct fid_domain *dom;

static void mk(struct side *s) {
  struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC };
  struct fi_av_attr aa = { .type = FI_AV_UNSPEC };
  struct fi_cntr_attr ka = { .events = FI_CNTR_EVENTS_COMP };
  CK(fi_cq_open(dom, &ca, &s->cq, NULL)); CK(fi_av_open(dom, &aa, &s->av, NULL));
  CK(fi_cntr_open(dom, &ka, &s->cntr, NULL));
  CK(fi_endpoint(dom, info, &s->ep, NULL));
  EXPECT(fi_ep_bind(s->ep, &dom->fid, 0), -FI_EINVAL);
  CK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV)); CK(fi_ep_bind(s->ep, &s->av->fid, 0));
  CK(fi_ep_bind(s->ep, &s->cntr->fid, FI_SEND));
  CK(fi_enable(s->ep));
}

// One completion from `cq`, driving `other` too (manual progress).
static void one(struct fid_cq *cq, struct fid_cq *other, struct fi_cq_tagged_entry *e, fi_addr_t *src) {
  for (long n = 0; n < 100000000; n++) {
    ssize_t r = fi_cq_readfrom(cq, e, 1, src);
    if (r == 1) return;
    if (r != -FI_EAGAIN) { struct fi_cq_err_entry ee = {0}; fi_cq_readerr(cq, &ee, 0); fprintf(stderr, "cq: %zd err %d\n", r, ee.err); exit(1); }
    struct fi_cq_tagged_entry x; if (other) (void)fi_cq_read(other, &x, 0);  /* progress only */
  }
  fprintf(stderr, "no completion\n"); exit(1);
}
// One completion from each queue (either may need the other's progress).
static void pair(struct fid_cq *c1, struct fi_cq_tagged_entry *e1, struct fid_cq *c2, struct fi_cq_tagged_entry *e2, fi_addr_t *src2) {
  int n1 = 1, n2 = 1;
  for (long n = 0; n < 100000000 && (n1 || n2); n++) {
    struct fid_cq *q[2] = { c1, c2 }; struct fi_cq_tagged_entry *e[2] = { e1, e2 }; int *left[2] = { &n1, &n2 };
    for (int k = 0; k < 2; k++) {
      struct fi_cq_tagged_entry x; ssize_t r = k ? fi_cq_readfrom(q[k], *left[k] ? e[k] : &x, 1, src2) : fi_cq_read(q[k], *left[k] ? e[k] : &x, 1);
      if (r == 1 && !*left[k]) { fprintf(stderr, "unexpected completion\n"); exit(1); }
      if (r == 1) *left[k] = 0;
      else if (r != -FI_EAGAIN) { struct fi_cq_err_entry ee = {0}; fi_cq_readerr(q[k], &ee, 0); fprintf(stderr, "cq: %zd err %d\n", r, ee.err); exit(1); }
    }
  }
  if (n1 || n2) { fprintf(stderr, "no completion\n"); exit(1); }
}
// An error completion from `cq`.
static int one_err(struct fid_cq *cq, struct fid_cq *other, struct fi_cq_err_entry *ee) {
  struct fi_cq_tagged_entry e;
  for (long n = 0; n < 100000000; n++) {
    ssize_t r = fi_cq_read(cq, &e, 1);
    if (r == -FI_EAVAIL) { CK(fi_cq_readerr(cq, ee, 0) != 1); return 0; }
    if (r == 1) return 1;
    if (other) (void)fi_cq_read(other, &e, 0);  /* progress only */
  }
  return -1;
}

// fi_inject_atomic and FI_INJECT (operand reusable on return, no completion for
// the inject, inject_size the limit), then atomics over several fi_iocs
// (gathered operands, adjacent results; mismatched counts refused). Target
// t[0..2] starts at { v0, 20, 3 }; `c` is the context completions carry.
static void atomics_more(struct side *a, struct side *b, uint64_t *t, uint64_t base, uint64_t key, struct fi_context *c) {
  struct fi_cq_tagged_entry e; uint64_t res[3] = {0}, one1 = 1, rd = 0;
  uint64_t v0 = t[0];
  CK(fi_inject_atomic(a->ep, &one1, 1, a->peer, base, key, FI_UINT64, FI_SUM));
  one1 = 1000;  /* the buffer is the caller's again */
  for (long n = 0;; n++) {  /* no completion: read until the sum landed */
    CK(fi_fetch_atomic(a->ep, &rd, 1, NULL, &res[0], NULL, a->peer, base, key, FI_UINT64, FI_ATOMIC_READ, c));
    one(a->cq, b->cq, &e, NULL); EXPECT(e.op_context, c);  /* the inject's would come first */
    if (res[0] == v0 + 1) break;
    if (n > 1000000) { fprintf(stderr, "inject_atomic never landed\n"); exit(1); }
  }
  size_t big = info->tx_attr->inject_size / 8 + 1; uint64_t *ops = calloc(big, 8);
  EXPECT(fi_inject_atomic(a->ep, ops, big, a->peer, base, key, FI_UINT64, FI_SUM), -FI_EINVAL);
  EXPECT(fi_inject_atomic(a->ep, NULL, 1, a->peer, base, key, FI_UINT64, FI_SUM), -FI_EINVAL);
  free(ops);
  uint64_t two = 2; struct fi_ioc io = { &two, 1 }; struct fi_rma_ioc r = { base, 1, key };
  struct fi_msg_atomic m = { .msg_iov = &io, .iov_count = 1, .addr = a->peer, .rma_iov = &r, .rma_iov_count = 1,
                             .datatype = FI_UINT64, .op = FI_SUM, .context = c };
  CK(fi_atomicmsg(a->ep, &m, FI_INJECT)); two = 1000;
  one(a->cq, b->cq, &e, NULL); EXPECT(e.op_context, c); EXPECT(t[0], v0 + 3);

  // Several iocs: t[0..2] += { 1, 2, 3 } from three pieces.
  uint64_t x[3] = { 1, 2, 3 }, y[3] = { 0 };
  struct fi_ioc xs[3] = { { &x[0], 1 }, { &x[1], 1 }, { &x[2], 1 } };
  uint64_t before[3] = { t[0], t[1], t[2] };
  CK(fi_atomicv(a->ep, xs, NULL, 3, a->peer, base, key, FI_UINT64, FI_SUM, c));
  one(a->cq, b->cq, &e, NULL);
  for (int i = 0; i < 3; i++) EXPECT(t[i], before[i] + x[i]);
  // Fetch over two pieces, results into two adjacent pieces.
  struct fi_ioc rs[2] = { { &res[0], 1 }, { &res[1], 2 } };
  struct fi_ioc xs2[2] = { { &x[0], 2 }, { &x[2], 1 } };
  CK(fi_fetch_atomicv(a->ep, xs2, NULL, 2, rs, NULL, 2, a->peer, base, key, FI_UINT64, FI_SUM, c));
  one(a->cq, b->cq, &e, NULL);
  for (int i = 0; i < 3; i++) { EXPECT(res[i], before[i] + x[i]); EXPECT(t[i], before[i] + 2 * x[i]); }
  struct fi_ioc apart[2] = { { &res[0], 1 }, { &res[2], 2 } };  /* not adjacent: refused */
  EXPECT(fi_fetch_atomicv(a->ep, xs2, NULL, 2, apart, NULL, 2, a->peer, base, key, FI_UINT64, FI_SUM, c), -FI_EINVAL);
  // Compare-and-swap of t[0..1] over two pieces each.
  uint64_t cmp[2] = { t[0], 12345 }, nv[2] = { 7, 8 };
  struct fi_ioc cs[2] = { { &cmp[0], 1 }, { &cmp[1], 1 } }, ns[2] = { { &nv[0], 1 }, { &nv[1], 1 } };
  struct fi_ioc rs2[1] = { { y, 2 } }; uint64_t t1 = t[1];
  CK(fi_compare_atomicv(a->ep, ns, NULL, 2, cs, NULL, 2, rs2, NULL, 1, a->peer, base, key, FI_UINT64, FI_CSWAP, c));
  one(a->cq, b->cq, &e, NULL);
  EXPECT(t[0], 7); EXPECT(t[1], t1); EXPECT(y[0], cmp[0]); EXPECT(y[1], t1);
  // A message over two pieces; its fi_rma_ioc must count the same elements.
  struct fi_rma_ioc r2 = { base, 2, key }, r3 = { base, 3, key };
  struct fi_msg_atomic m2 = { .msg_iov = xs, .iov_count = 2, .addr = a->peer, .rma_iov = &r3, .rma_iov_count = 1,
                              .datatype = FI_UINT64, .op = FI_SUM, .context = c };
  EXPECT(fi_atomicmsg(a->ep, &m2, 0), -FI_EINVAL);
  m2.rma_iov = &r2; before[0] = t[0]; before[1] = t[1];
  CK(fi_atomicmsg(a->ep, &m2, 0));
  one(a->cq, b->cq, &e, NULL); EXPECT(t[0], before[0] + 1); EXPECT(t[1], before[1] + 2);
  printf("atomics over iocs: ok\n");
}

// fi_eq_write: the caller's events come back in order, with their number and
// bytes (copied at the write; truncated to a shorter read), to read, FI_PEEK
// and sread; bad arguments are -FI_EINVAL.
static void eq_user_events(void) {
  struct fi_eq_attr qa = { .flags = FI_WRITE, .wait_obj = FI_WAIT_UNSPEC };
  struct fid_eq *eq; CK(fi_eq_open(fab, &qa, &eq, NULL));
  struct fi_eq_entry w = { .fid = &eq->fid, .context = (void *)0x1234, .data = 7 }, r;
  char big[40], in[64]; uint32_t ev = 99;
  for (int i = 0; i < 40; i++) big[i] = (char)i;
  EXPECT(fi_eq_write(eq, FI_NOTIFY, &w, sizeof w, 0), sizeof w);
  w.data = 8;  /* copied at the write */
  EXPECT(fi_eq_write(eq, 42, big, sizeof big, 0), sizeof big);
  EXPECT(fi_eq_write(eq, 43, big, sizeof big, 0), sizeof big);
  EXPECT(fi_eq_write(eq, 1, NULL, 8, 0), -FI_EINVAL);
  EXPECT(eq->ops->write((struct fid_eq *)dom, 1, &w, sizeof w, 0), -FI_EINVAL);
  EXPECT(fi_eq_read(eq, &ev, &r, sizeof r, FI_PEEK), sizeof r); EXPECT(ev, FI_NOTIFY);
  ev = 99; memset(&r, 0, sizeof r);
  EXPECT(fi_eq_read(eq, &ev, &r, sizeof r, 0), sizeof r); EXPECT(ev, FI_NOTIFY);
  EXPECT(r.fid, &eq->fid); EXPECT(r.context, 0x1234); EXPECT(r.data, 7);
  EXPECT(fi_eq_sread(eq, &ev, in, sizeof in, 1000, 0), sizeof big); EXPECT(ev, 42); EXPECT(memcmp(in, big, sizeof big), 0);
  memset(in, 0, sizeof in);
  EXPECT(fi_eq_read(eq, &ev, in, 24, 0), 24); EXPECT(ev, 43); EXPECT(memcmp(in, big, 24), 0); EXPECT(in[24], 0);
  EXPECT(fi_eq_read(eq, &ev, in, sizeof in, 0), -FI_EAGAIN);
  CK(fi_close(&eq->fid));
  printf("eq_write: ok\n");
}

// fi_av_insertsvc and fi_av_insertsym (socket-address providers): numeric
// nodes and services count up, node by node; host names resolve; an entry that
// does not resolve is FI_ADDR_NOTAVAIL. String addresses (shm) refuse them.
static void av_sym(struct fid_av *av, int sockaddr) {
  fi_addr_t fa = 0, fas[6]; struct sockaddr_in sin; size_t l = sizeof sin;
  if (!sockaddr) { EXPECT(fi_av_insertsvc(av, "127.0.0.1", "5000", &fa, 0, NULL), -FI_EINVAL); return; }
  EXPECT(fi_av_insertsvc(av, "127.0.0.1", "5000", &fa, 0, NULL), 1);
  CK(fi_av_lookup(av, fa, &sin, &l)); EXPECT(sin.sin_family, AF_INET);
  EXPECT(ntohs(sin.sin_port), 5000); EXPECT(ntohl(sin.sin_addr.s_addr), 0x7f000001);
  EXPECT(fi_av_insertsym(av, "127.0.0.1", 2, "6000", 3, fas, 0, NULL), 6);
  for (int i = 0; i < 6; i++) {
    l = sizeof sin; CK(fi_av_lookup(av, fas[i], &sin, &l));
    EXPECT(ntohl(sin.sin_addr.s_addr), 0x7f000001 + i / 3); EXPECT(ntohs(sin.sin_port), 6000 + i % 3);
  }
  EXPECT(fi_av_insertsym(av, "localhost", 1, "7100", 2, fas, 0, NULL), 2);
  l = sizeof sin; CK(fi_av_lookup(av, fas[1], &sin, &l)); EXPECT(ntohs(sin.sin_port), 7101);
  EXPECT(ntohl(sin.sin_addr.s_addr) >> 24, 127);
  EXPECT(fi_av_insertsvc(av, "no-such-host.invalid", "1", &fa, 0, NULL), 0); EXPECT(fa, FI_ADDR_NOTAVAIL);
  EXPECT(fi_av_insertsvc(av, NULL, "1", &fa, 0, NULL), -FI_EINVAL);
  EXPECT(fi_av_insertsym(av, "127.0.0.1", 1, "1", 1, &fa, 1, NULL), -FI_EINVAL);
  EXPECT(fi_av_insertsym(av, "127.0.0.1", 0, "1", 1, &fa, 0, NULL), 0);
  printf("av insertsvc/insertsym: ok\n");
}

// Closing an object others depend on is -FI_EBUSY and leaves it usable (a
// domain with an endpoint, queue or region open; a CQ bound to an open
// endpoint; a fabric with a domain or EQ open); in the right order each is 0.
static void close_order(void) {
  struct fid_domain *d2; struct fid_cq *cq2; struct fid_ep *ep2; struct fid_eq *eq2; struct fid_mr *mr2;
  struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE };
  struct fi_eq_attr qa = { .wait_obj = FI_WAIT_NONE }; struct fi_cq_entry ce; static char buf[64];
  CK(fi_domain(fab, info, &d2, NULL)); CK(fi_cq_open(d2, &ca, &cq2, NULL)); CK(fi_endpoint(d2, info, &ep2, NULL));
  CK(fi_ep_bind(ep2, &cq2->fid, FI_TRANSMIT | FI_RECV)); CK(fi_eq_open(fab, &qa, &eq2, NULL));
  EXPECT(fi_close(&d2->fid), -FI_EBUSY); EXPECT(fi_close(&cq2->fid), -FI_EBUSY);
  EXPECT(fi_close(&fab->fid), -FI_EBUSY);
  EXPECT(fi_cq_read(cq2, &ce, 1), -FI_EAGAIN);  /* still open */
  CK(fi_close(&ep2->fid)); CK(fi_close(&cq2->fid));
  CK(fi_mr_reg(d2, buf, sizeof buf, FI_REMOTE_READ, 0, 0, 0, &mr2, NULL));
  EXPECT(fi_close(&d2->fid), -FI_EBUSY); CK(fi_close(&mr2->fid)); CK(fi_close(&d2->fid));
  EXPECT(fi_close(&fab->fid), -FI_EBUSY);  /* dom and eq2 */
  CK(fi_close(&eq2->fid));
  printf("close order: ok\n");
}

int main(int argc, char **argv) {
  const char *prov = argc > 1 ? argv[1] : "shm";
  const char *node = strcmp(prov, "shm") ? "127.0.0.1" : NULL;
  struct fi_info *hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM; hints->caps = FI_TAGGED | FI_MSG | FI_RMA | FI_ATOMIC;
  hints->fabric_attr->prov_name = strdup(prov);
  hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  int rma = 1;
  if (fi_getinfo(FI_VERSION(1, 17), node, NULL, node ? FI_SOURCE : 0, hints, &info)) {
    rma = 0; hints->caps = FI_TAGGED | FI_MSG;
    CK(fi_getinfo(FI_VERSION(1, 17), node, NULL, node ? FI_SOURCE : 0, hints, &info));
  }
  CK(fi_fabric(info->fabric_attr, &fab, NULL)); CK(fi_domain(fab, info, &dom, NULL));
  eq_user_events();
  close_order();
  struct side a, b; mk(&a); mk(&b);

  // Wrong classes (through the right table) and bad arguments.
  struct fi_cq_tagged_entry e; fi_addr_t src = 0; char out[64] = "hello", in[64] = {0}; struct fi_context ctx[8];
  EXPECT(a.cq->ops->read((struct fid_cq *)a.av, &e, 1), -FI_EINVAL);
  EXPECT(a.cq->ops->read(NULL, &e, 1), -FI_EINVAL);
  EXPECT(fi_cq_read(a.cq, NULL, 1), -FI_EINVAL);
  EXPECT(a.ep->msg->send((struct fid_ep *)a.cq, "x", 1, NULL, 0, NULL), -FI_EINVAL);
  EXPECT(a.ep->tagged->recv((struct fid_ep *)dom, in, 1, NULL, 0, 0, 0, NULL), -FI_EINVAL);
  EXPECT(fi_tsend(a.ep, NULL, 5, NULL, 0, 1, NULL), -FI_EINVAL);
  EXPECT(fi_cq_read(a.cq, &e, 1), -FI_EAGAIN);
  EXPECT(fi_cq_sread(a.cq, &e, 1, NULL, 10), -FI_EAGAIN);
  /* fi_rx_size_left and fi_tx_size_left (deprecated wrappers) */
  EXPECT(a.ep->ops->rx_size_left(a.ep), -FI_ENOSYS); EXPECT(a.ep->ops->tx_size_left(a.ep), -FI_ENOSYS);
  EXPECT(a.ep->ops->tx_size_left((struct fid_ep *)a.cq), -FI_EINVAL); EXPECT(a.ep->ops->rx_size_left(NULL), -FI_EINVAL);

  // Names and addresses.
  char na[256], nb[256], tiny[2]; size_t la = sizeof na, lb = sizeof nb, lt = sizeof tiny;
  EXPECT(fi_getname(&a.ep->fid, tiny, &lt), -FI_ETOOSMALL);
  if (lt <= sizeof tiny) { fprintf(stderr, "fi_getname gave no length\n"); return 1; }
  CK(fi_getname(&a.ep->fid, na, &la)); CK(fi_getname(&b.ep->fid, nb, &lb));
  EXPECT(fi_av_insert(a.av, nb, 1, &a.peer, 0, NULL), 1); EXPECT(fi_av_insert(b.av, na, 1, &b.peer, 0, NULL), 1);
  av_sym(a.av, info->addr_format == FI_SOCKADDR_IN);
  char text[128]; size_t tl = sizeof text;
  if (!fi_av_straddr(a.av, nb, text, &tl) || !strstr(text, "://")) { fprintf(stderr, "fi_av_straddr\n"); return 1; }
  char back[256]; size_t bl = sizeof back;
  CK(fi_av_lookup(a.av, a.peer, back, &bl)); EXPECT(bl, lb); EXPECT(memcmp(back, nb, lb), 0);

  // Tagged with remote CQ data; the source comes back from fi_cq_readfrom.
  CK(fi_trecv(b.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, 7, 0, &ctx[0]));
  CK(fi_tsenddata(a.ep, out, 6, NULL, 0xabcd, a.peer, 7, &ctx[1]));
  struct fi_cq_tagged_entry ea; pair(a.cq, &ea, b.cq, &e, &src); EXPECT(ea.op_context, &ctx[1]);
  EXPECT(e.op_context, &ctx[0]); EXPECT(e.len, 6); EXPECT(e.tag, 7);
  EXPECT(e.data, 0xabcd); EXPECT(!!(e.flags & FI_REMOTE_CQ_DATA), 1); EXPECT(!!(e.flags & FI_RECV), 1);
  EXPECT(src, b.peer); EXPECT(strcmp(in, "hello"), 0);
  EXPECT(fi_cntr_read(a.cntr) >= 1, 1);

  // Cancel: an FI_ECANCELED error completion with the context.
  struct fi_cq_err_entry ee;
  CK(fi_trecv(b.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, 99, 0, &ctx[2]));
  CK(fi_cancel(&b.ep->fid, &ctx[2]));
  memset(&ee, 0, sizeof ee); EXPECT(one_err(b.cq, a.cq, &ee), 0);
  EXPECT(ee.err, FI_ECANCELED); EXPECT(ee.op_context, &ctx[2]);

  // Peek, then claim.
  CK(fi_tsend(a.ep, out, 6, NULL, a.peer, 42, &ctx[3]));
  struct iovec iov = { in, sizeof in };
  struct fi_msg_tagged m = { .msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 42, .context = &ctx[4] };
  int sent = 0;
  for (int tries = 0;; tries++) {
    memset(in, 0, sizeof in);
    CK(fi_trecvmsg(b.ep, &m, FI_PEEK | FI_CLAIM));
    ssize_t r; struct fi_cq_tagged_entry pe;
    while ((r = fi_cq_read(b.cq, &pe, 1)) == -FI_EAGAIN) if (!sent && fi_cq_read(a.cq, &ea, 1) == 1) { EXPECT(ea.op_context, &ctx[3]); sent = 1; }
    if (r == 1) { EXPECT(pe.op_context, &ctx[4]); EXPECT(pe.len, 6); break; }
    EXPECT(r, -FI_EAVAIL); CK(fi_cq_readerr(b.cq, &ee, 0) != 1); EXPECT(ee.err, FI_ENOMSG);
    if (tries > 100000) { fprintf(stderr, "peek never found the message\n"); return 1; }
  }
  CK(fi_trecvmsg(b.ep, &m, FI_CLAIM));
  if (sent) one(b.cq, a.cq, &e, NULL); else { pair(a.cq, &ea, b.cq, &e, NULL); EXPECT(ea.op_context, &ctx[3]); }
  EXPECT(e.op_context, &ctx[4]); EXPECT(strcmp(in, "hello"), 0);

  // Wait objects.
  int fd = -1; CK(fi_control(&a.cq->fid, FI_GETWAIT, &fd)); EXPECT(fd >= 0, 1);
  struct fid *fids[1] = { &a.cq->fid }; long tw = fi_trywait(fab, fids, 1);
  if (tw != 0 && tw != -FI_EAGAIN) { fprintf(stderr, "fi_trywait %ld\n", tw); return 1; }
  CK(fi_cq_signal(a.cq));

  if (!rma) { printf("rma: absent\n"); }
  else {
    uint64_t target[4] = { 1, 2, 3, 4 }, local[4] = { 10, 20, 30, 40 }, res = 0, cmp = 0;
    struct fid_mr *mr;
    CK(fi_mr_reg(dom, target, sizeof target, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
    uint64_t key = fi_mr_key(mr); (void)fi_mr_desc(mr);
    struct iovec part = { &target[1], 16 }, past = { &target[3], 16 };
    CK(fi_mr_refresh(mr, &part, 1, 0)); CK(fi_mr_refresh(mr, NULL, 0, 0));
    EXPECT(fi_mr_refresh(mr, &past, 1, 0), -FI_EINVAL); EXPECT(fi_mr_refresh(mr, NULL, 1, 0), -FI_EINVAL);
    uint64_t base = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)target : 0;
    CK(fi_write(a.ep, local, 16, NULL, a.peer, base, key, &ctx[5]));
    one(a.cq, b.cq, &e, NULL); EXPECT(e.op_context, &ctx[5]); EXPECT(target[0], 10); EXPECT(target[1], 20);
    memset(local, 0, sizeof local);
    CK(fi_read(a.ep, local, 32, NULL, a.peer, base, key, &ctx[6]));
    one(a.cq, b.cq, &e, NULL); EXPECT(local[0], 10); EXPECT(local[3], 4);
    size_t cnt = 0;
    if (fi_atomicvalid(a.ep, FI_UINT64, FI_SUM, &cnt) == 0 && cnt >= 1) {
      uint64_t five = 5;
      CK(fi_atomic(a.ep, &five, 1, NULL, a.peer, base, key, FI_UINT64, FI_SUM, &ctx[7]));
      one(a.cq, b.cq, &e, NULL); EXPECT(target[0], 15);
      CK(fi_fetch_atomic(a.ep, &five, 1, NULL, &res, NULL, a.peer, base, key, FI_UINT64, FI_SUM, &ctx[7]));
      one(a.cq, b.cq, &e, NULL); EXPECT(res, 15); EXPECT(target[0], 20);
      cmp = 20; uint64_t nv = 99;
      CK(fi_compare_atomic(a.ep, &nv, 1, NULL, &cmp, NULL, &res, NULL, a.peer, base, key, FI_UINT64, FI_CSWAP, &ctx[7]));
      one(a.cq, b.cq, &e, NULL); EXPECT(res, 20); EXPECT(target[0], 99);
      struct fi_atomic_attr at; CK(fi_query_atomic(dom, FI_UINT64, FI_SUM, &at, 0)); EXPECT(at.size, 8);
      EXPECT(fi_atomic(a.ep, &five, 1, NULL, a.peer, base, key, 77, FI_SUM, &ctx[7]), -FI_EINVAL);
      atomics_more(&a, &b, target, base, key, &ctx[7]);
      printf("atomics: ok\n");
    } else printf("atomics: absent\n");
    CK(fi_close(&mr->fid));
    printf("rma: ok\n");
  }
  EXPECT(fi_close(&a.av->fid), -FI_EBUSY); EXPECT(fi_close(&a.cntr->fid), -FI_EBUSY);
  EXPECT(fi_close(&dom->fid), -FI_EBUSY); EXPECT(fi_close(&fab->fid), -FI_EBUSY);
  struct side *s[2] = { &a, &b };
  for (int i = 0; i < 2; i++) {
    CK(fi_close(&s[i]->ep->fid)); CK(fi_close(&s[i]->cntr->fid)); CK(fi_close(&s[i]->av->fid)); CK(fi_close(&s[i]->cq->fid));
  }
  CK(fi_close(&dom->fid)); CK(fi_close(&fab->fid));
  fi_freeinfo(info); fi_freeinfo(hints);
  printf("ok\n");
  return 0;
}
