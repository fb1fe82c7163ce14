/*
 * powercut.c: an LD_PRELOAD shim that makes a SIGKILL of redis-server lose
 * what a power cut would: the append-only file's data that Redis wrote but
 * had not yet fsynced.
 *
 * A write() to a file whose name holds ".aof" is kept in this process's
 * memory instead of reaching the kernel; fsync() or fdatasync() of that file
 * writes what it kept, then syncs. So the file on disk holds exactly what
 * Redis had fsynced, as after a power cut (with appendfsync everysec: up to
 * about a second less than Redis acknowledged), and a process killed with
 * SIGKILL takes the rest with it. What is kept for a file that is closed
 * unsynced is dropped, as a power cut would drop it. Writes to every other
 * file, socket or pipe go through unchanged.
 *
 * Built by redistest.PowerCutShim with the machine's C compiler:
 *   cc -shared -fPIC -O2 -o powercut.so powercut.c -ldl -lpthread
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXFD 65536

struct held {
	char *buf;
	size_t len, cap;
	int known; /* 0: not looked at yet; 1: an append-only file; -1: not */
};

static struct held fds[MAXFD];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static ssize_t (*real_write)(int, const void *, size_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_close)(int);

static void init(void) {
	if (!real_write) {
		real_write = dlsym(RTLD_NEXT, "write");
		real_fsync = dlsym(RTLD_NEXT, "fsync");
		real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
		real_close = dlsym(RTLD_NEXT, "close");
	}
}

/*
 * Redis forks to rewrite the append-only file or to snapshot while its
 * background thread may be inside fsync here, holding mu. A child that
 * inherited mu locked would wait for it at its first write and never finish
 * (and keep the server's listening socket after a crash of its parent). So
 * mu is taken before every fork and released on both sides after it.
 */
static void before_fork(void) { pthread_mutex_lock(&mu); }
static void after_fork(void) { pthread_mutex_unlock(&mu); }

__attribute__((constructor)) static void start(void) {
	init();
	pthread_atfork(before_fork, after_fork, after_fork);
}

/* tracked reports whether fd is an append-only file; mu is held. */
static int tracked(int fd) {
	char link[64], path[PATH_MAX];
	ssize_t n;
	if (fd < 0 || fd >= MAXFD)
		return 0;
	if (fds[fd].known == 0) {
		snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
		n = readlink(link, path, sizeof path - 1);
		fds[fd].known = -1;
		if (n > 0) {
			path[n] = 0;
			if (strstr(path, ".aof") != NULL)
				fds[fd].known = 1;
		}
	}
	return fds[fd].known == 1;
}

/* flush writes what is kept for fd; mu is held. */
static int flush(int fd) {
	struct held *h = &fds[fd];
	size_t off = 0;
	while (off < h->len) {
		ssize_t n = real_write(fd, h->buf + off, h->len - off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		off += (size_t)n;
	}
	h->len = 0;
	return 0;
}

ssize_t write(int fd, const void *buf, size_t count) {
	init();
	pthread_mutex_lock(&mu);
	if (!tracked(fd)) {
		pthread_mutex_unlock(&mu);
		return real_write(fd, buf, count);
	}
	struct held *h = &fds[fd];
	if (h->len + count > h->cap) {
		size_t cap = h->cap ? h->cap : 1 << 16;
		while (cap < h->len + count)
			cap *= 2;
		char *b = realloc(h->buf, cap);
		if (!b) {
			pthread_mutex_unlock(&mu);
			errno = ENOMEM;
			return -1;
		}
		h->buf = b;
		h->cap = cap;
	}
	memcpy(h->buf + h->len, buf, count);
	h->len += count;
	pthread_mutex_unlock(&mu);
	return (ssize_t)count;
}

static int sync_with(int fd, int (*real)(int)) {
	init();
	pthread_mutex_lock(&mu);
	if (tracked(fd) && flush(fd) < 0) {
		pthread_mutex_unlock(&mu);
		return -1;
	}
	pthread_mutex_unlock(&mu);
	return real(fd);
}

int fsync(int fd) { init(); return sync_with(fd, real_fsync); }
int fdatasync(int fd) { init(); return sync_with(fd, real_fdatasync); }

int close(int fd) {
	init();
	pthread_mutex_lock(&mu);
	if (fd >= 0 && fd < MAXFD) {
		fds[fd].len = 0;
		fds[fd].known = 0;
	}
	pthread_mutex_unlock(&mu);
	return real_close(fd);
}
