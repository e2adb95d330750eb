/* rw_demo: the RDMA read/write demo on librdmaxfer. One side exposes a buffer; the other RDMA
 * WRITEs a message into it, RDMA READs it back and checks it.
 *   server: rw_demo -l ADDR [-s SIZE] [options]        (like `rdmaxfer expose --once`)
 *   client: rw_demo [-m MESSAGE] [-o OFFSET] [options] HOST   (against either server) */
#include "common.h"

static void usage(void)
{
    fprintf(stderr, "usage: rw_demo [-l ADDR] [-s SIZE] [-m MESSAGE] [-o OFFSET] " CONN_USAGE " [HOST]\n");
    exit(2);
}

static int serve(const struct rdmaxfer_config *cfg, const char *addr, uint16_t port, size_t size)
{
    struct rdmaxfer_conn *conn = accept_one(cfg, addr, port);
    unsigned char *data = calloc(size, 1);
    if (!data) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    struct rdmaxfer_expose_report rep = {.struct_size = sizeof rep};
    CHECK(rdmaxfer_expose(conn, data, size, RDMAXFER_ACCESS_READ_WRITE, &rep));
    printf("peer wrote %llu bytes, read %llu bytes, %s; %llu bytes changed in %u ranges\n",
           (unsigned long long)rep.written, (unsigned long long)rep.read,
           rep.ok ? "done" : "reported a failure", (unsigned long long)rep.changed_bytes,
           rep.changed_ranges);
    size_t start = 0;
    while (start < size && data[start] == 0)
        start++;
    size_t end = start;
    while (end < size && data[end] >= 0x20 && data[end] < 0x7f)
        end++;
    printf("buffer at %zu: \"%.*s\"\n", start, (int)(end - start), (const char *)data + start);
    free(data);
    rdmaxfer_conn_free(conn);
    return rep.ok ? 0 : 1;
}

/* Calls `call`; on a failure, reports it (with its OS error and completion status) and goes to
 * `out`, where everything made so far is freed. */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        enum rdmaxfer_status st_ = (call);                                                         \
        if (st_ != RDMAXFER_OK) {                                                                  \
            report(#call, st_);                                                                    \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

static int client(const struct rdmaxfer_config *cfg, const char *host, const char *msg, uint64_t offset)
{
    size_t n = strlen(msg);
    int rc = 1, same = 0;
    struct rdmaxfer_conn *conn = NULL;
    struct rdmaxfer_remote *remote = NULL;
    struct rdmaxfer_buf *buf = NULL;
    char *zero = calloc(n, 1), *back = malloc(n);
    if (!zero || !back) {
        fprintf(stderr, "error: out of memory\n");
        goto out;
    }
    TRY(rdmaxfer_connect(cfg, host, 0, &conn));
    TRY(rdmaxfer_remote_open(conn, &remote));
    printf("peer exposes %llu bytes (access %u)\n", (unsigned long long)rdmaxfer_remote_len(remote),
           rdmaxfer_remote_access(remote));
    TRY(rdmaxfer_buf_new(conn, n, &buf));
    TRY(rdmaxfer_buf_write(buf, 0, msg, n));
    TRY(rdmaxfer_rdma_write(conn, remote, offset, buf, 0, n));
    printf("wrote %zu bytes at offset %llu\n", n, (unsigned long long)offset);

    TRY(rdmaxfer_buf_write(buf, 0, zero, n));
    TRY(rdmaxfer_rdma_read(conn, remote, offset, buf, 0, n));
    TRY(rdmaxfer_buf_read(buf, 0, back, n));
    same = memcmp(back, msg, n) == 0;
    printf("read back %zu bytes: %s\n", n, same ? "verified" : "MISMATCH");

    TRY(rdmaxfer_remote_close(conn, remote));
    enum rdmaxfer_status st = rdmaxfer_conn_close(conn);
    conn = NULL; /* rdmaxfer_conn_close frees it, also when it fails */
    if (st != RDMAXFER_OK) {
        report("rdmaxfer_conn_close(conn)", st);
        goto out;
    }
    rc = same ? 0 : 1;
out:
    /* Each free takes NULL; freeing a conn that was not closed drops the connection. */
    rdmaxfer_remote_free(remote);
    rdmaxfer_buf_free(buf);
    rdmaxfer_conn_free(conn);
    free(zero);
    free(back);
    return rc;
}

int main(int argc, char **argv)
{
    struct conn_opts co = conn_opts_default();
    const char *listen_addr = NULL, *msg = "RDMA_Read_Write_Demo";
    size_t size = 4096;
    uint64_t offset = 0;
    int c;
    while ((c = getopt(argc, argv, "l:s:m:o:" CONN_OPTS)) != -1) {
        if (conn_opt(&co, c, optarg))
            continue;
        switch (c) {
        case 'l': listen_addr = optarg; break;
        case 's': size = (size_t)strtoull(optarg, NULL, 10); break;
        case 'm': msg = optarg; break;
        case 'o': offset = strtoull(optarg, NULL, 10); break;
        default: usage();
        }
    }
    if ((listen_addr == NULL) == (optind >= argc) || size == 0 || msg[0] == '\0')
        usage();
    struct rdmaxfer_config *cfg = make_config(&co);
    int rc = listen_addr ? serve(cfg, listen_addr, (uint16_t)co.port, size) : client(cfg, argv[optind], msg, offset);
    rdmaxfer_config_free(cfg);
    return rc;
}
