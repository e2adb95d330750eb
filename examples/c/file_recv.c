/* file_recv: receive what one `rdmaxfer send` (or file_send, send_files) sends into a directory,
 * with the receive options of `rdmaxfer recv` (rdmaxfer_recv_files), and print each entry that
 * did not arrive (from the rdmaxfer_report).
 *   file_recv [-l ADDR] [-f] [-r] [-D] [-M MAX_SIZE] [-V xxh3|blake3] [options] OUT_DIR
 * -f --force, -r --resume, -D --allow-delete, -M --max-size (bytes), -V --verify. */
#include "common.h"

#include <inttypes.h>

#define USAGE "usage: file_recv [-l ADDR] [-f] [-r] [-D] [-M MAX_SIZE] [-V ALGO] " CONN_USAGE " OUT_DIR\n"

int main(int argc, char **argv)
{
    struct conn_opts co = conn_opts_default();
    const char *listen_addr = "0.0.0.0";
    struct rdmaxfer_recv_options *ro = NULL;
    CHECK(rdmaxfer_recv_options_new(&ro));
    uint32_t flags = 0;
    int c;
    while ((c = getopt(argc, argv, "l:frDM:V:" CONN_OPTS)) != -1) {
        if (conn_opt(&co, c, optarg))
            continue;
        switch (c) {
        case 'l': listen_addr = optarg; break;
        case 'f': flags |= RDMAXFER_RECV_FORCE; break;
        case 'r': flags |= RDMAXFER_RECV_RESUME; break;
        case 'D': flags |= RDMAXFER_RECV_ALLOW_DELETE; break;
        case 'M': CHECK(rdmaxfer_recv_options_set_max_size(ro, strtoull(optarg, NULL, 10))); break;
        case 'V': CHECK(rdmaxfer_recv_options_set_verify(ro, optarg)); break;
        default:
            fprintf(stderr, USAGE);
            return 2;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, USAGE);
        return 2;
    }
    CHECK(rdmaxfer_recv_options_set_flags(ro, flags));
    struct rdmaxfer_config *cfg = make_config(&co);
    struct rdmaxfer_conn *conn = accept_one(cfg, listen_addr, (uint16_t)co.port);
    rdmaxfer_config_free(cfg);

    struct rdmaxfer_report *report = NULL;
    CHECK(rdmaxfer_report_new(&report));
    enum rdmaxfer_status st = rdmaxfer_recv_files(conn, argv[optind], ro, report);
    rdmaxfer_recv_options_free(ro);
    rdmaxfer_conn_free(conn);
    for (size_t i = 0; i < rdmaxfer_report_len(report); i++) {
        struct rdmaxfer_file_result r = {.struct_size = sizeof r};
        CHECK(rdmaxfer_report_file(report, i, &r));
        if (r.outcome != RDMAXFER_OUTCOME_DELIVERED)
            printf("entry %s %s: %s\n", r.name, r.result, r.message ? r.message : "");
    }
    struct rdmaxfer_totals t = {.struct_size = sizeof t};
    CHECK(rdmaxfer_report_totals(report, &t));
    rdmaxfer_report_free(report);
    if (st != RDMAXFER_OK)
        die("rdmaxfer_recv_files", st);
    printf("received %" PRIu64 " files, %" PRIu64 " bytes, verified\n", t.entries, t.bytes);
    return 0;
}
