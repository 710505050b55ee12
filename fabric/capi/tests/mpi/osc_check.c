/* MPI one-sided communication with data checks: what Open MPI's osc rdma asks
 * of libfabric through its ofi BTL (fi_write, fi_read, fi_atomic,
 * fi_fetch_atomic, fi_compare_atomic on registered memory).
 *
 *   osc_check [allocate|create|both] [iterations]
 *   osc_check lat [iterations [ops]]   8-byte op + flush latencies, rank 0 to
 *                     1: the first `ops` (default 5) of put, get, accumulate,
 *                     fetch_and_op, compare_and_swap
 *
 * For each window (MPI_Win_allocate, MPI_Win_create on malloc'ed memory):
 *   - under fences: Put and Get around a ring (8 KiB of int64 and 1 MiB of
 *     bytes), Accumulate with MPI_SUM on int64, uint64, int32 and double,
 *     MPI_REPLACE on int64, MPI_MAX on int16 and MPI_BXOR on uint8, from
 *     every rank into every other rank;
 *     Fetch_and_op (MPI_SUM) from every rank on every other rank's counter,
 *     the fetched values checked to be distinct; Compare_and_swap from every
 *     rank on every other rank's word, exactly one winner per word;
 *   - under passive-target locks: exclusive Win_lock with Put, Get and
 *     Accumulate; Win_lock_all with `iterations` Fetch_and_op rounds and
 *     MPI_Win_flush, a Compare_and_swap spin lock guarding a read-modify-write
 *     done with Get and Put.
 * No rank issues an atomic on its own window, and MPI_Win_allocate windows
 * get no Compare_and_swap: Open MPI 4.1's osc rdma hands its BTL a NULL
 * registration handle for Compare_and_swap on memory it treats as local
 * (open-mpi/ompi#9146), whatever the libfabric. Nor MPI_MAX or MPI_BXOR on
 * 8-byte integers: Open MPI 4.1.4's ofi BTL advertises them but maps only
 * MPI_SUM and MPI_REPLACE to libfabric and aborts on the others ("Unknown or
 * unsupported atomic op"), so those run here on 2- and 1-byte types, which
 * osc rdma does with Get and Put under its accumulate lock.
 *
 * Rank 0 prints the libfabric.so it mapped ("libfabric: PATH"), every rank
 * "window memory: pid PID at ADDR, N bytes" for its MPI_Win_create window,
 * "osc: COMPONENTS" (the osc and btl plugins it mapped) and at the end
 * "rank R: ok". Any failed check prints "FAIL ..." and aborts the job. */
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common.h"

static int rank, size;
/* Whether to call MPI_Compare_and_swap on this window (see run()). */
static int with_cas;

#define CHECK(cond, ...)                                                           \
	do {                                                                       \
		if (!(cond)) {                                                     \
			fprintf(stderr, "FAIL rank %d line %d: ", rank, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                              \
			fprintf(stderr, "\n");                                     \
			MPI_Abort(MPI_COMM_WORLD, 2);                              \
		}                                                                  \
	} while (0)

/* The window: counters and words first, then the ring areas. */
enum {
	N64 = 1024,          /* int64 ring area */
	NBYTES = 1 << 20,    /* byte ring area */
	ACC = 8,             /* accumulate slots per kind */
	MAXRANKS = 64,
};

struct win_layout {
	int64_t ring[N64];
	int64_t acc_sum[ACC];
	uint64_t acc_usum[ACC];
	int32_t acc_sum32[ACC];
	double acc_dsum[ACC];
	int64_t acc_rep[ACC];
	int16_t acc_max[ACC];
	uint8_t acc_xor[ACC];
	uint8_t pad[8 - ACC * 3 % 8];
	int64_t fop;
	int64_t cas;
	int64_t passive_fop;
	int64_t lock;
	int64_t guarded;
	int64_t excl[64];
	unsigned char bytes[NBYTES];
};

_Static_assert(offsetof(struct win_layout, bytes) % 8 == 0, "displacements are in units of 8 bytes");

#define DISP(field) ((MPI_Aint) (offsetof(struct win_layout, field)))

static unsigned char pat(size_t i, int seed)
{
	uint64_t x = (uint64_t) i * 0x9E3779B97F4A7C15ull + (uint64_t) seed * 0xD6E8FEB86659FD93ull;
	return (unsigned char) (x >> 29 ^ x >> 7);
}

/* The osc and btl plugins this process mapped, e.g. "mca_osc_rdma mca_btl_ofi". */
static void which_components(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096], seen[1024] = "";
	while (f && fgets(line, sizeof line, f)) {
		char *p = strstr(line, "mca_osc_");
		if (!p)
			p = strstr(line, "mca_btl_");
		if (p) {
			char name[64];
			size_t n = strcspn(p, ".\n");
			if (n >= sizeof name)
				n = sizeof name - 1;
			memcpy(name, p, n);
			name[n] = 0;
			if (!strstr(seen, name) && strlen(seen) + n + 2 < sizeof seen) {
				strcat(seen, " ");
				strcat(seen, name);
			}
		}
	}
	if (f)
		fclose(f);
	printf("osc: rank %d:%s\n", rank, seen);
}

static void fenced(struct win_layout *m, MPI_Win win)
{
	int next = (rank + 1) % size, prev = (rank + size - 1) % size;
	int64_t *buf = malloc(sizeof(int64_t) * N64);
	unsigned char *bytes = malloc(NBYTES);
	CHECK(buf && bytes, "no memory");

	/* Put my pattern into my right neighbour, int64 and bytes. */
	for (int i = 0; i < N64; i++)
		buf[i] = (int64_t) rank * 1000000 + i;
	for (size_t i = 0; i < NBYTES; i++)
		bytes[i] = pat(i, rank);
	MPI_Win_fence(0, win);
	MPI_Put(buf, N64, MPI_INT64_T, next, DISP(ring) / 8, N64, MPI_INT64_T, win);
	MPI_Put(bytes, NBYTES, MPI_BYTE, next, DISP(bytes) / 8, NBYTES, MPI_BYTE, win);
	MPI_Win_fence(0, win);
	for (int i = 0; i < N64; i++)
		CHECK(m->ring[i] == (int64_t) prev * 1000000 + i, "put [%d] = %lld", i, (long long) m->ring[i]);
	for (size_t i = 0; i < NBYTES; i++)
		CHECK(m->bytes[i] == pat(i, prev), "put byte %zu = %u", i, m->bytes[i]);

	/* Get them back from there. */
	memset(buf, 0, sizeof(int64_t) * N64);
	memset(bytes, 0, NBYTES);
	MPI_Get(buf, N64, MPI_INT64_T, next, DISP(ring) / 8, N64, MPI_INT64_T, win);
	MPI_Get(bytes, NBYTES, MPI_BYTE, next, DISP(bytes) / 8, NBYTES, MPI_BYTE, win);
	MPI_Win_fence(0, win);
	for (int i = 0; i < N64; i++)
		CHECK(buf[i] == (int64_t) rank * 1000000 + i, "get [%d] = %lld", i, (long long) buf[i]);
	for (size_t i = 0; i < NBYTES; i++)
		CHECK(bytes[i] == pat(i, rank), "get byte %zu = %u", i, bytes[i]);

	/* Accumulate from every rank into every other rank. */
	for (int i = 0; i < ACC; i++) {
		m->acc_sum[i] = 0;
		m->acc_usum[i] = 0;
		m->acc_sum32[i] = 0;
		m->acc_dsum[i] = 0;
		m->acc_rep[i] = -1;
		m->acc_max[i] = -1;
		m->acc_xor[i] = 0;
	}
	MPI_Win_fence(0, win);
	for (int t = 0; t < size; t++) {
		int64_t s[ACC], rp[ACC];
		int16_t mx[ACC];
		uint8_t x[ACC];
		uint64_t u[ACC];
		int32_t s32[ACC];
		double d[ACC];
		if (t == rank)
			continue;
		for (int i = 0; i < ACC; i++) {
			s[i] = (int64_t) (rank + 1) << (4 * i);
			u[i] = (uint64_t) (rank + 1) * 0x100000001ull + i;
			s32[i] = (rank + 1) * (i + 1);
			d[i] = 0.5 * (rank + 1) + i;
			rp[i] = (int64_t) rank << 8 | i;
			mx[i] = (int16_t) (rank * 100 + i);
			x[i] = (uint8_t) (1u << (rank % 8));
		}
		MPI_Accumulate(s, ACC, MPI_INT64_T, t, DISP(acc_sum) / 8, ACC, MPI_INT64_T, MPI_SUM, win);
		MPI_Accumulate(u, ACC, MPI_UINT64_T, t, DISP(acc_usum) / 8, ACC, MPI_UINT64_T, MPI_SUM, win);
		MPI_Accumulate(s32, ACC, MPI_INT32_T, t, DISP(acc_sum32) / 8, ACC, MPI_INT32_T, MPI_SUM, win);
		MPI_Accumulate(d, ACC, MPI_DOUBLE, t, DISP(acc_dsum) / 8, ACC, MPI_DOUBLE, MPI_SUM, win);
		MPI_Accumulate(rp, ACC, MPI_INT64_T, t, DISP(acc_rep) / 8, ACC, MPI_INT64_T, MPI_REPLACE, win);
		MPI_Accumulate(mx, ACC, MPI_INT16_T, t, DISP(acc_max) / 8, ACC, MPI_INT16_T, MPI_MAX, win);
		MPI_Accumulate(x, ACC, MPI_UINT8_T, t, DISP(acc_xor) / 8, ACC, MPI_UINT8_T, MPI_BXOR, win);
	}
	MPI_Win_fence(0, win);
	{
		/* Sums over the other ranks r of f(r). */
		int64_t ranks1 = 0, top = -1;
		uint8_t xor = 0;
		for (int r = 0; r < size; r++)
			if (r != rank) {
				ranks1 += r + 1;
				xor ^= (uint8_t) (1u << (r % 8));
				top = r;
			}
		for (int i = 0; i < ACC; i++) {
			CHECK(m->acc_sum[i] == ranks1 << (4 * i), "accumulate int64 [%d] = %lld", i, (long long) m->acc_sum[i]);
			CHECK(m->acc_usum[i] == (uint64_t) ranks1 * 0x100000001ull + (uint64_t) (size - 1) * i,
			      "accumulate uint64 [%d] = %llu", i, (unsigned long long) m->acc_usum[i]);
			CHECK(m->acc_sum32[i] == (int32_t) ranks1 * (i + 1), "accumulate int32 [%d] = %d", i, m->acc_sum32[i]);
			CHECK(m->acc_dsum[i] == 0.5 * ranks1 + (double) (size - 1) * i, "accumulate double [%d] = %g", i,
			      m->acc_dsum[i]);
			/* Element-wise atomic: some other rank's value, whole. */
			CHECK((m->acc_rep[i] & 0xff) == i && m->acc_rep[i] >> 8 >= 0 && m->acc_rep[i] >> 8 < size &&
				      m->acc_rep[i] >> 8 != rank,
			      "accumulate replace [%d] = %llx", i, (unsigned long long) m->acc_rep[i]);
			CHECK(m->acc_max[i] == top * 100 + i, "accumulate max int16 [%d] = %d", i, m->acc_max[i]);
			CHECK(m->acc_xor[i] == xor, "accumulate bxor uint8 [%d] = %x", i, m->acc_xor[i]);
		}
	}

	/* Fetch-and-add 1 on every other rank's counter: the values each counter
	 * handed out are 0 .. size-2, each once. */
	m->fop = 0;
	m->cas = -7;
	MPI_Win_fence(0, win);
	{
		int64_t one = 1, old[MAXRANKS], all[MAXRANKS * MAXRANKS];
		int64_t swap = rank, cmp = -7, res[MAXRANKS];
		int won[MAXRANKS], winners[MAXRANKS];
		for (int t = 0; t < size; t++) {
			old[t] = -1;
			if (t != rank)
				MPI_Fetch_and_op(&one, &old[t], MPI_INT64_T, t, DISP(fop) / 8, MPI_SUM, win);
		}
		MPI_Win_fence(0, win);
		CHECK(m->fop == size - 1, "fetch_and_op total %lld", (long long) m->fop);
		MPI_Allgather(old, size, MPI_INT64_T, all, size, MPI_INT64_T, MPI_COMM_WORLD);
		for (int t = 0; t < size; t++) {
			uint64_t seen = 0;
			for (int r = 0; r < size; r++) {
				int64_t v = all[r * size + t];
				if (r == t)
					continue;
				CHECK(v >= 0 && v < size - 1 && !(seen >> v & 1), "fetch_and_op on %d: rank %d got %lld", t, r,
				      (long long) v);
				seen |= 1ull << v;
			}
		}

		/* Compare-and-swap: one rank wins each other rank's word. */
		for (int t = 0; t < size; t++) {
			res[t] = 0;
			if (t != rank && with_cas)
				MPI_Compare_and_swap(&swap, &cmp, &res[t], MPI_INT64_T, t, DISP(cas) / 8, win);
		}
		/* The last fence: passive-target epochs follow. */
		MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
		if (!with_cas)
			goto out;
		for (int t = 0; t < size; t++)
			won[t] = t != rank && res[t] == -7;
		MPI_Allreduce(won, winners, size, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
		for (int t = 0; t < size; t++)
			CHECK(winners[t] == 1, "compare_and_swap on %d: %d winners", t, winners[t]);
		CHECK(m->cas >= 0 && m->cas < size && m->cas != rank, "compare_and_swap left %lld", (long long) m->cas);
		{
			/* The winner is the rank whose result was -7. */
			int winner_of[MAXRANKS];
			for (int t = 0; t < size; t++)
				winner_of[t] = won[t] ? rank : -1;
			MPI_Allreduce(MPI_IN_PLACE, winner_of, size, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
			CHECK(m->cas == winner_of[rank], "compare_and_swap: %lld stored, %d won", (long long) m->cas,
			      winner_of[rank]);
		}
		/* Losers saw the winner's value. */
		for (int t = 0; t < size; t++)
			if (t != rank && res[t] != -7)
				CHECK(res[t] >= 0 && res[t] < size && res[t] != t, "compare_and_swap on %d returned %lld", t,
				      (long long) res[t]);
	}
out:
	free(buf);
	free(bytes);
}

static void passive(struct win_layout *m, MPI_Win win, int iters)
{
	int next = (rank + 1) % size, prev = (rank + size - 1) % size;
	m->passive_fop = 0;
	m->lock = 0;
	m->guarded = 0;
	for (int i = 0; i < 64; i++)
		m->excl[i] = 0;
	MPI_Barrier(MPI_COMM_WORLD);

	/* Exclusive lock on my right neighbour: put, get back, accumulate. */
	{
		int64_t v[64], back[64], add[64];
		for (int i = 0; i < 64; i++) {
			v[i] = (int64_t) rank << 32 | i;
			add[i] = i;
		}
		MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, win);
		MPI_Put(v, 64, MPI_INT64_T, next, DISP(excl) / 8, 64, MPI_INT64_T, win);
		MPI_Win_flush(next, win);
		MPI_Get(back, 64, MPI_INT64_T, next, DISP(excl) / 8, 64, MPI_INT64_T, win);
		MPI_Win_flush(next, win);
		for (int i = 0; i < 64; i++)
			CHECK(back[i] == v[i], "locked get [%d] = %llx", i, (unsigned long long) back[i]);
		MPI_Accumulate(add, 64, MPI_INT64_T, next, DISP(excl) / 8, 64, MPI_INT64_T, MPI_SUM, win);
		MPI_Win_unlock(next, win);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	for (int i = 0; i < 64; i++)
		CHECK(m->excl[i] == ((int64_t) prev << 32 | i) + i, "locked accumulate [%d] = %llx", i,
		      (unsigned long long) m->excl[i]);

	/* Shared access to everyone: rounds of fetch-and-add on every other rank. */
	MPI_Win_lock_all(0, win);
	for (int k = 0; k < iters; k++) {
		for (int t = 0; t < size; t++) {
			int64_t one = 1, old = -1;
			if (t == rank)
				continue;
			MPI_Fetch_and_op(&one, &old, MPI_INT64_T, t, DISP(passive_fop) / 8, MPI_SUM, win);
			MPI_Win_flush(t, win);
			CHECK(old >= 0 && old < (int64_t) iters * (size - 1), "passive fetch_and_op %lld", (long long) old);
		}
	}
	MPI_Win_unlock_all(win);
	MPI_Barrier(MPI_COMM_WORLD);
	CHECK(m->passive_fop == (int64_t) iters * (size - 1), "passive fetch_and_op total %lld", (long long) m->passive_fop);

	/* A compare-and-swap spin lock on rank `home`'s word guarding a
	 * read-modify-write of its `guarded` word done with Get and Put. Rank
	 * `home` only counts: no atomics on one's own window (see above). */
	{
		const int home = size - 1;
		const int rounds = with_cas ? iters / 10 + 1 : 0;
		MPI_Win_lock_all(0, win);
		if (rank != home) {
			for (int k = 0; k < rounds; k++) {
				int64_t free_ = 0, me = rank + 1, got = -1, zero = 0, val = 0;
				do {
					MPI_Compare_and_swap(&me, &free_, &got, MPI_INT64_T, home, DISP(lock) / 8, win);
					MPI_Win_flush(home, win);
				} while (got != 0);
				MPI_Get(&val, 1, MPI_INT64_T, home, DISP(guarded) / 8, 1, MPI_INT64_T, win);
				MPI_Win_flush(home, win);
				val += 1;
				MPI_Put(&val, 1, MPI_INT64_T, home, DISP(guarded) / 8, 1, MPI_INT64_T, win);
				MPI_Win_flush(home, win);
				/* Release: swap my id back to 0. */
				MPI_Compare_and_swap(&zero, &me, &got, MPI_INT64_T, home, DISP(lock) / 8, win);
				MPI_Win_flush(home, win);
				CHECK(got == me, "spin lock held by %lld, not me", (long long) got);
			}
		}
		MPI_Win_unlock_all(win);
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank == home)
			CHECK(m->guarded == (int64_t) rounds * (size - 1) && m->lock == 0, "guarded counter %lld, lock %lld",
			      (long long) m->guarded, (long long) m->lock);
	}
}

static void run(const char *kind, int iters)
{
	struct win_layout *m;
	MPI_Win win;
	int rc;
	if (!strcmp(kind, "allocate")) {
		rc = MPI_Win_allocate(sizeof *m, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &m, &win);
		CHECK(rc == MPI_SUCCESS, "MPI_Win_allocate: %d", rc);
	} else {
		m = malloc(sizeof *m);
		CHECK(m != NULL, "no memory");
		rc = MPI_Win_create(m, sizeof *m, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
		CHECK(rc == MPI_SUCCESS, "MPI_Win_create: %d", rc);
		/* So the caller can find the registration that exposed it. */
		printf("window memory: pid %d at %p, %zu bytes\n", (int) getpid(), (void *) m, sizeof *m);
	}
	/* Open MPI 4.1's osc rdma puts an MPI_Win_allocate window of ranks on one
	 * host in shared memory and then hands its BTL a NULL registration handle
	 * for MPI_Compare_and_swap on it (open-mpi/ompi#9146): a segfault in
	 * mca_btl_ofi_acswap over any libfabric. So no compare-and-swap there. */
	with_cas = strcmp(kind, "allocate") || getenv("OSC_CHECK_CAS_ON_ALLOCATE") != NULL;
	memset(m, 0, sizeof *m);
	MPI_Barrier(MPI_COMM_WORLD);
	fenced(m, win);
	passive(m, win, iters);
	MPI_Win_free(&win);
	if (strcmp(kind, "allocate"))
		free(m);
	if (rank == 0)
		printf("window %s: ok\n", kind);
}

/* Rank 0 times 8-byte operations on rank 1's window (MPI_Win_create) under
 * MPI_Win_lock_all, each followed by MPI_Win_flush: microseconds per op. */
static void lat(int iters, int nops)
{
	struct win_layout *m = calloc(1, sizeof *m);
	const char *names[] = { "put", "get", "accumulate", "fetch_and_op", "compare_and_swap" };
	double us[5];
	MPI_Win win;
	int rc;
	CHECK(m != NULL, "no memory");
	rc = MPI_Win_create(m, sizeof *m, 8, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
	CHECK(rc == MPI_SUCCESS, "MPI_Win_create: %d", rc);
	MPI_Win_lock_all(0, win);
	if (rank == 0) {
		for (int op = 0; op < nops; op++) {
			int64_t v = 1, r = 0, c = 0;
			double t = 0;
			for (int i = -iters / 10; i < iters; i++) {
				if (i == 0)
					t = MPI_Wtime();
				switch (op) {
				case 0: MPI_Put(&v, 1, MPI_INT64_T, 1, DISP(fop) / 8, 1, MPI_INT64_T, win); break;
				case 1: MPI_Get(&r, 1, MPI_INT64_T, 1, DISP(fop) / 8, 1, MPI_INT64_T, win); break;
				case 2: MPI_Accumulate(&v, 1, MPI_INT64_T, 1, DISP(fop) / 8, 1, MPI_INT64_T, MPI_SUM, win); break;
				case 3: MPI_Fetch_and_op(&v, &r, MPI_INT64_T, 1, DISP(fop) / 8, MPI_SUM, win); break;
				default: MPI_Compare_and_swap(&v, &c, &r, MPI_INT64_T, 1, DISP(cas) / 8, win); break;
				}
				MPI_Win_flush(1, win);
			}
			us[op] = (MPI_Wtime() - t) / iters * 1e6;
		}
		printf("osc latency:");
		for (int op = 0; op < nops; op++)
			printf(" %s %.2f", names[op], us[op]);
		printf(" us over %d iterations\n", iters);
	}
	MPI_Win_unlock_all(win);
	MPI_Win_free(&win);
	free(m);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "both";
	int iters = argc > 2 ? atoi(argv[2]) : 100;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	CHECK(size >= 2 && size <= MAXRANKS, "needs 2 to %d ranks, not %d", MAXRANKS, size);
	CHECK(iters > 0, "iterations %d", iters);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if (rank == 0)
		which_library();
	CHECK(!strcmp(mode, "allocate") || !strcmp(mode, "create") || !strcmp(mode, "both") || !strcmp(mode, "lat"),
	      "unknown mode %s", mode);
	if (!strcmp(mode, "allocate") || !strcmp(mode, "both"))
		run("allocate", iters);
	if (!strcmp(mode, "create") || !strcmp(mode, "both"))
		run("create", iters);
	if (!strcmp(mode, "lat"))
		lat(iters, argc > 3 && atoi(argv[3]) >= 1 && atoi(argv[3]) <= 5 ? atoi(argv[3]) : 5);
	which_components();
	fflush(stdout);
	MPI_Barrier(MPI_COMM_WORLD);
	printf("rank %d: ok\n", rank);
	MPI_Finalize();
	return 0;
}
