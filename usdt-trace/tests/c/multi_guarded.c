/* The probe of multi with a semaphore (see multi.c). */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

__extension__ unsigned short multi_guarded_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));

long guarded(long n) {
    long fired = 0;
    for (long i = 0; i < n; i++) {
        if (multi_guarded_semaphore) {
            STAP_PROBE1(multi, guarded, i);
            fired++;
        }
    }
    return fired;
}

unsigned multi_semaphore(void) {
    return *(volatile unsigned short *)&multi_guarded_semaphore;
}
