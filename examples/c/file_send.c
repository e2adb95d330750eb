/* file_send: send a file or directory tree to `rdmaxfer recv` (or file_recv), verified per chunk.
 *   file_send [options] [-n STREAMS] [-D DEV1,DEV2...] PATH HOST[,HOST2...]
 * -n: connections carrying the transfer (files of 8 MiB or more are striped across them; 0: the
 * library's automatic choice; the receiver may grant fewer).
 * -D: devices the streams are placed on in turn (rdmaxfer_config_set_devices); several HOSTs: the
 * receiver's address on each rail, streams connect to them in turn
 * (rdmaxfer_config_set_stream_hosts; the connection itself goes to the first), as
 * `rdmaxfer send --streams N -d dev1,dev2 HOST1,HOST2` does. */
#include "common.h"

#define USAGE "usage: file_send " CONN_USAGE " [-n STREAMS] [-D DEV1,DEV2...] PATH HOST[,HOST2...]\n"

/* A comma-separated list split in place: `list` is modified; up to RDMAXFER_MAX_STREAMS items
 * (the library refuses more). Returns the number of items, 0 for too many or an empty item. */
static size_t split(char *list, const char *items[RDMAXFER_MAX_STREAMS])
{
    size_t n = 0;
    for (char *s = list;; ) {
        char *comma = strchr(s, ',');
        if (comma)
            *comma = '\0';
        if (*s == '\0' || n == RDMAXFER_MAX_STREAMS)
            return 0;
        items[n++] = s;
        if (!comma)
            return n;
        s = comma + 1;
    }
}

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
    char *devices = NULL;
    int c;
    while ((c = getopt(argc, argv, CONN_OPTS "n:D:")) != -1) {
        if (c == 'D') {
            devices = optarg;
        } else if (c == 'n') {
            char *end = NULL;
            streams = strtoul(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || streams > UINT32_MAX) {
                fprintf(stderr, "file_send: -n %s: not a stream count\n", optarg);
                return 2;
            }
        } else if (!conn_opt(&co, c, optarg)) {
            fprintf(stderr, USAGE);
            return 2;
        }
    }
    if (argc - optind != 2) {
        fprintf(stderr, USAGE);
        return 2;
    }
    const char *path = argv[optind];
    const char *hosts[RDMAXFER_MAX_STREAMS], *devs[RDMAXFER_MAX_STREAMS];
    size_t n_hosts = split(argv[optind + 1], hosts), n_devs = 0;
    if (n_hosts == 0 || (devices && (n_devs = split(devices, devs)) == 0)) {
        fprintf(stderr, "file_send: a list with an empty item or more than %d items\n",
                RDMAXFER_MAX_STREAMS);
        return 2;
    }
    struct rdmaxfer_config *cfg = make_config(&co);
    /* Checked by the library: more than RDMAXFER_MAX_STREAMS is an invalid argument. */
    CHECK(rdmaxfer_config_set_streams(cfg, (uint32_t)streams));
    if (devices) /* after make_config's -d: the list replaces it */
        CHECK(rdmaxfer_config_set_devices(cfg, devs, n_devs));
    if (n_hosts > 1)
        CHECK(rdmaxfer_config_set_stream_hosts(cfg, hosts, n_hosts));
    struct rdmaxfer_conn *conn = NULL;
    CHECK(rdmaxfer_connect(cfg, hosts[0], 0, &conn));
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
