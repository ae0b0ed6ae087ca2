/* A C program with sys/sdt.h probes, for the usdt-trace tests.
 *
 *   cdemo PLAIN GUARDED LIB
 *       fires cdemo:plain PLAIN times, cdemo:guarded GUARDED times and
 *       cdemolib:call (in the shared library libcdemolib) LIB times, then
 *       prints "evaluated N".
 *   cdemo serve
 *       prints "ready PID", then for each line "PLAIN GUARDED LIB" on stdin
 *       fires as above and prints "evaluated N"; exits at end of input.
 *
 * cdemo:guarded has a semaphore and its argument is computed only while the
 * semaphore is set; "evaluated N" says how often that happened in total.
 */
#include <sys/sdt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* in cdemo_guarded.c: sys/sdt.h gives every probe of a file a semaphore or none */
void fire_guarded(long n);
extern volatile long evaluated;
/* in cdemolib.c */
void cdemolib_fire(long n);

static void fire(long plain, long guarded, long lib) {
    for (long i = 0; i < plain; i++) {
        int neg = (int)-i;
        unsigned char byte = (unsigned char)i;
        STAP_PROBE3(cdemo, plain, i, neg, byte);
    }
    fire_guarded(guarded);
    cdemolib_fire(lib);
    printf("evaluated %ld\n", evaluated);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc == 2 && argv[1][0] == 's') {
        long plain, guarded, lib;
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        while (scanf("%ld %ld %ld", &plain, &guarded, &lib) == 3)
            fire(plain, guarded, lib);
        return 0;
    }
    fire(argc > 1 ? atol(argv[1]) : 0, argc > 2 ? atol(argv[2]) : 0, argc > 3 ? atol(argv[3]) : 0);
    return 0;
}
