// N RDM endpoints in one process, each sends one tagged message to every other at once;
// all completion queues driven round-robin (receives directed at their source).
// Prints "ok". usage: alltoall PROV N ROUNDS (N at most 16)
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#define MAXN 16
int main(int argc, char **argv) {
  if (argc < 4) return 1;
  const char *prov = argv[1]; int n = atoi(argv[2]), rounds = atoi(argv[3]);
  if (n < 2 || n > MAXN) return 1;
  struct fi_info *hints = fi_allocinfo(), *info;
  hints->ep_attr->type = FI_EP_RDM; hints->caps = FI_TAGGED | FI_DIRECTED_RECV; hints->fabric_attr->prov_name = strdup(prov);
  CK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, hints, &info));
  struct fid_fabric *fab; struct fid_domain *dom; CK(fi_fabric(info->fabric_attr, &fab, NULL)); CK(fi_domain(fab, info, &dom, NULL));
  struct fid_ep *ep[MAXN]; struct fid_cq *cq[MAXN]; struct fid_av *av[MAXN]; char name[MAXN][64]; size_t len[MAXN]; fi_addr_t peer[MAXN][MAXN];
  for (int i = 0; i < n; i++) {
    struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED }; struct fi_av_attr aa = { 0 };
    CK(fi_cq_open(dom, &ca, &cq[i], NULL)); CK(fi_av_open(dom, &aa, &av[i], NULL)); CK(fi_endpoint(dom, info, &ep[i], NULL));
    CK(fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV)); CK(fi_ep_bind(ep[i], &av[i]->fid, 0)); CK(fi_enable(ep[i]));
    len[i] = 64; CK(fi_getname(&ep[i]->fid, name[i], &len[i]));
  }
  for (int i = 0; i < n; i++) for (int j = 0; j < n; j++) if (fi_av_insert(av[i], name[j], 1, &peer[i][j], 0, NULL) != 1) { fprintf(stderr, "insert\n"); return 1; }
  static char buf[MAXN][MAXN][64]; static char out[64] = "x";
  for (int r = 0; r < rounds; r++) {
    int left = 0;
    for (int i = 0; i < n; i++) for (int j = 0; j < n; j++) if (i != j) { CK(fi_trecv(ep[i], buf[i][j], 64, NULL, peer[i][j], 5, 0, NULL)); left++; }
    for (int i = 0; i < n; i++) for (int j = 0; j < n; j++) if (i != j) { while (fi_tsend(ep[i], out, 8, NULL, peer[i][j], 5, NULL) == -FI_EAGAIN) { struct fi_cq_tagged_entry e; for (int k = 0; k < n; k++) if (fi_cq_read(cq[k], &e, 1) == 1) left--; } left++; }
    long spins = 0;
    while (left > 0) {
      struct fi_cq_tagged_entry e[8];
      for (int k = 0; k < n; k++) { ssize_t got = fi_cq_read(cq[k], e, 8); if (got > 0) left -= got; else if (got != -FI_EAGAIN) { struct fi_cq_err_entry ee = {0}; fi_cq_readerr(cq[k], &ee, 0); fprintf(stderr, "err %d\n", ee.err); return 1; } }
      if (++spins > 20000000) { fprintf(stderr, "round %d: %d completions missing\n", r, left); return 2; }
    }
  }
  printf("ok\n"); return 0;
}
