/* Loads the probe library with dlopen, says "loaded", waits for a line on
 * stdin (the tracer has attached) and for the lazy probe's semaphore, then
 * fires N times: `dlopen_c LIBRARY N`. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIBRARY N\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    uint64_t (*fire)(uint64_t) = (uint64_t (*)(uint64_t))dlsym(lib, "usdt_cdylib_fire");
    bool (*enabled)(void) = (bool (*)(void))dlsym(lib, "usdt_cdylib_lazy_enabled");
    if (!fire || !enabled) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        return 1;
    }
    printf("loaded\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return 1;
    for (int i = 0; !enabled(); i++) {
        if (i == 6000) {
            fprintf(stderr, "the lazy probe's semaphore was never raised\n");
            return 1;
        }
        usleep(10000);
    }
    uint64_t n = strtoull(argv[2], NULL, 10);
    uint64_t runs = fire(n);
    printf("fired %llu runs=%llu\n", (unsigned long long)n, (unsigned long long)runs);
    return 0;
}
