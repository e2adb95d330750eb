/* file_recv: receive what one `rdmaxfer send` (or file_send) sends into a directory.
 *   file_recv [-l ADDR] [-f] [options] OUT_DIR */
#include "common.h"

int main(int argc, char **argv)
{
    struct conn_opts co = conn_opts_default();
    const char *listen_addr = "0.0.0.0";
    uint32_t flags = 0;
    int c;
    while ((c = getopt(argc, argv, "l:f" CONN_OPTS)) != -1) {
        if (conn_opt(&co, c, optarg))
            continue;
        switch (c) {
        case 'l': listen_addr = optarg; break;
        case 'f': flags |= RDMAXFER_RECV_FORCE; break;
        default:
            fprintf(stderr, "usage: file_recv [-l ADDR] [-f] " CONN_USAGE " OUT_DIR\n");
            return 2;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "usage: file_recv [-l ADDR] [-f] " CONN_USAGE " OUT_DIR\n");
        return 2;
    }
    struct rdmaxfer_config *cfg = make_config(&co);
    struct rdmaxfer_conn *conn = accept_one(cfg, listen_addr, (uint16_t)co.port);
    rdmaxfer_config_free(cfg);

    struct rdmaxfer_recv_summary s = {.struct_size = sizeof s};
    enum rdmaxfer_status st = rdmaxfer_recv_file(conn, argv[optind], flags, &s);
    if (st != RDMAXFER_OK) {
        rdmaxfer_conn_free(conn);
        die("rdmaxfer_recv_file", st);
    }
    rdmaxfer_conn_free(conn);
    printf("received %llu files, %llu bytes, verified\n", (unsigned long long)s.files,
           (unsigned long long)s.bytes);
    return 0;
}
