/* A library loaded with dlopen by dlopener.c: `dl:hit` fires once per call. */
#include <sys/sdt.h>

void dl_fire(int n)
{
	for (int i = 0; i < n; i++)
		STAP_PROBE1(dl, hit, i);
}
