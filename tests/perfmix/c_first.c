/* `c_first N`: fires the Rust probes, then the C ones, N times each. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

uint64_t perfmix_rust(uint64_t n);
void perfmix_c(uint64_t n);

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 3;
	uint64_t runs = perfmix_rust(n);
	perfmix_c(n);
	printf("fired %llu lazy=%llu\n", (unsigned long long)n, (unsigned long long)runs);
	return 0;
}
