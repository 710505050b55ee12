// Multicast through the C ABI (fi_cm(3) fi_join, fi_mc_addr; fi_msg(3)
// FI_MULTICAST), over one provider's DGRAM endpoints in one process: a
// receiver bound to the wildcard address joins a group at its own port and
// hears FI_JOIN_COMPLETE on its event queue; a sender joins too and sends to
// fi_mc_addr() with FI_MULTICAST, and from an endpoint whose tx_attr.op_flags
// has FI_MULTICAST with a plain fi_send; once the receiver closes its fid_mc
// (leaves), the group's datagrams no longer reach it. Bad input answers
// -FI_EINVAL. Prints "ok" at the end ("multicast: absent" first when no entry
// offers FI_MULTICAST, "multicast: refused ..." when the kernel refuses to join
// or send on this host); exits 1 with the line and values of the first failed
// check.
// usage: multicast PROVIDER
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "check.h"


static struct fid_fabric *fab;
static struct fid_domain *dom;

struct side { struct fid_ep *ep; struct fid_cq *cq; struct fid_av *av; struct fid_eq *eq; };

// An endpoint of `info`, named `name` (when not NULL) before it is enabled.
static void mk(struct side *s, struct fi_info *info, struct sockaddr_in *name) {
  struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_UNSPEC };
  struct fi_av_attr aa = { .type = FI_AV_MAP };
  struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
  CK(fi_cq_open(dom, &ca, &s->cq, NULL));
  CK(fi_av_open(dom, &aa, &s->av, NULL));
  CK(fi_eq_open(fab, &ea, &s->eq, NULL));
  CK(fi_endpoint(dom, info, &s->ep, NULL));
  CK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
  CK(fi_ep_bind(s->ep, &s->av->fid, 0));
  CK(fi_ep_bind(s->ep, &s->eq->fid, 0));
  if (name) CK(fi_setname(&s->ep->fid, name, sizeof *name));
  CK(fi_enable(s->ep));
}

static void rm(struct side *s) {
  CK(fi_close(&s->ep->fid));
  CK(fi_close(&s->eq->fid));
  CK(fi_close(&s->av->fid));
  CK(fi_close(&s->cq->fid));
}

// A receive completion on `rx` within `secs` (1), or none (0); the sender's
// queue is driven too.
static int arrives(struct side *rx, struct side *tx, double secs, struct fi_cq_msg_entry *e) {
  double end = now() + secs;
  while (now() < end) {
    ssize_t r = fi_cq_read(rx->cq, e, 1);
    if (r == 1) return 1;
    EXPECT(r, -FI_EAGAIN);
    struct fi_cq_msg_entry x;
    (void)fi_cq_read(tx->cq, &x, 0);
  }
  return 0;
}

// The send completion of `s` (sends complete once on the wire).
static void sent(struct side *s) {
  struct fi_cq_msg_entry e;
  double end = now() + 30;
  while (now() < end)
    if (fi_cq_read(s->cq, &e, 1) == 1) return;
  fprintf(stderr, "no send completion\n");
  exit(1);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *prov = argc > 1 ? argv[1] : "udp";
  struct fi_info *hints = fi_allocinfo(), *info;
  hints->ep_attr->type = FI_EP_DGRAM;
  hints->caps = FI_MSG | FI_MULTICAST;
  hints->addr_format = FI_SOCKADDR_IN;
  hints->fabric_attr->prov_name = strdup(prov);
  if (fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, hints, &info)) {
    printf("multicast: absent\nok\n");
    return 0;
  }
  CK(fi_fabric(info->fabric_attr, &fab, NULL));
  CK(fi_domain(fab, info, &dom, NULL));
  // Receivers of a group bind to the wildcard address (and the group's port).
  struct sockaddr_in any = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
  struct side rx, tx;
  mk(&rx, info, &any);
  mk(&tx, info, NULL);
  struct sockaddr_in me;
  size_t ml = sizeof me;
  CK(fi_getname(&rx.ep->fid, &me, &ml));
  struct sockaddr_in group = { .sin_family = AF_INET, .sin_port = me.sin_port };
  group.sin_addr.s_addr = htonl(0xefff0000u | ((getpid() % 250) << 8) | (ntohs(me.sin_port) % 250 + 1));

  // Bad input.
  struct fid_mc *mc = (struct fid_mc *)1;
  EXPECT(fi_join(rx.ep, NULL, 0, &mc, NULL), -FI_EINVAL);
  EXPECT(mc, NULL);
  struct sockaddr_in unicast = group;
  unicast.sin_addr.s_addr = htonl(0x0a010203);
  EXPECT(fi_join(rx.ep, &unicast, 0, &mc, NULL), -FI_EINVAL);
  EXPECT(fi_join(rx.ep, &group, 1ULL << 40, &mc, NULL), -FI_EINVAL);

  // The receiver joins: FI_JOIN_COMPLETE names the group and its context.
  int gctx;
  long r = fi_join(rx.ep, &group, FI_RECV, &mc, &gctx);
  if (r) {
    printf("multicast: refused (the kernel refuses to join: %s)\nok\n", fi_strerror((int)-r));
    return 0;
  }
  uint32_t ev = 0;
  struct fi_eq_entry ent;
  EXPECT(fi_eq_read(rx.eq, &ev, &ent, sizeof ent, 0), sizeof ent);
  EXPECT(ev, FI_JOIN_COMPLETE);
  EXPECT(ent.fid, &mc->fid);
  EXPECT(ent.context, &gctx);
  EXPECT(mc->fid.context, &gctx);

  // The sender joins too; FI_MULTICAST to fi_mc_addr().
  struct fid_mc *tmc;
  CK(fi_join(tx.ep, &group, FI_SEND, &tmc, NULL));
  char in[64] = { 0 };
  CK(fi_recv(rx.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, NULL));
  struct iovec iov = { "to the group", 13 };
  struct fi_msg m = { .msg_iov = &iov, .iov_count = 1, .addr = fi_mc_addr(tmc) };
  r = fi_sendmsg(tx.ep, &m, FI_MULTICAST | FI_COMPLETION);
  if (r) {
    printf("multicast: refused (the kernel refuses multicast sends: %s)\nok\n", fi_strerror((int)-r));
    return 0;
  }
  sent(&tx);
  struct fi_cq_msg_entry e;
  EXPECT(arrives(&rx, &tx, 30, &e), 1);
  EXPECT(strcmp(in, "to the group"), 0);
  printf("join and send: ok\n");

  // An endpoint whose tx_attr.op_flags has FI_MULTICAST: plain sends go to
  // groups.
  struct fi_info *minfo = fi_dupinfo(info);
  minfo->tx_attr->op_flags |= FI_MULTICAST;
  struct side mx;
  mk(&mx, minfo, NULL);
  struct fid_mc *mmc;
  CK(fi_join(mx.ep, &group, FI_SEND, &mmc, NULL));
  memset(in, 0, sizeof in);
  CK(fi_recv(rx.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, NULL));
  CK(fi_send(mx.ep, "by default", 11, NULL, fi_mc_addr(mmc), NULL));
  sent(&mx);
  EXPECT(arrives(&rx, &mx, 30, &e), 1);
  EXPECT(strcmp(in, "by default"), 0);
  CK(fi_inject(mx.ep, "injected", 9, fi_mc_addr(mmc)));
  memset(in, 0, sizeof in);
  CK(fi_recv(rx.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, NULL));
  EXPECT(arrives(&rx, &mx, 30, &e), 1);
  EXPECT(strcmp(in, "injected"), 0);
  printf("FI_MULTICAST by default: ok\n");

  // Left: the group's datagrams no longer arrive (the senders are still
  // members, so they do reach the host).
  CK(fi_close(&mc->fid));
  memset(in, 0, sizeof in);
  CK(fi_recv(rx.ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, NULL));
  CK(fi_sendmsg(tx.ep, &m, FI_MULTICAST | FI_COMPLETION));
  sent(&tx);
  EXPECT(arrives(&rx, &tx, 0.5, &e), 0);
  printf("leave: ok\n");

  CK(fi_close(&tmc->fid));
  CK(fi_close(&mmc->fid));
  rm(&mx);
  rm(&tx);
  rm(&rx);
  CK(fi_close(&dom->fid));
  CK(fi_close(&fab->fid));
  fi_freeinfo(minfo);
  fi_freeinfo(info);
  fi_freeinfo(hints);
  printf("ok\n");
  return 0;
}
