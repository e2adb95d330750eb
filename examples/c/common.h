/* common.h: what the rdmaxfer C examples share: connection options and error reporting. */
#ifndef RDMAXFER_EXAMPLES_COMMON_H
#define RDMAXFER_EXAMPLES_COMMON_H

#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdmaxfer.h>

/* Prints what failed, the status text and the library's detail, then the causes a program can
 * act on when the failure had them: the OS error number and the work-completion status. */
static inline void report(const char *what, enum rdmaxfer_status st)
{
    fprintf(stderr, "error: %s: %s (status %d): %s", what, rdmaxfer_strerror(st), (int)st,
            rdmaxfer_last_error_message());
    int os = rdmaxfer_last_os_error(), wc = rdmaxfer_last_wc_status();
    if (os != 0)
        fprintf(stderr, " [OS error %d: %s]", os, strerror(os));
    if (wc >= 0)
        fprintf(stderr, " [work completion status %d]", wc);
    fputc('\n', stderr);
}

/* report(), then exits 1. */
static inline void die(const char *what, enum rdmaxfer_status st)
{
    report(what, st);
    exit(1);
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        enum rdmaxfer_status st_ = (call);                                                         \
        if (st_ != RDMAXFER_OK)                                                                    \
            die(#call, st_);                                                                       \
    } while (0)

/* The connection options every example takes (as the rdmaxfer CLI's):
 *   -p PORT  -d DEVICE  -g GID_INDEX  -O (out-of-band exchange)  -e (event mode)
 *   -T TIMEOUT_MS  -k TOKEN */
#define CONN_OPTS "p:d:g:OeT:k:"
#define CONN_USAGE "[-p PORT] [-d DEV] [-g GID_INDEX] [-O] [-e] [-T TIMEOUT_MS] [-k TOKEN]"

struct conn_opts {
    unsigned port;
    const char *device;
    int gid_index;
    int oob;
    int event;
    unsigned timeout_ms;
    const char *token;
};

static inline struct conn_opts conn_opts_default(void)
{
    struct conn_opts o = {RDMAXFER_DEFAULT_PORT, NULL, -1, 0, 0, 0, NULL};
    return o;
}

/* Handles one of CONN_OPTS; returns 0 when `c` is not one of them. */
static inline int conn_opt(struct conn_opts *o, int c, const char *arg)
{
    switch (c) {
    case 'p': o->port = (unsigned)strtoul(arg, NULL, 10); return 1;
    case 'd': o->device = arg; return 1;
    case 'g': o->gid_index = atoi(arg); return 1;
    case 'O': o->oob = 1; return 1;
    case 'e': o->event = 1; return 1;
    case 'T': o->timeout_ms = (unsigned)strtoul(arg, NULL, 10); return 1;
    case 'k': o->token = arg; return 1;
    default: return 0;
    }
}

/* A configuration with the options applied (the caller frees it). */
static inline struct rdmaxfer_config *make_config(const struct conn_opts *o)
{
    struct rdmaxfer_config *cfg = NULL;
    CHECK(rdmaxfer_config_new(&cfg));
    if (o->port > 65535)
        die("-p", RDMAXFER_ERR_INVALID_ARGUMENT);
    /* -p 0 is RDMAXFER_PORT_ANY: a listener gets a port the system chooses. */
    CHECK(rdmaxfer_config_set_port(cfg, (uint16_t)o->port));
    CHECK(rdmaxfer_config_set_device(cfg, o->device));
    CHECK(rdmaxfer_config_set_gid_index(cfg, o->gid_index));
    CHECK(rdmaxfer_config_set_transport(cfg, o->oob ? RDMAXFER_TRANSPORT_OOB : RDMAXFER_TRANSPORT_CM));
    CHECK(rdmaxfer_config_set_event_mode(cfg, o->event));
    if (o->timeout_ms)
        CHECK(rdmaxfer_config_set_timeout_ms(cfg, o->timeout_ms));
    CHECK(rdmaxfer_config_set_token(cfg, o->token));
    return cfg;
}

/* Listens on `addr` and `port` (RDMAXFER_PORT_CONFIGURED: the configured one, which -p 0
 * makes RDMAXFER_PORT_ANY: the system chooses; the real port is printed), says so on
 * stderr (tests wait for "listening on"), accepts one peer: rdmaxfer_accept waits at most the
 * configured timeout, so it is called again until a peer comes. */
static inline struct rdmaxfer_conn *accept_one(const struct rdmaxfer_config *cfg, const char *addr,
                                               uint16_t port)
{
    struct rdmaxfer_listener *l = NULL;
    struct rdmaxfer_conn *conn = NULL;
    CHECK(rdmaxfer_listen(cfg, addr, port, &l));
    CHECK(rdmaxfer_listener_port(l, &port));
    fprintf(stderr, "listening on %s:%u\n", addr, (unsigned)port);
    enum rdmaxfer_status st;
    while ((st = rdmaxfer_accept(l, &conn)) == RDMAXFER_ERR_TIMEOUT && conn == NULL)
        ;
    if (st != RDMAXFER_OK)
        die("rdmaxfer_accept", st);
    rdmaxfer_listener_free(l);
    return conn;
}

#endif
