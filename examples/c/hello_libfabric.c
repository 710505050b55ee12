/* A C program written for libfabric, run over fabric's libfabric.so.1.
 *
 * One RDM endpoint sends a message to itself: fi_getinfo, the objects, an
 * address vector holding our own address, a receive, a send, and both
 * completions read from the completion queue. Compiled against any
 * libfabric's headers (Debian's libfabric-dev) and linked with fabric's
 * library:
 *
 *   cc -o hello_libfabric examples/c/hello_libfabric.c <target>/debug/libfabric.so.1
 *   LD_LIBRARY_PATH=<target>/debug ./hello_libfabric [provider [local address]]
 *
 * It prints the provider's name and the message received, and exits 0 when
 * the received bytes are the ones sent.
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                         \
  do {                                                                      \
    int ret_ = (int)(call);                                                 \
    if (ret_) {                                                             \
      fprintf(stderr, "%s: %d (%s)\n", #call, ret_, fi_strerror(-ret_));    \
      return 1;                                                             \
    }                                                                       \
  } while (0)

int main(int argc, char **argv) {
  struct fi_info *hints = fi_allocinfo(), *info = NULL;
  struct fid_fabric *fabric;
  struct fid_domain *domain;
  struct fid_cq *cq;
  struct fid_av *av;
  struct fid_ep *ep;
  struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
  struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
  char name[256], rx[64];
  const char msg[] = "hello from C";
  size_t len = sizeof name;
  fi_addr_t me;
  int done = 0;

  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG;
  hints->mode = FI_CONTEXT;
  hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  if (argc > 1) hints->fabric_attr->prov_name = strdup(argv[1]);
  /* The local address: loopback, or the one given (an RDMA device has none on lo). */
  CHECK(fi_getinfo(FI_VERSION(1, 17), argc > 2 ? argv[2] : "127.0.0.1", NULL, FI_SOURCE, hints, &info));
  printf("provider %s\n", info->fabric_attr->prov_name);

  CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
  CHECK(fi_domain(fabric, info, &domain, NULL));
  CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
  CHECK(fi_av_open(domain, &av_attr, &av, NULL));
  CHECK(fi_endpoint(domain, info, &ep, NULL));
  CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
  CHECK(fi_ep_bind(ep, &av->fid, 0));
  CHECK(fi_enable(ep));

  CHECK(fi_getname(&ep->fid, name, &len));
  if (fi_av_insert(av, name, 1, &me, 0, NULL) != 1) {
    fprintf(stderr, "fi_av_insert failed\n");
    return 1;
  }

  struct fi_context rx_ctx, tx_ctx;
  memset(rx, 0, sizeof rx);
  CHECK(fi_recv(ep, rx, sizeof rx, NULL, FI_ADDR_UNSPEC, &rx_ctx));
  CHECK(fi_send(ep, msg, sizeof msg, NULL, me, &tx_ctx));

  time_t start = time(NULL);
  while (done < 2) {
    struct fi_cq_tagged_entry e;
    ssize_t n = fi_cq_read(cq, &e, 1);
    if (n == 1) {
      if (e.op_context == &rx_ctx) {
        if (e.len != sizeof msg || memcmp(rx, msg, sizeof msg) != 0) {
          fprintf(stderr, "received %zu bytes: %.*s\n", e.len, (int)e.len, rx);
          return 1;
        }
        printf("received \"%s\"\n", rx);
      }
      done++;
    } else if (n != -FI_EAGAIN) {
      fprintf(stderr, "fi_cq_read: %zd (%s)\n", n, fi_strerror((int)-n));
      return 1;
    } else if (time(NULL) - start > 30) {
      fprintf(stderr, "no completion within 30 s\n");
      return 1;
    }
  }

  CHECK(fi_close(&ep->fid));
  CHECK(fi_close(&av->fid));
  CHECK(fi_close(&cq->fid));
  CHECK(fi_close(&domain->fid));
  CHECK(fi_close(&fabric->fid));
  fi_freeinfo(info);
  fi_freeinfo(hints);
  return 0;
}
