/* A process with threads, for tests/trace.rs.
 *
 *   threads
 *       starts 3 threads, prints "ready PID", waits for a line on stdin,
 *       then each thread N (1..3) and the main thread (0) fires
 *       thr:hit(N, I) for I in 0..3; prints "done" and waits for the end of
 *       its input.
 */
#include <pthread.h>
#include <stdio.h>
#include <sys/sdt.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t start = PTHREAD_COND_INITIALIZER;
static int go;

static void fire(long id) {
    for (long i = 0; i < 3; i++)
        STAP_PROBE2(thr, hit, id, i);
}

static void *run(void *arg) {
    pthread_mutex_lock(&lock);
    while (!go)
        pthread_cond_wait(&start, &lock);
    pthread_mutex_unlock(&lock);
    fire((long)arg);
    return NULL;
}

int main(void) {
    pthread_t t[3];
    char line[16];
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, run, (void *)(i + 1));
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        return 1;
    pthread_mutex_lock(&lock);
    go = 1;
    pthread_cond_broadcast(&start);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    fire(0);
    printf("done\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin))
        ;
    return 0;
}
