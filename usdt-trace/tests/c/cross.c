/* Probe arguments in the operand forms compilers write through sys/sdt.h
 * on aarch64 and riscv64: registers of every size and sign, stack slots,
 * struct fields through a pointer, globals, array elements, constants and
 * floats (in registers no tracer reads), each probe with its semaphore.
 *
 * usage: cross    fires each x:* probe once and exits.
 */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include <stdint.h>

/* Every probe of the file has its semaphore (`_SDT_HAS_SEMAPHORES`). */
#define SEMAPHORE(name) unsigned short x_##name##_semaphore __attribute__((unused, section(".probes")))
SEMAPHORE(scalars);
SEMAPHORE(memory);
SEMAPHORE(constants);
SEMAPHORE(floats);
SEMAPHORE(twelve);
SEMAPHORE(guarded);

struct pair { int32_t a; int64_t b; };

volatile int64_t g_long = -1234567;
volatile int32_t g_int = 77;
int16_t g_arr[8] = {10, -11, 12, -13, 14, -15, 16, -17};

__attribute__((noinline)) void scalars(int8_t a, int16_t b, int32_t c, int64_t d, uint8_t e,
                                       uint16_t f, uint32_t g, uint64_t h, const char *s) {
    DTRACE_PROBE9(x, scalars, a, b, c, d, e, f, g, h, s);
}

__attribute__((noinline)) void memory(const struct pair *p, int i) {
    volatile int64_t local = p->b * 3;
    DTRACE_PROBE5(x, memory, p->a, p->b, local, g_arr[i & 7], g_long);
}

__attribute__((noinline)) void constants(void) {
    DTRACE_PROBE3(x, constants, 0, -42, 4096);
}

__attribute__((noinline)) void floats(float f, double d) {
    DTRACE_PROBE2(x, floats, f, d);
}

__attribute__((noinline)) void twelve(int64_t a, int32_t b, int16_t c, int8_t d) {
    DTRACE_PROBE12(x, twelve, a, b, c, d, a + 1, b + 1, c + 1, d + 1, a * 2, b * 2, c * 2,
                   d * 2);
}

__attribute__((noinline)) void guarded(int32_t v) {
    if (x_guarded_semaphore)
        DTRACE_PROBE1(x, guarded, v);
}

int main(void) {
    struct pair p = {-3, 1LL << 40};
    scalars(-1, -2, -3, -4, 5, 6, 7, 8, "eight");
    memory(&p, 2);
    constants();
    floats(1.5f, -2.25);
    twelve(-100, -200, -300, -4);
    guarded(g_int);
    return 0;
}
