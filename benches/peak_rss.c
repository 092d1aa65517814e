/*
 * peak_rss.c - run a command and write its peak resident set size (KiB) to a
 * file: wait4(2)'s ru_maxrss of the command, which on Linux is the largest of
 * it and the descendants it waited for (so the biggest single process of the
 * tree, not their sum).  What `/usr/bin/time -f %M` prints, without needing
 * GNU time.
 *
 * Why a separate program: a process's ru_maxrss starts from the memory of the
 * process that spawned it (Linux records the old address space's high-water
 * mark at exec, and posix_spawn shares the parent's), so a receiver spawned
 * by `berth bench` directly would report at least the bench's own peak RSS.
 * Spawned by this small program with fork, it starts from this program's
 * (a few hundred KiB).
 *
 *   peak_rss OUT COMMAND [ARG...]
 *
 * stdin, stdout and stderr are the command's; exits with its status (128 + the
 * signal for a signal, 127 when it cannot be run).
 *
 * Build: cc -O2 -o peak_rss peak_rss.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: peak_rss OUT COMMAND [ARG...]\n");
		return 127;
	}
	pid_t pid = fork();
	if (pid < 0) {
		perror("peak_rss: fork");
		return 127;
	}
	if (pid == 0) {
		execvp(argv[2], argv + 2);
		perror("peak_rss: exec");
		_exit(127);
	}
	int status;
	struct rusage ru;
	while (wait4(pid, &status, 0, &ru) < 0) {
		if (errno != EINTR) {
			perror("peak_rss: wait4");
			return 127;
		}
	}
	FILE *out = fopen(argv[1], "w");
	if (!out || fprintf(out, "%ld\n", ru.ru_maxrss) < 0 || fclose(out)) {
		perror("peak_rss: writing the result");
		return 127;
	}
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 127;
}
