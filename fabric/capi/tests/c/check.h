/* What the C test programs share: checks that print the failing line and its
 * values and exit 1, and a monotonic clock for their time limits. */
#ifndef FABRIC_CHECK_H
#define FABRIC_CHECK_H
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* `x` must be 0 (a libfabric call's success). */
#define CK(x) do { long _r = (long)(x); if (_r) { fprintf(stderr, "%d: %s: %ld %s\n", __LINE__, #x, _r, fi_strerror((int)-_r)); exit(1); } } while (0)
/* `x` must equal `want`. */
#define EXPECT(x, want) do { long _r = (long)(x); if (_r != (long)(want)) { fprintf(stderr, "%d: %s: %ld, want %ld\n", __LINE__, #x, _r, (long)(want)); exit(1); } } while (0)
/* `x` must hold. */
#define TRUE(x) do { if (!(x)) { fprintf(stderr, "%d: not true: %s\n", __LINE__, #x); exit(1); } } while (0)

/* Seconds on the monotonic clock. */
static inline double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}
#endif
