/* A C program with sys/sdt.h probes, for the usdt-trace tests.
 *
 * usage: cdemo PLAIN GUARDED [wait]
 *   fires cdemo:plain PLAIN times and cdemo:guarded GUARDED times; cdemo:guarded
 *   has a semaphore and its argument is computed only while it is set.
 *   With a third argument, prints "ready PID" and waits for a line on stdin
 *   before firing, then prints "done" and waits for another line before exiting.
 * At exit prints "evaluated N": how often the guarded argument was computed.
 */
#include <sys/sdt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* in cdemo_guarded.c: sys/sdt.h gives every probe of a file a semaphore or none */
void fire_guarded(long n);
extern volatile long evaluated;

int main(int argc, char **argv) {
    long plain = argc > 1 ? atol(argv[1]) : 0;
    long guarded = argc > 2 ? atol(argv[2]) : 0;
    int wait = argc > 3;
    char line[16];
    if (wait) {
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) return 1;
    }
    for (long i = 0; i < plain; i++) {
        int neg = (int)-i;
        unsigned char byte = (unsigned char)i;
        STAP_PROBE3(cdemo, plain, i, neg, byte);
    }
    fire_guarded(guarded);
    if (wait) {
        printf("done\n");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) return 1;
    }
    printf("evaluated %ld\n", evaluated);
    return 0;
}
