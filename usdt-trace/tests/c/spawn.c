/* Starts a thread and a child process, for tests/trace.rs: tracing must not
 * make either fail (inherited uprobe events made both fail with EFAULT).
 *
 *   spawn
 *       fires spawn:hit(1) in a thread, spawn:hit(2) in a forked child and
 *       spawn:hit(0) in the main thread, printing whether pthread_create and
 *       fork worked.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/sdt.h>
#include <sys/wait.h>
#include <unistd.h>

static void *run(void *arg) {
    STAP_PROBE1(spawn, hit, (long)arg);
    return NULL;
}

int main(void) {
    pthread_t t;
    int r = pthread_create(&t, NULL, run, (void *)1);
    printf("pthread_create: %s\n", r ? strerror(r) : "ok");
    if (!r)
        pthread_join(t, NULL);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        STAP_PROBE1(spawn, hit, 2L);
        _exit(0);
    }
    if (child > 0)
        waitpid(child, NULL, 0);
    printf("fork: %s\n", child < 0 ? "failed" : "ok");
    STAP_PROBE1(spawn, hit, 0L);
    return 0;
}
