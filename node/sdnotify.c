/* SPDX-License-Identifier: MIT */
/*
 * sd_notify without libsystemd (see sdnotify.h): the protocol is a datagram,
 * which systemd documents as stable for other implementations.
 */
#include "sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "types.h"

int sdnotify_send(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa;
	socklen_t salen;
	size_t len;
	ssize_t w;
	int fd;

	if (!path || !path[0])
		return SEMQ_DECLINED;
	len = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof sa.sun_path)
		return SEMQ_ERR_IO;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, len);
	if (path[0] == '@')
		sa.sun_path[0] = '\0'; /* abstract namespace */
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
			    (path[0] == '/'));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return SEMQ_ERR_IO;
	do
		w = sendto(fd, state, strlen(state), MSG_NOSIGNAL,
			   (struct sockaddr *)&sa, salen);
	while (w < 0 && errno == EINTR);
	close(fd);
	return w == (ssize_t)strlen(state) ? SEMQ_OK : SEMQ_ERR_IO;
}

int64_t sdnotify_watchdog_ms(void)
{
	const char *us = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
	char *end;
	unsigned long long v;

	if (!us || !us[0])
		return 0;
	if (pid && pid[0]) {
		unsigned long long p;

		errno = 0;
		p = strtoull(pid, &end, 10);
		if (errno || *end || p != (unsigned long long)getpid())
			return 0;
	}
	errno = 0;
	v = strtoull(us, &end, 10);
	if (errno || *end || v == 0)
		return 0;
	return (int64_t)(v / 1000) ? (int64_t)(v / 1000) : 1;
}
