/*
 * The bench loop with a classic C probe: `<sys/sdt.h>` emits one `nop` at the
 * note's Location and no semaphore (STAP_PROBE2, not a *_ENABLED() guard), so
 * a tracer attaches at the nop and the kernel emulates it (int3).
 *
 * Same shape as the Rust loops of examples/bench: a counted loop whose body is
 * the probe, with the counter and the bound as the two arguments, both already
 * in registers.
 */
#include <stdint.h>
#include <sys/sdt.h>

void usdt_bench_c_loop(uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		STAP_PROBE2(cbench, hit, i, n);
}

/* The same loop with no probe, for comparing code generation. */
void usdt_bench_c_bare(uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		__asm__ volatile("" : : "r"(i));
}
