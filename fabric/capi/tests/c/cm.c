// Connection management through the C ABI, as fi_cm(3), fi_eq(3) and
// fi_endpoint(3) describe it, over one provider's MSG endpoints in one process:
// a passive endpoint at an address of our choosing (fi_setname), a connection
// request carrying data (FI_CONNREQ with its fi_info and handle), fi_reject
// with data (an FI_ECONNREFUSED error event whose err_data is that data),
// fi_accept with data (FI_CONNECTED on both sides, the data on the active
// side), fi_getname/fi_getpeer agreeing across the connection, messages both
// ways, fi_shutdown (FI_SHUTDOWN at the peer), FI_OPT_CM_DATA_SIZE, and
// fi_eq_sread timing out. Prints "ok" at the end; exits 1 with the line and
// values of the first failed check.
// usage: cm PROVIDER
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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "check.h"


static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_eq *seq, *ceq;  // server's and client's event queues
static struct fid_cq *scq, *ccq;

// Drive both sides: a peek at each event queue and a read of no completions
// from each completion queue consume nothing.
static void progress(void) {
  uint32_t ev;
  char buf[sizeof(struct fi_eq_cm_entry) + 256];
  (void)fi_eq_read(seq, &ev, buf, sizeof buf, FI_PEEK);
  (void)fi_eq_read(ceq, &ev, buf, sizeof buf, FI_PEEK);
  struct fi_cq_msg_entry e;
  (void)fi_cq_read(scq, &e, 0);
  (void)fi_cq_read(ccq, &e, 0);
}

// The next event of `eq`, which must be `want`: returns the bytes read.
static ssize_t event(struct fid_eq *eq, uint32_t want, void *buf, size_t len) {
  double end = now() + 30;
  while (now() < end) {
    uint32_t ev = 0;
    ssize_t r = fi_eq_read(eq, &ev, buf, len, 0);
    if (r > 0) {
      if (ev != want) { fprintf(stderr, "event %u where %u was due\n", ev, want); exit(1); }
      return r;
    }
    if (r == -FI_EAVAIL) {
      struct fi_eq_err_entry ee = { 0 };
      fi_eq_readerr(eq, &ee, 0);
      fprintf(stderr, "error event %d (%s) where event %u was due\n", ee.err, fi_strerror(ee.err), want);
      exit(1);
    }
    EXPECT(r, -FI_EAGAIN);
    progress();
  }
  fprintf(stderr, "no event %u in 30 s\n", want);
  exit(1);
}

// The next entry of `eq` must be an error: read it into `ee`.
static void error_event(struct fid_eq *eq, struct fi_eq_err_entry *ee) {
  double end = now() + 30;
  char buf[sizeof(struct fi_eq_cm_entry) + 256];
  while (now() < end) {
    uint32_t ev = 0;
    ssize_t r = fi_eq_read(eq, &ev, buf, sizeof buf, 0);
    if (r == -FI_EAVAIL) { EXPECT(fi_eq_readerr(eq, ee, 0), sizeof *ee); return; }
    if (r > 0) { fprintf(stderr, "event %u where an error was due\n", ev); exit(1); }
    EXPECT(r, -FI_EAGAIN);
    progress();
  }
  fprintf(stderr, "no error event in 30 s\n");
  exit(1);
}

// One message completion from `cq`.
static void completion(struct fid_cq *cq, struct fi_cq_msg_entry *e) {
  double end = now() + 30;
  while (now() < end) {
    ssize_t r = fi_cq_read(cq, e, 1);
    if (r == 1) return;
    EXPECT(r, -FI_EAGAIN);
    progress();
  }
  fprintf(stderr, "no completion in 30 s\n");
  exit(1);
}

// An active endpoint for `info`, bound to `eq` and `cq`, enabled.
static struct fid_ep *active(struct fi_info *info, struct fid_eq *eq, struct fid_cq *cq) {
  struct fid_ep *ep;
  CK(fi_endpoint(dom, info, &ep, NULL));
  CK(fi_ep_bind(ep, &eq->fid, 0));
  CK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
  CK(fi_enable(ep));
  return ep;
}

// A TCP port of 127.0.0.1 that was free a moment ago.
static int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t l = sizeof a;
  CK(bind(s, (struct sockaddr *)&a, sizeof a));
  CK(getsockname(s, (struct sockaddr *)&a, &l));
  close(s);
  return ntohs(a.sin_port);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *prov = argc > 1 ? argv[1] : "tcp";
  struct fi_info *hints = fi_allocinfo(), *info;
  hints->ep_attr->type = FI_EP_MSG;
  hints->caps = FI_MSG;
  hints->fabric_attr->prov_name = strdup(prov);
  if (fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, hints, &info)) {
    printf("msg: absent\nok\n");
    return 0;
  }
  CK(fi_fabric(info->fabric_attr, &fab, NULL));
  CK(fi_domain(fab, info, &dom, NULL));
  struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
  CK(fi_eq_open(fab, &ea, &seq, NULL));
  CK(fi_eq_open(fab, &ea, &ceq, NULL));
  struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_UNSPEC };
  CK(fi_cq_open(dom, &ca, &scq, NULL));
  CK(fi_cq_open(dom, &ca, &ccq, NULL));

  // An empty event queue: a blocking read times out with -FI_EAGAIN.
  uint32_t ev;
  char buf[sizeof(struct fi_eq_cm_entry) + 256];
  EXPECT(fi_eq_sread(seq, &ev, buf, sizeof buf, 20, 0), -FI_EAGAIN);

  // The passive endpoint at a port we chose.
  struct fid_pep *pep;
  CK(fi_passive_ep(fab, info, &pep, NULL));
  CK(fi_pep_bind(pep, &seq->fid, 0));
  struct sockaddr_in want = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = htons(free_port()) };
  CK(fi_setname(&pep->fid, &want, sizeof want));
  CK(fi_listen(pep));
  struct sockaddr_in got;
  size_t gl = sizeof got;
  CK(fi_getname(&pep->fid, &got, &gl));
  EXPECT(got.sin_port, want.sin_port);
  size_t cm_size = 0, sl = sizeof cm_size;
  CK(fi_getopt(&pep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &cm_size, &sl));
  TRUE(cm_size >= 16);
  char service[16];
  snprintf(service, sizeof service, "%d", ntohs(got.sin_port));
  struct fi_info *cinfo;
  CK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", service, 0, hints, &cinfo));
  TRUE(cinfo->dest_addr != NULL);

  // A request with data, rejected with data.
  struct fid_ep *cep = active(cinfo, ceq, ccq);
  char *too_much = calloc(1, cm_size + 1);
  EXPECT(fi_connect(cep, cinfo->dest_addr, too_much, cm_size + 1), -FI_EINVAL);
  free(too_much);
  CK(fi_connect(cep, cinfo->dest_addr, "first", 6));
  struct fi_eq_cm_entry *cm = (struct fi_eq_cm_entry *)buf;
  ssize_t n = event(seq, FI_CONNREQ, buf, sizeof buf);
  EXPECT(n, sizeof *cm + 6);
  EXPECT(cm->fid, &pep->fid);
  TRUE(cm->info != NULL && cm->info->handle != NULL);
  EXPECT(strcmp((char *)cm->data, "first"), 0);
  CK(fi_reject(pep, cm->info->handle, "no", 3));
  fi_freeinfo(cm->info);
  struct fi_eq_err_entry ee = { 0 };
  error_event(ceq, &ee);
  EXPECT(ee.err, FI_ECONNREFUSED);
  EXPECT(ee.fid, &cep->fid);
  EXPECT(ee.err_data_size, 3);
  EXPECT(strcmp((char *)ee.err_data, "no"), 0);
  char text[128];
  TRUE(fi_eq_strerror(ceq, ee.prov_errno, ee.err_data, text, sizeof text) != NULL);
  CK(fi_close(&cep->fid));

  // Rejected again; this time the error data lands in a buffer of ours, cut
  // to its size (fi_eq(3), API 1.5 on).
  cep = active(cinfo, ceq, ccq);
  CK(fi_connect(cep, cinfo->dest_addr, "third", 6));
  n = event(seq, FI_CONNREQ, buf, sizeof buf);
  CK(fi_reject(pep, cm->info->handle, "nope", 5));
  fi_freeinfo(cm->info);
  char mine[2] = { 0, 0 };
  memset(&ee, 0, sizeof ee);
  ee.err_data = mine;
  ee.err_data_size = sizeof mine;
  error_event(ceq, &ee);
  EXPECT(ee.err, FI_ECONNREFUSED);
  EXPECT(ee.err_data, mine);
  EXPECT(ee.err_data_size, 2);
  EXPECT(mine[0], 'n');
  EXPECT(mine[1], 'o');
  CK(fi_close(&cep->fid));
  printf("reject: ok\n");

  // A request accepted with data.
  cep = active(cinfo, ceq, ccq);
  CK(fi_connect(cep, cinfo->dest_addr, "second", 7));
  n = event(seq, FI_CONNREQ, buf, sizeof buf);
  EXPECT(n, sizeof *cm + 7);
  EXPECT(strcmp((char *)cm->data, "second"), 0);
  struct fid_ep *sep = active(cm->info, seq, scq);
  fi_freeinfo(cm->info);
  CK(fi_accept(sep, "yes", 4));
  n = event(ceq, FI_CONNECTED, buf, sizeof buf);
  EXPECT(cm->fid, &cep->fid);
  EXPECT(n, sizeof *cm + 4);
  EXPECT(strcmp((char *)cm->data, "yes"), 0);
  n = event(seq, FI_CONNECTED, buf, sizeof buf);
  EXPECT(cm->fid, &sep->fid);
  printf("accept: ok\n");

  // Each side's name is the other's peer.
  char n1[128], n2[128];
  size_t l1 = sizeof n1, l2 = sizeof n2;
  CK(fi_getname(&cep->fid, n1, &l1));
  CK(fi_getpeer(sep, n2, &l2));
  EXPECT(l1, l2);
  EXPECT(memcmp(n1, n2, l1), 0);
  l1 = sizeof n1; l2 = sizeof n2;
  CK(fi_getname(&sep->fid, n1, &l1));
  CK(fi_getpeer(cep, n2, &l2));
  EXPECT(l1, l2);
  EXPECT(memcmp(n1, n2, l1), 0);
  printf("names: ok\n");

  // Messages both ways.
  char in[32] = { 0 }, in2[32] = { 0 };
  struct fi_cq_msg_entry e;
  struct fi_context c1, c2;
  CK(fi_recv(sep, in, sizeof in, NULL, 0, &c1));
  CK(fi_recv(cep, in2, sizeof in2, NULL, 0, &c2));
  CK(fi_send(cep, "to server", 10, NULL, 0, NULL));
  CK(fi_send(sep, "to client", 10, NULL, 0, NULL));
  for (int k = 0; k < 2; k++) {
    completion(scq, &e);
    if (e.flags & FI_RECV) { EXPECT(e.op_context, &c1); EXPECT(e.len, 10); }
    completion(ccq, &e);
    if (e.flags & FI_RECV) { EXPECT(e.op_context, &c2); EXPECT(e.len, 10); }
  }
  EXPECT(strcmp(in, "to server"), 0);
  EXPECT(strcmp(in2, "to client"), 0);
  printf("messages: ok\n");

  // Shut down from the client: the server hears of it.
  CK(fi_shutdown(cep, 0));
  n = event(seq, FI_SHUTDOWN, buf, sizeof buf);
  EXPECT(((struct fi_eq_entry *)buf)->fid, &sep->fid);
  printf("shutdown: ok\n");

  CK(fi_close(&cep->fid));
  CK(fi_close(&sep->fid));
  CK(fi_close(&pep->fid));
  CK(fi_close(&scq->fid));
  CK(fi_close(&ccq->fid));
  CK(fi_close(&seq->fid));
  CK(fi_close(&ceq->fid));
  CK(fi_close(&dom->fid));
  CK(fi_close(&fab->fid));
  fi_freeinfo(cinfo);
  fi_freeinfo(info);
  fi_freeinfo(hints);
  printf("ok\n");
  return 0;
}
