/* An MPI program that checks what Open MPI's ofi components ask of libfabric.
 *
 *   mpi_check pt2pt   point-to-point 0 B to 4 MiB with data checks, wildcard
 *                     receives, probe, iprobe, mprobe, Ssend, cancel; bcast,
 *                     allreduce, alltoall, barrier
 *   mpi_check osc     one-sided: Put, Get, Accumulate, Fetch_and_op,
 *                     Compare_and_swap, with data checks
 *   mpi_check probe_ssend  an Ssend found by Probe, then received
 *   mpi_check lat N   8-byte ping-pong between ranks 0 and 1: half round trip
 *
 * Every rank prints "rank R: ok" at the end, and first the libfabric.so.1 the
 * process mapped ("libfabric: PATH"), so the caller can see whose library ran.
 * Any failed check prints "FAIL ..." and aborts the job. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"

static int rank, size;

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "FAIL rank %d line %d: ", rank, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                        \
			fprintf(stderr, "\n");                               \
			MPI_Abort(MPI_COMM_WORLD, 2);                        \
		}                                                            \
	} while (0)

/* Byte i of message `seed`: every byte depends on offset and sender. */
static unsigned char pat(size_t i, int seed)
{
	uint64_t x = (uint64_t) i * 0x9E3779B97F4A7C15ull + (uint64_t) seed * 0xD6E8FEB86659FD93ull;
	return (unsigned char) (x >> 29 ^ x >> 7);
}

static void fill(unsigned char *b, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pat(i, seed);
}

static void check(const unsigned char *b, size_t n, int seed, const char *what)
{
	for (size_t i = 0; i < n; i++)
		CHECK(b[i] == pat(i, seed), "%s: byte %zu of %zu is %u, want %u", what, i, n, b[i], pat(i, seed));
}

static void pt2pt(void)
{
	const size_t max = 4 << 20;
	unsigned char *s = malloc(max), *r = malloc(max);
	int next = (rank + 1) % size, prev = (rank + size - 1) % size;
	CHECK(s && r, "no memory");
	/* A ring at every power of two (and 0, and odd sizes) up to 4 MiB. */
	for (size_t n = 0; n <= max; n = n ? n * 2 : 1) {
		for (size_t m = n; m <= n + (n > 2); m += 1 + (n > 2)) {
			MPI_Status st;
			int count;
			fill(s, m, rank);
			memset(r, 0, m);
			MPI_Sendrecv(s, (int) m, MPI_BYTE, next, 7, r, (int) m, MPI_BYTE, prev, 7, MPI_COMM_WORLD, &st);
			MPI_Get_count(&st, MPI_BYTE, &count);
			CHECK((size_t) count == m, "ring %zu: got %d bytes", m, count);
			check(r, m, prev, "ring");
		}
	}
	/* Wildcards: everybody sends to 0 with its rank as tag; 0 takes them in
	 * any order, each sized by a probe first. */
	if (rank == 0) {
		for (int i = 1; i < size; i++) {
			MPI_Status st;
			int count;
			MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
			MPI_Get_count(&st, MPI_BYTE, &count);
			CHECK(st.MPI_TAG == st.MPI_SOURCE && count == 1000 + st.MPI_SOURCE, "probe: tag %d source %d count %d", st.MPI_TAG, st.MPI_SOURCE, count);
			MPI_Recv(r, count, MPI_BYTE, MPI_ANY_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st);
			check(r, (size_t) count, 100 + st.MPI_SOURCE, "wildcard");
		}
	} else {
		fill(s, 1000 + (size_t) rank, 100 + rank);
		MPI_Send(s, 1000 + rank, MPI_BYTE, 0, rank, MPI_COMM_WORLD);
	}
	/* Nothing of the next phase may meet the wildcards. */
	MPI_Barrier(MPI_COMM_WORLD);
	/* A synchronous send, found by iprobe and received; then a standard one
	 * taken by mprobe/mrecv. (Over libfabric 1.17's tcp;ofi_rxm, Open MPI's MTL
	 * never completes an Ssend whose message an Mrecv took: not ours to test.) */
	if (rank == 1) {
		fill(s, 4096, 55);
		MPI_Ssend(s, 4096, MPI_BYTE, 0, 42, MPI_COMM_WORLD);
		fill(s, 3000, 56);
		MPI_Send(s, 3000, MPI_BYTE, 0, 43, MPI_COMM_WORLD);
	} else if (rank == 0) {
		int flag = 0, count;
		MPI_Status st;
		MPI_Message msg;
		while (!flag)
			MPI_Iprobe(1, 42, MPI_COMM_WORLD, &flag, &st);
		MPI_Recv(r, 4096, MPI_BYTE, 1, 42, MPI_COMM_WORLD, &st);
		check(r, 4096, 55, "ssend/iprobe");
		MPI_Mprobe(1, 43, MPI_COMM_WORLD, &msg, &st);
		MPI_Get_count(&st, MPI_BYTE, &count);
		CHECK(count == 3000, "mprobe count %d", count);
		MPI_Mrecv(r, 3000, MPI_BYTE, &msg, &st);
		check(r, 3000, 56, "mprobe/mrecv");
	}
	/* Cancel a receive nobody matches. */
	{
		MPI_Request req;
		MPI_Status st;
		int cancelled = 0;
		MPI_Irecv(r, 16, MPI_BYTE, MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &req);
		MPI_Cancel(&req);
		MPI_Wait(&req, &st);
		MPI_Test_cancelled(&st, &cancelled);
		CHECK(cancelled, "the receive was not cancelled");
	}
	/* Collectives. */
	{
		long v = rank + 1, sum = 0;
		int *a = malloc(sizeof(int) * size), *b = malloc(sizeof(int) * size);
		fill(s, 100000, 77);
		if (rank != 0)
			memset(s, 0, 100000);
		MPI_Bcast(s, 100000, MPI_BYTE, 0, MPI_COMM_WORLD);
		check(s, 100000, 77, "bcast");
		MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
		CHECK(sum == (long) size * (size + 1) / 2, "allreduce %ld", sum);
		for (int i = 0; i < size; i++)
			a[i] = rank * 1000 + i;
		MPI_Alltoall(a, 1, MPI_INT, b, 1, MPI_INT, MPI_COMM_WORLD);
		for (int i = 0; i < size; i++)
			CHECK(b[i] == i * 1000 + rank, "alltoall [%d] = %d", i, b[i]);
		MPI_Barrier(MPI_COMM_WORLD);
		free(a);
		free(b);
	}
	free(s);
	free(r);
}

static void osc(void)
{
	const int n = 1024;
	int64_t *mem, *buf = malloc(sizeof(int64_t) * n);
	MPI_Win win;
	int target = (rank + 1) % size, from = (rank + size - 1) % size;
	MPI_Win_allocate(sizeof(int64_t) * n, sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
	for (int i = 0; i < n; i++)
		mem[i] = -1;
	MPI_Win_fence(0, win);
	/* Put my pattern into my right neighbour. */
	for (int i = 0; i < n; i++)
		buf[i] = (int64_t) rank * 1000000 + i;
	MPI_Put(buf, n, MPI_INT64_T, target, 0, n, MPI_INT64_T, win);
	MPI_Win_fence(0, win);
	for (int i = 0; i < n; i++)
		CHECK(mem[i] == (int64_t) from * 1000000 + i, "put [%d] = %lld", i, (long long) mem[i]);
	/* Get it back from there. */
	MPI_Get(buf, n, MPI_INT64_T, target, 0, n, MPI_INT64_T, win);
	MPI_Win_fence(0, win);
	for (int i = 0; i < n; i++)
		CHECK(buf[i] == (int64_t) rank * 1000000 + i, "get [%d] = %lld", i, (long long) buf[i]);
	/* Everybody adds rank+1 to element 0 of rank 0. */
	if (rank == 0)
		mem[0] = 0;
	MPI_Win_fence(0, win);
	{
		int64_t one = rank + 1, old = 0, cmp, swap, res;
		MPI_Accumulate(&one, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, MPI_SUM, win);
		MPI_Win_fence(0, win);
		if (rank == 0)
			CHECK(mem[0] == (int64_t) size * (size + 1) / 2, "accumulate %lld", (long long) mem[0]);
		MPI_Win_fence(0, win);
		/* Fetch-and-add on element 1 of rank 0: the old values are distinct. */
		if (rank == 0)
			mem[1] = 0;
		MPI_Win_fence(0, win);
		one = 1;
		MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, 1, MPI_SUM, win);
		MPI_Win_fence(0, win);
		CHECK(old >= 0 && old < size, "fetch_and_op old %lld", (long long) old);
		if (rank == 0)
			CHECK(mem[1] == size, "fetch_and_op total %lld", (long long) mem[1]);
		/* Compare-and-swap: only one rank wins element 2 of rank 0. */
		if (rank == 0)
			mem[2] = -7;
		MPI_Win_fence(0, win);
		cmp = -7;
		swap = rank;
		MPI_Compare_and_swap(&swap, &cmp, &res, MPI_INT64_T, 0, 2, win);
		MPI_Win_fence(0, win);
		{
			int won = res == -7, winners = 0;
			MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
			CHECK(winners == 1, "compare_and_swap: %d winners", winners);
		}
	}
	MPI_Win_free(&win);
	free(buf);
}

/* An MPI_Ssend found by MPI_Probe, then received: over libfabric 1.17's
 * udp;ofi_rxd, Open MPI's MTL segfaults in that MPI_Recv. */
static void probe_ssend(void)
{
	unsigned char b[256];
	if (rank == 1) {
		fill(b, sizeof b, 9);
		MPI_Ssend(b, sizeof b, MPI_BYTE, 0, 5, MPI_COMM_WORLD);
	} else if (rank == 0) {
		MPI_Status st;
		int count;
		MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
		MPI_Get_count(&st, MPI_BYTE, &count);
		CHECK(count == (int) sizeof b && st.MPI_SOURCE == 1 && st.MPI_TAG == 5, "probe: %d bytes from %d tag %d", count, st.MPI_SOURCE, st.MPI_TAG);
		memset(b, 0, sizeof b);
		MPI_Recv(b, count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st);
		check(b, sizeof b, 9, "probe/ssend");
	}
}

static void lat(int iters)
{
	char b[8] = { 0 };
	double t;
	MPI_Barrier(MPI_COMM_WORLD);
	t = MPI_Wtime();
	for (int i = 0; i < iters; i++) {
		if (rank == 0) {
			MPI_Send(b, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
			MPI_Recv(b, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else if (rank == 1) {
			MPI_Recv(b, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			MPI_Send(b, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
		}
	}
	t = MPI_Wtime() - t;
	if (rank == 0)
		printf("latency: 8 B half round trip %.2f us over %d iterations\n", t / iters / 2 * 1e6, iters);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "pt2pt";
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	which_library();
	fflush(stdout);
	MPI_Barrier(MPI_COMM_WORLD);
	if (!strcmp(mode, "pt2pt"))
		pt2pt();
	else if (!strcmp(mode, "osc"))
		osc();
	else if (!strcmp(mode, "probe_ssend"))
		probe_ssend();
	else if (!strcmp(mode, "lat"))
		lat(argc > 2 ? atoi(argv[2]) : 10000);
	else
		CHECK(0, "unknown mode %s", mode);
	MPI_Barrier(MPI_COMM_WORLD);
	printf("rank %d: ok\n", rank);
	MPI_Finalize();
	return 0;
}
