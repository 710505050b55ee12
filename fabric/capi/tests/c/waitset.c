// Wait sets and poll sets over one provider (fi_poll(3)): two RDM endpoints whose
// CQs (and a counter, and an EQ) are opened with FI_WAIT_SET on one wait set,
// served by fi_wait alone from one thread; FI_GETWAIT's descriptor after
// fi_trywait; a poll set naming exactly the members with something to read;
// bad input and close ordering. Prints "ok". usage: waitset PROV
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static int ctx_a, ctx_b, ctx_cntr, ctx_eq; // their addresses are the members' contexts
static struct fid_cq *cqa, *cqb;
static int sent_a, recvd_b, sent_b, recvd_a;

// Read every completion of both queues, counting them by their op_context.
static void drain(void) {
  struct fi_cq_entry e[8];
  for (int q = 0; q < 2; q++) {
    ssize_t n;
    while ((n = fi_cq_read(q ? cqb : cqa, e, 8)) > 0)
      for (ssize_t i = 0; i < n; i++) {
        long c = (long)e[i].op_context;
        if (c == 1) sent_a++; else if (c == 2) recvd_b++; else if (c == 3) sent_b++; else if (c == 4) recvd_a++;
      }
    if (n != -FI_EAGAIN) { fprintf(stderr, "cq read %zd\n", n); exit(1); }
  }
}

// Sorted contexts of one fi_poll, as a bit mask: 1 a, 2 b, 4 counter.
static int polled(struct fid_poll *ps) {
  void *c[8]; int n = fi_poll(ps, c, 8), m = 0;
  if (n < 0) { fprintf(stderr, "fi_poll %d\n", n); exit(1); }
  for (int i = 0; i < n; i++) m |= c[i] == &ctx_a ? 1 : c[i] == &ctx_b ? 2 : c[i] == &ctx_cntr ? 4 : 64;
  return m;
}

int main(int argc, char **argv) {
  if (argc < 2) return 1;
  struct fi_info *hints = fi_allocinfo(), *info;
  hints->ep_attr->type = FI_EP_RDM; hints->caps = FI_MSG; hints->fabric_attr->prov_name = strdup(argv[1]);
  CK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, hints, &info));
  struct fid_fabric *fab; struct fid_domain *dom;
  CK(fi_fabric(info->fabric_attr, &fab, NULL)); CK(fi_domain(fab, info, &dom, NULL));

  // Bad input.
  struct fid_wait *ws; struct fi_wait_attr wa = { .wait_obj = FI_WAIT_FD };
  EXPECT(fi_wait_open(fab, NULL, &ws), -FI_EINVAL);
  EXPECT(fi_wait_open(fab, &wa, NULL), -FI_EINVAL);
  struct fi_wait_attr bad = { .wait_obj = FI_WAIT_FD, .flags = 1 };
  EXPECT(fi_wait_open(fab, &bad, &ws), -FI_EINVAL);
  bad.flags = 0; bad.wait_obj = 99;
  EXPECT(fi_wait_open(fab, &bad, &ws), -FI_EINVAL);
  struct fid_poll *ps; struct fi_poll_attr pa = { .flags = 1 };
  EXPECT(fi_poll_open(dom, &pa, &ps), -FI_EINVAL);
  struct fi_cq_attr orphan = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_SET, .wait_set = NULL };
  struct fid_cq *cqx;
  EXPECT(fi_cq_open(dom, &orphan, &cqx, NULL), -FI_EINVAL);

  // The wait set and its members.
  CK(fi_wait_open(fab, &wa, &ws));
  int fd = -1; CK(fi_control(&ws->fid, FI_GETWAIT, &fd));
  if (fd < 0) { fprintf(stderr, "FI_GETWAIT gave %d\n", fd); return 1; }
  struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_SET, .wait_set = ws };
  CK(fi_cq_open(dom, &ca, &cqa, &ctx_a)); CK(fi_cq_open(dom, &ca, &cqb, &ctx_b));
  struct fi_cntr_attr na = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_SET, .wait_set = ws };
  struct fid_cntr *cntr; CK(fi_cntr_open(dom, &na, &cntr, &ctx_cntr));
  struct fi_eq_attr ea = { .wait_obj = FI_WAIT_SET, .wait_set = ws };
  struct fid_eq *eq; CK(fi_eq_open(fab, &ea, &eq, &ctx_eq));
  struct fid_ep *a, *b; struct fid_av *ava, *avb; struct fi_av_attr aa = { 0 };
  CK(fi_av_open(dom, &aa, &ava, NULL)); CK(fi_av_open(dom, &aa, &avb, NULL));
  CK(fi_endpoint(dom, info, &a, NULL)); CK(fi_endpoint(dom, info, &b, NULL));
  CK(fi_ep_bind(a, &cqa->fid, FI_TRANSMIT | FI_RECV)); CK(fi_ep_bind(a, &ava->fid, 0));
  CK(fi_ep_bind(b, &cqb->fid, FI_TRANSMIT | FI_RECV)); CK(fi_ep_bind(b, &avb->fid, 0));
  CK(fi_ep_bind(b, &cntr->fid, FI_RECV));
  CK(fi_enable(a)); CK(fi_enable(b));
  char na_[64], nb_[64]; size_t la = sizeof na_, lb = sizeof nb_;
  CK(fi_getname(&a->fid, na_, &la)); CK(fi_getname(&b->fid, nb_, &lb));
  fi_addr_t to_b, to_a;
  EXPECT(fi_av_insert(ava, nb_, 1, &to_b, 0, NULL), 1); EXPECT(fi_av_insert(avb, na_, 1, &to_a, 0, NULL), 1);

  // Idle: time-outs. A wait set with members does not close.
  EXPECT(fi_wait(ws, 0), -FI_ETIMEDOUT);
  EXPECT(fi_wait(ws, 100), -FI_ETIMEDOUT);
  EXPECT(fi_close(&ws->fid), -FI_EBUSY);

  // a to b, then b to a, with fi_wait the only thing driving progress.
  static char bufb[4096], bufa[4096], msg[4096];
  for (int i = 0; i < (int)sizeof msg; i++) msg[i] = (char)(i * 7 + 1);
  CK(fi_recv(b, bufb, sizeof bufb, NULL, FI_ADDR_UNSPEC, (void *)2));
  CK(fi_send(a, msg, sizeof msg, NULL, to_b, (void *)1));
  for (int rounds = 0; !(sent_a && recvd_b); rounds++) {
    if (rounds > 1000) { fprintf(stderr, "a to b: never done\n"); return 1; }
    CK(fi_wait(ws, 10000)); drain();
  }
  if (memcmp(bufb, msg, sizeof msg)) { fprintf(stderr, "a to b: wrong data\n"); return 1; }
  if (fi_cntr_read(cntr) != 1) { fprintf(stderr, "counter %lu\n", (unsigned long)fi_cntr_read(cntr)); return 1; }
  CK(fi_recv(a, bufa, sizeof bufa, NULL, FI_ADDR_UNSPEC, (void *)4));
  CK(fi_send(b, msg, sizeof msg, NULL, to_a, (void *)3));
  for (int rounds = 0; !(sent_b && recvd_a); rounds++) {
    if (rounds > 1000) { fprintf(stderr, "b to a: never done\n"); return 1; }
    CK(fi_wait(ws, 10000)); drain();
  }
  if (memcmp(bufa, msg, sizeof msg)) { fprintf(stderr, "b to a: wrong data\n"); return 1; }
  // The counter's change (two sends) may wake the set once more; then it is idle.
  for (int rounds = 0; fi_wait(ws, 100) == 0; rounds++)
    if (rounds > 3) { fprintf(stderr, "an idle set keeps waking\n"); return 1; }

  // FI_GETWAIT's descriptor after fi_trywait: readable once b's message arrives.
  struct fid *fids[1] = { &ws->fid };
  CK(fi_trywait(fab, fids, 1));
  CK(fi_recv(a, bufa, sizeof bufa, NULL, FI_ADDR_UNSPEC, (void *)4));
  CK(fi_send(b, msg, 64, NULL, to_a, (void *)3));
  struct pollfd pfd = { .fd = fd, .events = POLLIN };
  EXPECT(poll(&pfd, 1, 10000), 1);
  for (int rounds = 0; recvd_a < 2 || sent_b < 2; rounds++) {
    if (rounds > 1000) { fprintf(stderr, "after poll: never done\n"); return 1; }
    CK(fi_wait(ws, 10000)); drain();
  }

  // The poll set: exactly the members with something to read.
  struct fi_poll_attr pok = { 0 };
  CK(fi_poll_open(dom, &pok, &ps));
  CK(fi_poll_add(ps, &cqa->fid, 0)); CK(fi_poll_add(ps, &cqb->fid, 0)); CK(fi_poll_add(ps, &cntr->fid, 0));
  EXPECT(fi_poll_add(ps, &eq->fid, 0), -FI_EINVAL);
  EXPECT(fi_poll_add(ps, NULL, 0), -FI_EINVAL);
  void *one[1];
  EXPECT(fi_poll(ps, NULL, 1), -FI_EINVAL);
  EXPECT(fi_poll(ps, one, -1), -FI_EINVAL);
  EXPECT(polled(ps), 0);
  CK(fi_recv(b, bufb, sizeof bufb, NULL, FI_ADDR_UNSPEC, (void *)2));
  CK(fi_send(a, msg, 64, NULL, to_b, (void *)1));
  int seen = 0;
  for (long spins = 0; (seen & 7) != 7; spins++) {
    if (spins > 20000000) { fprintf(stderr, "poll set: saw only %d\n", seen); return 1; }
    seen |= polled(ps);
    if (seen & 64) { fprintf(stderr, "poll set: a context of no member\n"); return 1; }
  }
  EXPECT(polled(ps), 3);  // both queues hold a completion; the counter's change was reported
  struct fi_cq_entry e;
  EXPECT(fi_cq_read(cqa, &e, 1), 1);
  EXPECT(polled(ps), 2);
  EXPECT(fi_cq_read(cqb, &e, 1), 1);
  EXPECT(polled(ps), 0);
  CK(fi_cntr_add(cntr, 1));
  EXPECT(polled(ps), 4);
  EXPECT(polled(ps), 0);
  CK(fi_poll_del(ps, &cqa->fid, 0));
  CK(fi_close(&ps->fid));  // a poll set closes with members

  // Members close first, then the wait set.
  CK(fi_close(&a->fid)); CK(fi_close(&b->fid));
  CK(fi_close(&cqa->fid)); CK(fi_close(&cqb->fid)); CK(fi_close(&cntr->fid));
  EXPECT(fi_close(&ws->fid), -FI_EBUSY);  // the EQ is still open
  CK(fi_close(&eq->fid));
  CK(fi_close(&ws->fid));
  CK(fi_close(&ava->fid)); CK(fi_close(&avb->fid));
  CK(fi_close(&dom->fid)); CK(fi_close(&fab->fid));
  fi_freeinfo(info); fi_freeinfo(hints);
  printf("ok\n"); return 0;
}
