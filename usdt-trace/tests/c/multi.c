/* A program for tests/multi.rs: threads, forks and a probe with a semaphore
 * (multi_guarded.c: sys/sdt.h gives a semaphore to every probe of a file or
 * to none).
 *
 *   multi
 *       prints "ready PID", then runs one command per line of stdin and
 *       answers each with one line:
 *         threads T N   starts T threads (now), each fires multi:hit N times;
 *                       joins them; "done"
 *         pool T        starts T threads that wait for `pool-run`; "pooled"
 *         pool-run N    each pool thread fires multi:hit N times; "done" once
 *                       all have
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

static pthread_barrier_t pool_go, pool_done;

static void *pooled(void *arg) {
    for (;;) {
        pthread_barrier_wait(&pool_go);
        fire((long)arg, hits_per_thread);
        pthread_barrier_wait(&pool_done);
    }
    return NULL;
}

static void pool(long t) {
    pthread_t tid;
    pthread_barrier_init(&pool_go, NULL, (unsigned)t + 1);
    pthread_barrier_init(&pool_done, NULL, (unsigned)t + 1);
    for (long i = 0; i < t; i++)
        pthread_create(&tid, NULL, pooled, (void *)i);
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
        } else if (sscanf(line, "pool-run %ld", &a) == 1) {
            hits_per_thread = a;
            pthread_barrier_wait(&pool_go);
            pthread_barrier_wait(&pool_done);
            printf("done\n");
        } else if (sscanf(line, "pool %ld", &a) == 1) {
            pool(a);
            printf("pooled\n");
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
