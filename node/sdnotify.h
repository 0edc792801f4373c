/* SPDX-License-Identifier: MIT */
/*
 * systemd's service notification protocol (sd_notify(3)), spoken directly:
 * one datagram of "KEY=VALUE" lines to the AF_UNIX socket named by
 * $NOTIFY_SOCKET (a path, or an abstract name when it starts with '@').
 * semqd sends READY=1 once it listens and its store is open, STOPPING=1 when
 * it begins to stop, RELOADING=1/READY=1 around a SIGHUP reload and
 * WATCHDOG=1 while both of its threads make progress (net.c). Without
 * $NOTIFY_SOCKET every call does nothing.
 */
#ifndef SEMQ_SDNOTIFY_H
#define SEMQ_SDNOTIFY_H

#include <stdint.h>

/* Sends `state` (for example "READY=1\nSTATUS=listening on ..."). SEMQ_OK,
 * SEMQ_DECLINED when $NOTIFY_SOCKET is unset, SEMQ_ERR_IO when it could not
 * be sent (the caller logs it). Any thread. */
int sdnotify_send(const char *state);

/* The watchdog period systemd expects, from $WATCHDOG_USEC (and
 * $WATCHDOG_PID, when set, naming this process), in ms; 0 when the
 * watchdog is off or the variables are malformed. */
int64_t sdnotify_watchdog_ms(void);

#endif
