/* Thousands of probe sites, for tests/safety.rs: long attaches to
 * interrupt.
 *
 * usage: many     prints `ready PID SITE-SEMAPHORE ONE-SEMAPHORE`, then every
 *                 millisecond fires many:one (one site) and, while its
 *                 semaphore is raised, the 4000 sites of many:site, until
 *                 its input closes (at most 120 s).
 *
 * Both arguments are in memory (volatile locals), so `usdt trace` defines a
 * fetch event (a tracefs uprobe event) per site.
 */
#define _SDT_HAS_SEMAPHORES 1
#include <fcntl.h>
#include <stdio.h>
#include <sys/sdt.h>
#include <unistd.h>

__extension__ unsigned short many_site_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));
__extension__ unsigned short many_one_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));

#define R4(x) x x x x
#define R10(x) x x x x x x x x x x
#define SITE STAP_PROBE1(many, site, v);

__attribute__((noinline)) static void fire(long i) {
    volatile long v = i;
    R4(R10(R10(R10(SITE))))
}

__attribute__((noinline)) static void one(long i) {
    volatile long v = i;
    STAP_PROBE1(many, one, v);
}

int main(void) {
    printf("ready %d %p %p\n", (int)getpid(), (void *)&many_site_semaphore,
           (void *)&many_one_semaphore);
    fflush(stdout);
    alarm(120);
    fcntl(0, F_SETFL, O_NONBLOCK);
    for (long i = 0;; i++) {
        char c;
        if (read(0, &c, 1) == 0)
            return 0;
        if (many_site_semaphore)
            fire(i);
        if (many_one_semaphore)
            one(i);
        usleep(1000);
    }
}
