/* sys/sdt.h probes whose arguments the compiler places in memory and as
 * immediates, for tests/trace.rs.
 *
 *   memargs N
 *       for i in 0..N: fires cmem:leaf (volatile locals of a leaf function:
 *       GCC writes them in the red zone, `-8@-8(%rsp)`, plus the immediates
 *       `$5` and `$-7`), waits for SIGUSR1, then fires cmem:framed (fields of
 *       a struct in the caller's frame, `(%rdi)`-based operands).
 *
 * The red zone below the stack pointer is not in the stack copy a sample
 * carries, so a tracer reads it from the process after the fact: leaf waits
 * for SIGUSR1 (signal frames skip the red zone) before it returns and the
 * next call overwrites it.
 */
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/sdt.h>

static volatile sig_atomic_t released;

static void on_usr1(int sig) {
    (void)sig;
    released = 1;
}

struct fields {
    long a;
    int b;
    short c;
    signed char d;
};

__attribute__((noinline)) static void leaf(long x, int y) {
    volatile long vx = x;
    volatile int vy = y;
    volatile short vs = (short)(-x);
    STAP_PROBE5(cmem, leaf, vx, vy, vs, 5, -7);
    while (!released)
        ;
    released = 0;
}

__attribute__((noipa)) static void framed(const struct fields *f) {
    STAP_PROBE4(cmem, framed, f->a, f->b, f->c, f->d);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1;
    signal(SIGUSR1, on_usr1);
    for (long i = 0; i < n; i++) {
        leaf(LONG_MIN + i, INT_MAX - (int)i);
        struct fields f = {LONG_MAX - i, INT_MIN + (int)i, (short)(SHRT_MIN + i), (signed char)(SCHAR_MIN + i)};
        framed(&f);
    }
    return 0;
}
