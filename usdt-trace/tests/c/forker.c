/* A program written the way many servers are, for tests/safety.rs: it fires
 * a probe, forks without exec, and the child runs the same function.
 *
 * usage: forker N    prints `argv0=ARGV0`, fires fk:tick N times, forks;
 *                    parent and child fire it N more times; the parent
 *                    prints `child=exit=0` or `child=signal=S` and exits 0
 *                    only if the child exited 0.
 *
 * fk:tick is a hand-written nop; nop5 site (the layout this project emits)
 * whose argument is in %eax; fk:classic is a sys/sdt.h probe beside it
 * (which also provides `.stapsdt.base`).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/sdt.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) static void tick(int i) {
    __asm__ __volatile__(
        "990: .byte 0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00\n"
        ".pushsection .note.stapsdt, \"?\", \"note\"\n"
        ".balign 4\n"
        ".4byte 992f-991f, 994f-993f, 3\n"
        "991: .asciz \"stapsdt\"\n"
        "992: .balign 4\n"
        "993: .8byte 990b\n"
        ".8byte _.stapsdt.base\n"
        ".8byte 0\n"
        ".asciz \"fk\"\n"
        ".asciz \"tick\"\n"
        ".asciz \"-4@%%eax\"\n"
        "994: .balign 4\n"
        ".popsection\n"
        :
        : "a"(i)
        : "memory");
    STAP_PROBE1(fk, classic, i);
}

static void run(int n) {
    for (int i = 0; i < n; i++)
        tick(i);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    printf("argv0=%s\n", argv[0]);
    fflush(stdout);
    alarm(60);
    run(n);
    pid_t pid = fork();
    if (pid < 0)
        return 3;
    if (pid == 0) {
        run(n);
        _exit(0);
    }
    run(n);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status))
        printf("child=signal=%d\n", WTERMSIG(status));
    else
        printf("child=exit=%d\n", WEXITSTATUS(status));
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
