/* poll_server: one thread, one poll(2) loop, several clients at once (an echo server), with
 * librdmaxfer's descriptors and non-blocking calls; and its client.
 *   server: poll_server -l ADDR [-c CLIENTS] [options]
 *           listens (-p 0: on a free port the system chooses; the port is printed), echoes
 *           every message back to its sender, and exits 0 once CLIENTS clients (default 2)
 *           have come and gone.
 *   client: poll_server [-n ITERS] [-s SIZE] [-P] [options] HOST
 *           ITERS round trips (default 100) of SIZE-byte messages (default 64), each echo
 *           checked; -P: after the first one, prints "paused" and waits for SIGUSR1 (so a test
 *           can show the server serving another client meanwhile). Over RDMA CM it connects
 *           without blocking: rdmaxfer_connect_start, then poll(2) on rdmaxfer_connecting_fd
 *           and rdmaxfer_connecting_try_finish until connected.
 * The server: rdmaxfer_listener_fd and each rdmaxfer_conn_fd go into one pollfd array;
 * rdmaxfer_listener_try_accept, rdmaxfer_conn_try_recv and rdmaxfer_conn_try_send return
 * RDMAXFER_ERR_AGAIN when nothing is ready. Connections need event mode for their descriptor. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <signal.h>

#include "common.h"

#define MAX_CLIENTS 16

struct client {
    struct rdmaxfer_conn *conn;
    int fd;
    unsigned id;
    unsigned long long echoed;
    unsigned char *buf;
    size_t cap;
    int has_pending;    /* buf holds a message still to echo (the send found no credit yet) */
    size_t pending_len;
};

static void usage(void)
{
    fprintf(stderr, "usage: poll_server -l ADDR [-c CLIENTS] " CONN_USAGE "\n"
                    "       poll_server [-n ITERS] [-s SIZE] [-P] " CONN_USAGE " HOST\n");
    exit(2);
}

/* Handles what is ready on one client: echoes what it can, until the library says AGAIN.
 * Returns 1 when the client is gone (and freed). */
static int serve_ready(struct client *c)
{
    enum rdmaxfer_status st;
    for (;;) {
        if (c->has_pending) {
            st = rdmaxfer_conn_try_send(c->conn, c->buf, c->pending_len);
            if (st == RDMAXFER_ERR_AGAIN)
                return 0; /* the descriptor wakes us when the credit comes back */
            if (st != RDMAXFER_OK)
                break;
            c->has_pending = 0;
            c->echoed++;
        }
        st = rdmaxfer_conn_try_recv(c->conn, c->buf, c->cap, &c->pending_len);
        if (st == RDMAXFER_ERR_AGAIN)
            return 0;
        if (st != RDMAXFER_OK)
            break;
        c->has_pending = 1;
    }
    if (st == RDMAXFER_ERR_CONNECTION)
        fprintf(stderr, "client %u disconnected after %llu echoes\n", c->id, c->echoed);
    else
        fprintf(stderr, "client %u: %s: %s; dropping it\n", c->id, rdmaxfer_strerror(st),
                rdmaxfer_last_error_message());
    rdmaxfer_conn_free(c->conn);
    return 1;
}

/* Accepts every pending client. */
static void accept_ready(struct rdmaxfer_listener *l, struct client *cl, unsigned *n, unsigned *next_id)
{
    for (;;) {
        struct rdmaxfer_conn *conn = NULL;
        enum rdmaxfer_status st = rdmaxfer_listener_try_accept(l, &conn);
        if (st == RDMAXFER_ERR_AGAIN)
            return;
        if (st != RDMAXFER_OK) {
            /* One client's failed handshake; the listener goes on. */
            fprintf(stderr, "accept: %s: %s\n", rdmaxfer_strerror(st), rdmaxfer_last_error_message());
            continue;
        }
        if (*n == MAX_CLIENTS) {
            fprintf(stderr, "too many clients; closing the new one\n");
            rdmaxfer_conn_free(conn);
            continue;
        }
        struct client *c = &cl[(*n)++];
        memset(c, 0, sizeof *c);
        c->conn = conn;
        c->id = (*next_id)++;
        CHECK(rdmaxfer_conn_max_msg_size(conn, &c->cap));
        c->buf = malloc(c->cap);
        if (!c->buf) {
            fprintf(stderr, "error: out of memory\n");
            exit(1);
        }
        CHECK(rdmaxfer_conn_fd(conn, &c->fd));
        fprintf(stderr, "client %u connected\n", c->id);
        /* The rule for a new descriptor: take what is already there before polling. */
        if (serve_ready(c)) {
            free(c->buf);
            *c = cl[--(*n)];
        }
    }
}

static int server(const struct conn_opts *co, const char *addr, unsigned clients)
{
    struct rdmaxfer_config *cfg = make_config(co);
    CHECK(rdmaxfer_config_set_event_mode(cfg, 1)); /* connections need it for rdmaxfer_conn_fd */
    struct rdmaxfer_listener *l = NULL;
    uint16_t port = 0;
    CHECK(rdmaxfer_listen(cfg, addr, (uint16_t)co->port, &l));
    rdmaxfer_config_free(cfg);
    CHECK(rdmaxfer_listener_port(l, &port));
    int lfd = -1;
    CHECK(rdmaxfer_listener_fd(l, &lfd));
    fprintf(stderr, "listening on %s:%u\n", addr, (unsigned)port);

    struct client cl[MAX_CLIENTS];
    unsigned n = 0, next_id = 1, done = 0;
    while (done < clients) {
        struct pollfd pfd[1 + MAX_CLIENTS];
        pfd[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (unsigned i = 0; i < n; i++)
            pfd[1 + i] = (struct pollfd){.fd = cl[i].fd, .events = POLLIN};
        if (poll(pfd, 1 + n, -1) < 0) {
            if (errno == EINTR)
                continue;
            perror("poll");
            return 1;
        }
        /* Clients first (their pfd indexes match cl until one is removed), from the end so a
         * removal (the last client moves into the hole) does not skip one. */
        for (unsigned i = n; i-- > 0;) {
            if (pfd[1 + i].revents && serve_ready(&cl[i])) {
                free(cl[i].buf);
                cl[i] = cl[--n];
                done++;
            }
        }
        if (pfd[0].revents)
            accept_ready(l, cl, &n, &next_id);
    }
    rdmaxfer_listener_free(l);
    for (unsigned i = 0; i < n; i++) {
        rdmaxfer_conn_free(cl[i].conn);
        free(cl[i].buf);
    }
    printf("served %u clients\n", done);
    return 0;
}

static int client(const struct conn_opts *co, const char *host, unsigned long long iters, size_t size,
                  int pause_after_first)
{
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    /* Blocked before anything can send it; sigwait takes it. */
    if (pause_after_first && sigprocmask(SIG_BLOCK, &usr1, NULL) != 0) {
        perror("sigprocmask");
        return 1;
    }
    struct rdmaxfer_config *cfg = make_config(co);
    struct rdmaxfer_conn *conn = NULL;
    if (co->oob) {
        CHECK(rdmaxfer_connect(cfg, host, 0, &conn));
        fprintf(stderr, "connected to %s\n", host);
    } else {
        struct rdmaxfer_connecting *cn = NULL;
        CHECK(rdmaxfer_connect_start(cfg, host, RDMAXFER_PORT_CONFIGURED, &cn));
        struct pollfd pfd = {.fd = -1, .events = POLLIN};
        CHECK(rdmaxfer_connecting_fd(cn, &pfd.fd));
        unsigned polls = 0;
        enum rdmaxfer_status st;
        while ((st = rdmaxfer_connecting_try_finish(cn, &conn)) == RDMAXFER_ERR_AGAIN) {
            polls++;
            if (poll(&pfd, 1, co->timeout_ms ? (int)co->timeout_ms : 10000) != 1) {
                fprintf(stderr, "error: the connect made no progress in time\n");
                return 1;
            }
        }
        if (st != RDMAXFER_OK)
            die("rdmaxfer_connecting_try_finish", st);
        rdmaxfer_connecting_free(cn);
        fprintf(stderr, "connected to %s without blocking (%u polls)\n", host, polls);
    }
    rdmaxfer_config_free(cfg);
    unsigned char *msg = malloc(size ? size : 1), *back = malloc(size ? size : 1);
    if (!msg || !back) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    for (unsigned long long i = 0; i < iters; i++) {
        for (size_t j = 0; j < size; j++)
            msg[j] = (unsigned char)(i * 31 + j);
        size_t len = 0;
        CHECK(rdmaxfer_send(conn, msg, size));
        CHECK(rdmaxfer_recv(conn, back, size, &len));
        if (len != size || memcmp(msg, back, size) != 0) {
            fprintf(stderr, "error: echo %llu differs (%zu bytes back)\n", i + 1, len);
            return 1;
        }
        if (i == 0 && pause_after_first) {
            fprintf(stderr, "round trip 1 ok; paused\n");
            int sig = 0;
            if (sigwait(&usr1, &sig) != 0) {
                fprintf(stderr, "error: sigwait\n");
                return 1;
            }
        }
    }
    CHECK(rdmaxfer_conn_close(conn));
    free(msg);
    free(back);
    printf("%llu round trips of %zu bytes ok\n", iters, size);
    return 0;
}

int main(int argc, char **argv)
{
    struct conn_opts co = conn_opts_default();
    const char *listen_addr = NULL;
    unsigned clients = 2;
    unsigned long long iters = 100;
    size_t size = 64;
    int pause_after_first = 0;
    int c;
    while ((c = getopt(argc, argv, "l:c:n:s:P" CONN_OPTS)) != -1) {
        if (conn_opt(&co, c, optarg))
            continue;
        switch (c) {
        case 'l': listen_addr = optarg; break;
        case 'c': clients = (unsigned)strtoul(optarg, NULL, 10); break;
        case 'n': iters = strtoull(optarg, NULL, 10); break;
        case 's': size = (size_t)strtoull(optarg, NULL, 10); break;
        case 'P': pause_after_first = 1; break;
        default: usage();
        }
    }
    if ((listen_addr == NULL) == (optind >= argc))
        usage();
    if (listen_addr)
        return server(&co, listen_addr, clients);
    return client(&co, argv[optind], iters, size, pause_after_first);
}
