/* file_send: send a file or directory tree to `rdmaxfer recv` (or file_recv), verified per chunk.
 *   file_send [options] [-n STREAMS] PATH HOST
 * -n: connections carrying the transfer (files of 8 MiB or more are striped across them; 0: the
 * library's automatic choice; the receiver may grant fewer). */
#include "common.h"

struct progress {
    unsigned last_quarter;
    unsigned calls;
};

/* Called by the library as chunks go out: prints each quarter reached. */
static void on_progress(uint64_t sent, uint64_t total, void *user)
{
    struct progress *p = user;
    unsigned q = total ? (unsigned)(sent * 4 / total) : 4;
    p->calls++;
    if (q > p->last_quarter) {
        p->last_quarter = q;
        printf("progress: %llu of %llu bytes\n", (unsigned long long)sent, (unsigned long long)total);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    struct conn_opts co = conn_opts_default();
    unsigned long streams = 1;
    int c;
    while ((c = getopt(argc, argv, CONN_OPTS "n:")) != -1) {
        if (c == 'n') {
            char *end = NULL;
            streams = strtoul(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || streams > UINT32_MAX) {
                fprintf(stderr, "file_send: -n %s: not a stream count\n", optarg);
                return 2;
            }
        } else if (!conn_opt(&co, c, optarg)) {
            fprintf(stderr, "usage: file_send " CONN_USAGE " [-n STREAMS] PATH HOST\n");
            return 2;
        }
    }
    if (argc - optind != 2) {
        fprintf(stderr, "usage: file_send " CONN_USAGE " [-n STREAMS] PATH HOST\n");
        return 2;
    }
    const char *path = argv[optind], *host = argv[optind + 1];
    struct rdmaxfer_config *cfg = make_config(&co);
    /* Checked by the library: more than RDMAXFER_MAX_STREAMS is an invalid argument. */
    CHECK(rdmaxfer_config_set_streams(cfg, (uint32_t)streams));
    struct rdmaxfer_conn *conn = NULL;
    CHECK(rdmaxfer_connect(cfg, host, 0, &conn));
    rdmaxfer_config_free(cfg);

    struct progress p = {0, 0};
    enum rdmaxfer_status st = rdmaxfer_send_file(conn, path, on_progress, &p);
    if (st != RDMAXFER_OK) {
        rdmaxfer_conn_free(conn);
        die("rdmaxfer_send_file", st);
    }
    CHECK(rdmaxfer_conn_close(conn));
    printf("sent %s: verified by the receiver (%u progress calls)\n", path, p.calls);
    return 0;
}
