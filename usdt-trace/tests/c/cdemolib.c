/* A shared library with a probe, loaded by cdemo (see cdemo.c). */
#include <sys/sdt.h>

void cdemolib_fire(long n) {
    for (long i = 0; i < n; i++)
        STAP_PROBE1(cdemolib, call, i);
}
