/* The probe of cdemo with a semaphore (see cdemo.c). */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

__extension__ unsigned short cdemo_guarded_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));

volatile long evaluated;

__attribute__((noinline)) static long expensive(long i) {
    evaluated++;
    return i * 2;
}

void fire_guarded(long n) {
    for (long i = 0; i < n; i++) {
        if (cdemo_guarded_semaphore) {
            STAP_PROBE1(cdemo, guarded, expensive(i));
        }
    }
}
