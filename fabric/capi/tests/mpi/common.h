/* What the MPI test programs share (mpi_check.c, osc_check.c). */
#ifndef FABRIC_MPI_COMMON_H
#define FABRIC_MPI_COMMON_H
#include <stdio.h>
#include <string.h>

/* Print "libfabric: PATH" for the libfabric.so this process mapped. */
static void which_library(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	while (f && fgets(line, sizeof line, f)) {
		char *p = strstr(line, "/");
		if (p && strstr(p, "libfabric.so")) {
			printf("libfabric: %s", p);
			break;
		}
	}
	if (f)
		fclose(f);
}
#endif
