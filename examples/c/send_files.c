/* send_files: send files and trees to `rdmaxfer recv` with the options of `rdmaxfer send`, then
 * print what happened to each entry (rdmaxfer_send_files and rdmaxfer_report).
 *   send_files [conn options] [-F] [-U] [-I] [-K] [-R] [-N] [-X] [-L] [-c CHUNK] [-S SLOTS]
 *              [-V xxh3|blake3] [-b BYTES_PER_S] [-x PATTERN]... [-i PATTERN]...
 *              [-A BYTES] PATH... HOST
 * -F --force, -U --update, -I --ignore-existing, -K --checksum, -R --resume, -N --dry-run,
 * -X --delete, -L --copy-links; -c chunk bytes, -S slots, -V verification, -b --bwlimit;
 * -x --exclude and -i --include, in the order given.
 * -A BYTES: the progress callback stops the transfer once BYTES have gone out (the call then
 * returns RDMAXFER_ERR_ABORTED, printed as "aborted").
 * One line per entry: "entry NAME KIND OUTCOME RESULT BYTES [MESSAGE]", then the totals. Exit 0
 * when every entry was delivered or skipped, 3 when aborted, 1 otherwise. */
#include "common.h"

#include <inttypes.h>

#define USAGE                                                                                      \
    "usage: send_files " CONN_USAGE " [-FUIKRNXL] [-c CHUNK] [-S SLOTS] [-V ALGO] [-b RATE]\n"    \
    "       [-x PATTERN]... [-i PATTERN]... [-A BYTES] PATH... HOST\n"

struct progress {
    uint64_t abort_after; /* 0: never */
    uint64_t last_done, last_total;
    unsigned calls;
};

/* Called by the library as data goes out; non-zero stops the transfer. */
static int on_progress(uint64_t done, uint64_t total, void *user)
{
    struct progress *p = user;
    p->calls++;
    p->last_done = done;
    p->last_total = total;
    return p->abort_after && done >= p->abort_after;
}

static const char *outcome_name(enum rdmaxfer_outcome o)
{
    switch (o) {
    case RDMAXFER_OUTCOME_DELIVERED: return "delivered";
    case RDMAXFER_OUTCOME_SKIPPED: return "skipped";
    case RDMAXFER_OUTCOME_FAILED: return "failed";
    case RDMAXFER_OUTCOME_VANISHED: return "vanished";
    case RDMAXFER_OUTCOME_WOULD_SEND: return "would-send";
    }
    return "?";
}

static uint64_t number(const char *opt, const char *arg)
{
    char *end = NULL;
    unsigned long long v = strtoull(arg, &end, 10);
    if (*arg == '\0' || *end != '\0') {
        fprintf(stderr, "send_files: %s %s: not a number\n", opt, arg);
        exit(2);
    }
    return (uint64_t)v;
}

int main(int argc, char **argv)
{
    struct conn_opts co = conn_opts_default();
    struct rdmaxfer_send_options *so = NULL;
    CHECK(rdmaxfer_send_options_new(&so));
    uint32_t flags = 0;
    struct progress p = {0, 0, 0, 0};
    int c;
    while ((c = getopt(argc, argv, CONN_OPTS "FUIKRNXLc:S:V:b:x:i:A:")) != -1) {
        switch (c) {
        case 'F': flags |= RDMAXFER_SEND_FORCE; break;
        case 'U': flags |= RDMAXFER_SEND_UPDATE; break;
        case 'I': flags |= RDMAXFER_SEND_IGNORE_EXISTING; break;
        case 'K': flags |= RDMAXFER_SEND_CHECKSUM; break;
        case 'R': flags |= RDMAXFER_SEND_RESUME; break;
        case 'N': flags |= RDMAXFER_SEND_DRY_RUN; break;
        case 'X': flags |= RDMAXFER_SEND_DELETE; break;
        case 'L': flags |= RDMAXFER_SEND_COPY_LINKS; break;
        case 'c': CHECK(rdmaxfer_send_options_set_chunk_size(so, (uint32_t)number("-c", optarg))); break;
        case 'S': CHECK(rdmaxfer_send_options_set_slots(so, (uint32_t)number("-S", optarg))); break;
        case 'V': CHECK(rdmaxfer_send_options_set_verify(so, optarg)); break;
        case 'b': CHECK(rdmaxfer_send_options_set_bwlimit(so, number("-b", optarg))); break;
        case 'x': CHECK(rdmaxfer_send_options_add_exclude(so, optarg)); break;
        case 'i': CHECK(rdmaxfer_send_options_add_include(so, optarg)); break;
        case 'A': p.abort_after = number("-A", optarg); break;
        default:
            if (!conn_opt(&co, c, optarg)) {
                fprintf(stderr, USAGE);
                return 2;
            }
        }
    }
    if (argc - optind < 2) {
        fprintf(stderr, USAGE);
        return 2;
    }
    CHECK(rdmaxfer_send_options_set_flags(so, flags));
    const char *host = argv[argc - 1];
    const char *const *paths = (const char *const *)&argv[optind];
    size_t n_paths = (size_t)(argc - 1 - optind);

    struct rdmaxfer_config *cfg = make_config(&co);
    struct rdmaxfer_conn *conn = NULL;
    CHECK(rdmaxfer_connect(cfg, host, RDMAXFER_PORT_CONFIGURED, &conn));
    rdmaxfer_config_free(cfg);

    struct rdmaxfer_report *report = NULL;
    CHECK(rdmaxfer_report_new(&report));
    enum rdmaxfer_status st = rdmaxfer_send_files(conn, paths, n_paths, so, on_progress, &p, report);
    rdmaxfer_send_options_free(so);
    if (st != RDMAXFER_OK)
        fprintf(stderr, "rdmaxfer_send_files: %s: %s\n", rdmaxfer_strerror(st),
                rdmaxfer_last_error_message());

    size_t n = rdmaxfer_report_len(report);
    for (size_t i = 0; i < n; i++) {
        struct rdmaxfer_file_result r = {.struct_size = sizeof r};
        CHECK(rdmaxfer_report_file(report, i, &r));
        printf("entry %s %s %s %s %" PRIu64 "%s%s\n", r.name, r.kind, outcome_name(r.outcome),
               r.result, r.bytes, r.message ? " " : "", r.message ? r.message : "");
    }
    struct rdmaxfer_totals t = {.struct_size = sizeof t};
    CHECK(rdmaxfer_report_totals(report, &t));
    printf("totals: %" PRIu64 " entries, %" PRIu64 " skipped, %" PRIu64 " failed, %" PRIu64
           " planned, %" PRIu64 " deleted, %" PRIu64 " bytes\n",
           t.entries, t.skipped, t.failed, t.planned, t.deleted, t.bytes);
    printf("progress: %u calls, last %" PRIu64 " of %" PRIu64 "\n", p.calls, p.last_done,
           p.last_total);
    rdmaxfer_report_free(report);
    if (st == RDMAXFER_OK)
        CHECK(rdmaxfer_conn_close(conn));
    else
        rdmaxfer_conn_free(conn);
    if (st == RDMAXFER_ERR_ABORTED) {
        printf("aborted\n");
        return 3;
    }
    return st == RDMAXFER_OK ? 0 : 1;
}
