/* A program for tests/multi.rs: threads, forks and a probe with a semaphore
 * (multi_guarded.c: sys/sdt.h gives a semaphore to every probe of a file or
 * to none).
 *
 *   multi
 *       prints "ready PID", then runs one command per line of stdin and
 *       answers each with one line:
 *         threads T N   starts T threads (now), each fires multi:hit N times;
 *                       joins them; "done"
 *         fork N        a forked child fires multi:hit N times and exits;
 *                       "done" once it has
 *         guarded N     fires multi:guarded N times while its semaphore is
 *                       up; "guarded K" with K the hits fired
 *         sem           "sem V", the semaphore's value
 *       and exits at the end of its input.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <sys/wait.h>
#include <unistd.h>

long guarded(long n);        /* multi_guarded.c */
unsigned multi_semaphore(void);

static long hits_per_thread;

__attribute__((noinline)) static void fire(long id, long n) {
    for (long i = 0; i < n; i++)
        STAP_PROBE2(multi, hit, id, i);
}

static void *run(void *arg) {
    fire((long)arg, hits_per_thread);
    return NULL;
}

static void threads(long t, long n) {
    pthread_t tid[64];
    if (t > 64)
        t = 64;
    hits_per_thread = n;
    for (long i = 0; i < t; i++)
        pthread_create(&tid[i], NULL, run, (void *)i);
    for (long i = 0; i < t; i++)
        pthread_join(tid[i], NULL);
}

int main(void) {
    char line[64];
    long a, b;
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        if (sscanf(line, "threads %ld %ld", &a, &b) == 2) {
            threads(a, b);
            printf("done\n");
        } else if (sscanf(line, "fork %ld", &a) == 1) {
            pid_t child = fork();
            if (child == 0) {
                fire(-1, a);
                _exit(0);
            }
            waitpid(child, NULL, 0);
            printf("done\n");
        } else if (sscanf(line, "guarded %ld", &a) == 1) {
            printf("guarded %ld\n", guarded(a));
        } else if (line[0] == 's') {
            printf("sem %u\n", multi_semaphore());
        } else {
            printf("unknown command\n");
        }
        fflush(stdout);
    }
    return 0;
}
