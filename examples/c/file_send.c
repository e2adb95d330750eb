/* file_send: send a file or directory tree to `rdmaxfer recv` (or file_recv), verified by BLAKE3.
 *   file_send [options] PATH HOST */
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
    int c;
    while ((c = getopt(argc, argv, CONN_OPTS)) != -1) {
        if (!conn_opt(&co, c, optarg)) {
            fprintf(stderr, "usage: file_send " CONN_USAGE " PATH HOST\n");
            return 2;
        }
    }
    if (argc - optind != 2) {
        fprintf(stderr, "usage: file_send " CONN_USAGE " PATH HOST\n");
        return 2;
    }
    const char *path = argv[optind], *host = argv[optind + 1];
    struct rdmaxfer_config *cfg = make_config(&co);
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
