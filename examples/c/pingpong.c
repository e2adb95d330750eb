/* pingpong: ping-pong with `rdmaxfer pingpong` (or another copy of this program) over librdmaxfer.
 *   server: pingpong -l ADDR [-s SIZE] [-n ITERS] [options]   (serves one client)
 *   client: pingpong [-s SIZE] [-n ITERS] [options] HOST
 * Both sides need the same -s and -n. Prints ibv_rc_pingpong's result lines and RTT percentiles. */
#include "common.h"

static void usage(void)
{
    fprintf(stderr, "usage: pingpong [-l ADDR] [-s SIZE] [-n ITERS] " CONN_USAGE " [HOST]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct conn_opts co = conn_opts_default();
    const char *listen_addr = NULL;
    size_t size = 4096;
    unsigned long long iters = 1000;
    int c;
    while ((c = getopt(argc, argv, "l:s:n:" CONN_OPTS)) != -1) {
        if (conn_opt(&co, c, optarg))
            continue;
        switch (c) {
        case 'l': listen_addr = optarg; break;
        case 's': size = (size_t)strtoull(optarg, NULL, 10); break;
        case 'n': iters = strtoull(optarg, NULL, 10); break;
        default: usage();
        }
    }
    if ((listen_addr == NULL) == (optind >= argc))
        usage();

    struct rdmaxfer_config *cfg = make_config(&co);
    if (size > 8192)
        CHECK(rdmaxfer_config_set_msg_size(cfg, size));
    struct rdmaxfer_conn *conn = NULL;
    if (listen_addr) {
        conn = accept_one(cfg, listen_addr, (uint16_t)co.port);
        fprintf(stderr, "connection accepted\n");
    } else {
        CHECK(rdmaxfer_connect(cfg, argv[optind], 0, &conn));
        fprintf(stderr, "connected to %s\n", argv[optind]);
    }
    rdmaxfer_config_free(cfg);

    struct rdmaxfer_pingpong_stats s = {.struct_size = sizeof s};
    CHECK(rdmaxfer_pingpong(conn, size, iters, &s));
    CHECK(rdmaxfer_conn_close(conn));

    printf("%llu bytes in %.2f seconds = %.2f Mbit/sec\n", (unsigned long long)s.bytes, s.seconds,
           s.mbit_per_sec);
    printf("%llu iters in %.2f seconds = %.2f usec/iter\n", (unsigned long long)s.iters, s.seconds,
           s.usec_per_iter);
    printf("rtt_us: min %.2f p50 %.2f mean %.2f p99 %.2f max %.2f (checked: %s)\n", s.rtt_min_us,
           s.rtt_p50_us, s.rtt_mean_us, s.rtt_p99_us, s.rtt_max_us, s.checked ? "yes" : "no");
    return 0;
}
