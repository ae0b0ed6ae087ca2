/*
 * dlopener LIB N BEFORE_MS AFTER_MS: fires `dlmain:tick` once, waits
 * BEFORE_MS, loads LIB with dlopen, waits AFTER_MS (a tracer watching its
 * mappings attaches meanwhile), then calls the library's dl_fire(N).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <time.h>

static void pause_ms(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&t, NULL);
}

int main(int argc, char **argv)
{
	if (argc != 5)
		return 2;
	STAP_PROBE(dlmain, tick);
	pause_ms(atol(argv[3]));
	void *lib = dlopen(argv[1], RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	void (*fire)(int) = (void (*)(int))dlsym(lib, "dl_fire");
	if (!fire)
		return 1;
	pause_ms(atol(argv[4]));
	fire(atoi(argv[2]));
	printf("fired %d\n", atoi(argv[2]));
	return 0;
}
