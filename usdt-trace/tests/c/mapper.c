/* A process that maps what a probe reader must not read whole, for
 * tests/safety.rs: /dev/zero (endless) and a sparse 1 GiB file.
 *
 * usage: mapper SPARSE-FILE    creates the file, maps both, prints
 *                              `ready`, fires mp:tick and waits for its
 *                              input to close.
 */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/sdt.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    int zero = open("/dev/zero", O_RDONLY);
    void *z = mmap(0, 1 << 20, PROT_READ, MAP_PRIVATE, zero, 0);
    int big = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (zero < 0 || big < 0 || z == MAP_FAILED || ftruncate(big, 1L << 30) != 0)
        return 3;
    void *b = mmap(0, 1L << 30, PROT_READ, MAP_SHARED, big, 0);
    if (b == MAP_FAILED)
        return 4;
    alarm(120);
    printf("ready\n");
    fflush(stdout);
    STAP_PROBE(mp, tick);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    return 0;
}
