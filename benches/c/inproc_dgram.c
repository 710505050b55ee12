/* The in-process round trip of ../shared/tools/inproc, over datagram endpoints:
 * one thread, two FI_EP_DGRAM endpoints of one domain; A sends SIZE bytes (fi_send)
 * to B, B answers, every completion is read. Arguments as lf_inproc's (PROVIDER ITERS
 * SIZE), so instr.sh counts it the same way; benches/instr.sh builds it against
 * libfabric's headers and runs it over our libfabric.so.1 and over libfabric's.
 * Loopback does not drop a datagram when one is in flight and its receive is posted
 * first; should one be lost all the same, the alarm ends the run instead of a hang. */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void check(int rc, const char *what)
{
	if (rc) {
		fprintf(stderr, "%s: %s\n", what, fi_strerror(rc < 0 ? -rc : rc));
		exit(1);
	}
}

struct end {
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fid_av *av;
	fi_addr_t to;
	char *buf;
	struct fi_context rctx, sctx;
};

static void open_end(struct fid_domain *dom, struct fi_info *fi, struct end *e, size_t size)
{
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_CONTEXT, .size = 64 };
	struct fi_av_attr av_attr = { .type = FI_AV_UNSPEC };

	check(fi_cq_open(dom, &cq_attr, &e->cq, NULL), "fi_cq_open");
	check(fi_av_open(dom, &av_attr, &e->av, NULL), "fi_av_open");
	check(fi_endpoint(dom, fi, &e->ep, NULL), "fi_endpoint");
	check(fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV), "bind cq");
	check(fi_ep_bind(e->ep, &e->av->fid, 0), "bind av");
	check(fi_enable(e->ep), "fi_enable");
	e->buf = calloc(1, size + 1);
}

/* Read both queues until x has given nx completions and y ny. */
static void reap(struct end *x, int nx, struct end *y, int ny)
{
	struct fi_cq_entry c;
	while (nx > 0 || ny > 0) {
		ssize_t r = fi_cq_read(x->cq, &c, 1);
		if (r == 1)
			nx--;
		else if (r != -FI_EAGAIN)
			check((int)r, "fi_cq_read");
		r = fi_cq_read(y->cq, &c, 1);
		if (r == 1)
			ny--;
		else if (r != -FI_EAGAIN)
			check((int)r, "fi_cq_read");
	}
}

/* One leg: `to` posts its receive, `from` sends, both completions are read. */
static void leg(struct end *from, struct end *to, size_t size)
{
	check((int)fi_recv(to->ep, to->buf, size, NULL, FI_ADDR_UNSPEC, &to->rctx), "fi_recv");
	for (;;) {
		ssize_t r = fi_send(from->ep, from->buf, size, NULL, from->to, &from->sctx);
		if (r == 0)
			break;
		if (r != -FI_EAGAIN)
			check((int)r, "fi_send");
		struct fi_cq_entry c;
		(void)fi_cq_read(from->cq, &c, 0);
	}
	reap(from, 1, to, 1);
}

int main(int argc, char **argv)
{
	const char *prov = argc > 1 ? argv[1] : "udp";
	long iters = argc > 2 ? atol(argv[2]) : 10000;
	size_t size = argc > 3 ? (size_t)atol(argv[3]) : 64;
	struct fi_info *hints = fi_allocinfo(), *fi;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct end a = { 0 }, b = { 0 };
	char name_a[128], name_b[128];
	size_t len_a = sizeof name_a, len_b = sizeof name_b;
	struct timespec t0, t1;

	alarm(600);
	hints->ep_attr->type = FI_EP_DGRAM;
	hints->caps = FI_MSG;
	hints->mode = FI_CONTEXT;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->fabric_attr->prov_name = strdup(prov);
	check(fi_getinfo(FI_VERSION(1, 9), "127.0.0.1", NULL, FI_SOURCE, hints, &fi), "fi_getinfo");
	check(fi_fabric(fi->fabric_attr, &fab, NULL), "fi_fabric");
	check(fi_domain(fab, fi, &dom, NULL), "fi_domain");
	open_end(dom, fi, &a, size);
	open_end(dom, fi, &b, size);
	check(fi_getname(&a.ep->fid, name_a, &len_a), "fi_getname");
	check(fi_getname(&b.ep->fid, name_b, &len_b), "fi_getname");
	if (fi_av_insert(a.av, name_b, 1, &a.to, 0, NULL) != 1 || fi_av_insert(b.av, name_a, 1, &b.to, 0, NULL) != 1) {
		fprintf(stderr, "fi_av_insert failed\n");
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < iters; i++) {
		leg(&a, &b, size);
		leg(&b, &a, size);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%s dgram size %zu: %.3f usec per round trip (%ld iterations)\n", prov, size,
	       ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / iters, iters);
	return 0;
}
