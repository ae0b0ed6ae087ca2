/* A probe argument in the red zone that the next call overwrites, for
 * tests/safety.rs: exact only when the kernel reads it at the hit (the
 * tracefs path), which must also work from a directory with a space.
 *
 * usage: spaced N    fires sp:leaf with 0..N-1.
 */
#include <stdlib.h>
#include <sys/sdt.h>

__attribute__((noinline)) static void leaf(long x) {
    volatile long v = x;
    STAP_PROBE1(sp, leaf, v);
}

__attribute__((noinline)) static void clobber(void) {
    volatile long junk[4];
    for (int i = 0; i < 4; i++)
        junk[i] = -1;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 0;
    for (long i = 0; i < n; i++) {
        leaf(i);
        clobber();
    }
    return 0;
}
