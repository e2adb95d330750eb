/*
 * rdmaxfer.h - the C API of librdmaxfer (RDMA over libibverbs + librdmacm): connections over
 * RDMA CM or ibv_rc_pingpong's out-of-band exchange, messages, ping-pong, registered buffers
 * with one-sided RDMA READ/WRITE against a peer's exposed buffer, and verified file transfer.
 * Build: cc prog.c $(pkg-config --cflags --libs rdmaxfer)
 * Versions: the SONAME names the ABI (librdmaxfer.so.0.MINOR while 0.x); every change a C
 * program can notice is in docs/c-changelog.md of the source.
 *
 * Conventions
 *
 * Errors. Every call that can fail returns an rdmaxfer_status; RDMAXFER_OK (0) is success and
 *   the numeric values never change. rdmaxfer_strerror(status) describes a status (static
 *   text); rdmaxfer_last_error_message() gives the detail of the last failure on the calling
 *   thread (which call, and why), valid until the next failing call on that thread;
 *   rdmaxfer_last_os_error() and rdmaxfer_last_wc_status() the errno and work-completion
 *   status behind it (0 and -1 when it had none).
 *   Out-parameters are written only on success: on failure they keep what they held. The
 *   exception: RDMAXFER_ERR_BUFFER_TOO_SMALL from rdmaxfer_recv / rdmaxfer_conn_try_recv /
 *   rdmaxfer_conn_peer_addr writes the length needed to *out_len.
 *
 * Statuses. Each function's comment lists what it returns ("Returns:") and whether it waits
 *   ("Blocks:"), in these terms. Every call that returns a status may return
 *   RDMAXFER_ERR_PANIC. "The handle statuses of h": RDMAXFER_ERR_NULL_ARGUMENT (h is NULL),
 *   RDMAXFER_ERR_INVALID_ARGUMENT (misaligned), RDMAXFER_ERR_INVALID_STATE (freed, or ended),
 *   RDMAXFER_ERR_BUSY (in another call) and RDMAXFER_ERR_PANIC (poisoned). "The pointer
 *   statuses of p": RDMAXFER_ERR_NULL_ARGUMENT (NULL where it is required) and
 *   RDMAXFER_ERR_INVALID_ARGUMENT (misaligned; a string that is not UTF-8; an empty path; a
 *   struct_size too small, see below). "The network statuses", which a call that reaches a
 *   device or the network (making listeners and connections, messages, one-sided and file
 *   transfer) may return: RDMAXFER_ERR_NO_DEVICE, RDMAXFER_ERR_DEVICE_NOT_FOUND,
 *   RDMAXFER_ERR_VERBS (rdmaxfer_last_os_error says the errno), RDMAXFER_ERR_COMPLETION
 *   (rdmaxfer_last_wc_status), RDMAXFER_ERR_TIMEOUT, RDMAXFER_ERR_CONNECTION,
 *   RDMAXFER_ERR_PROTOCOL, RDMAXFER_ERR_IO, and RDMAXFER_ERR_INVALID_ARGUMENT for settings
 *   the device or route does not fit (a port that is not active, a GID index it lacks or one
 *   without the IPv4 address RDMA CM needs, a message size over the port's, a configured
 *   device that does not reach the peer).
 *   Functions that return a value instead of a status say what they return on failure.
 *
 * Structs that can grow. A struct the caller allocates for the library to fill
 *   (rdmaxfer_pingpong_stats, _recv_summary, _device_info, _expose_report, _file_result,
 *   _totals) starts with size_t struct_size: set it to sizeof the struct before the call
 *   (`struct rdmaxfer_totals t = {.struct_size = sizeof t};`). The library writes the fields
 *   that fit in struct_size bytes and sets struct_size to the bytes it wrote, so a program
 *   built against an older header keeps working when a later release adds fields at the end;
 *   a struct_size below the struct's first release gives RDMAXFER_ERR_INVALID_ARGUMENT.
 *
 * Pointers. A handle argument is a pointer this library returned for a handle of that type
 *   (for one freed since, see Ownership). An out-parameter points to writable memory for one
 *   value of its type. A string argument is NUL-terminated and readable for the whole call. A
 *   data pointer with a length points to that many readable bytes (input) that nothing writes
 *   during the call, or writable bytes (output) that nothing else reads or writes during the
 *   call. The library checks pointers for NULL and alignment; the rest it cannot check.
 *
 * NULL. A NULL handle, string, or out-parameter where one is required gives
 *   RDMAXFER_ERR_NULL_ARGUMENT, never a crash. A data pointer may be NULL when its length is 0.
 *   Every *_free(NULL) is a no-op. Invalid values (unknown flags, bad enums, misaligned
 *   pointers, non-UTF-8 strings, ranges past the end of a buffer, a buffer or session made on
 *   another connection) give RDMAXFER_ERR_INVALID_ARGUMENT.
 *
 * Ownership. Handles (rdmaxfer_config, _listener, _conn, _buf, _remote, _device_list) are
 *   opaque; each is made by one call (*_new, rdmaxfer_listen, rdmaxfer_accept, ...) and owned by
 *   the caller until its *_free (rdmaxfer_conn_close also frees). Free each once and do not use
 *   it afterwards. The library never gives a handle's memory back to the system: it reuses a
 *   freed handle's memory for the next handle of the same type. A stale handle pointer thus
 *   never reaches freed memory: until that reuse, a call with it fails with
 *   RDMAXFER_ERR_INVALID_STATE (functions that return a value give their failure value) and a
 *   second *_free changes nothing (the last error message says "already freed"); after the
 *   reuse it reaches the new handle and acts on it (the wrong object). Handles do not depend
 *   on each other's lifetime: a connection may be freed before its buffers, a listener before
 *   the connections it accepted. Strings passed in are copied; strings returned are owned by
 *   the library (see each function).
 *
 * Threading. Any handle may be used from any thread, one call at a time: a call on a handle
 *   that is already in a call (another thread, or a callback calling back in) returns
 *   RDMAXFER_ERR_BUSY instead of waiting. Different handles may be used in parallel. A *_free
 *   takes effect at once, also on a handle in a call: later calls on it fail as above, a call
 *   already inside finishes, and what the handle holds (connection, registered memory, ...)
 *   is released when the last such call returns. rdmaxfer_conn_close on a connection in
 *   another call returns RDMAXFER_ERR_BUSY and leaves it open. Calls block the calling thread
 *   until done or until the configured per-step timeout (rdmaxfer_accept too: it returns
 *   RDMAXFER_ERR_TIMEOUT when no peer came, and may be called again). A thread blocked in
 *   rdmaxfer_accept is released by rdmaxfer_listener_shutdown (or rdmaxfer_listener_free) from
 *   another thread: it returns RDMAXFER_ERR_SHUTDOWN.
 *
 * Event loops. rdmaxfer_listener_fd, rdmaxfer_conn_fd and rdmaxfer_connecting_fd give a
 *   descriptor to poll for POLLIN (owned by the handle: never read or close it); the
 *   rdmaxfer_*_try_* calls never wait for the peer (one exception over OOB: see Blocking) and
 *   return RDMAXFER_ERR_AGAIN when nothing is ready. Descriptors are level-triggered: poll,
 *   then call the try_ function until it returns RDMAXFER_ERR_AGAIN. rdmaxfer_connect_start
 *   begins a connect that rdmaxfer_connecting_try_finish completes (RDMA CM, a numeric
 *   address).
 *   rdmaxfer_listener_try_accept answers a request (over OOB: takes the TCP connection, then
 *   exchanges the connection parameters as the bytes arrive) and finishes it in a later call,
 *   once its client completes it; a call after the configured timeout drops a client that has
 *   not.
 *   examples/c/poll_server.c serves several clients from one poll loop, and its client
 *   connects from one.
 *
 * Blocking. What waits for the network blocks the calling thread, each step at most the
 *   configured timeout: rdmaxfer_connect (and its name lookup), rdmaxfer_accept, rdmaxfer_send
 *   (for the peer's credit), rdmaxfer_recv, rdmaxfer_pingpong, rdmaxfer_conn_close,
 *   rdmaxfer_remote_open/_close, rdmaxfer_rdma_write/_read, rdmaxfer_expose and the file
 *   transfer calls. Nothing else waits: configuration, option, buffer, report and device-list
 *   calls, the *_fd and try_ calls.
 *   One exception, over OOB: the first call on a connection that needs rdmaxfer's flow
 *   control (rdmaxfer_conn_max_msg_size, rdmaxfer_conn_fd and rdmaxfer_conn_try_send/_recv
 *   too) exchanges it with the peer first, at most the configured timeout.
 *
 * fork. A child made by fork(2) must not use any handle its parent made (registered memory
 *   and queue pairs stay the parent's: the library does not call ibv_fork_init); exec, or
 *   start over in the child with new handles.
 *
 * Panics. No Rust panic crosses into C: it becomes RDMAXFER_ERR_PANIC, and the handle it
 *   happened in is poisoned (every later call on it returns RDMAXFER_ERR_PANIC; free it).
 *   Callbacks (rdmaxfer_progress_cb, rdmaxfer_transfer_cb) run on the calling thread inside
 *   the call; they must not unwind (C++ exceptions, longjmp) through the library.
 */

#ifndef RDMAXFER_H
#define RDMAXFER_H

/* Generated by ci/gen-header.sh (cbindgen 0.27.0) from src/capi/. Do not edit. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
/* RDMAXFER_VERSION: "MAJOR.MINOR.PATCH" of this header (rdmaxfer_version() gives the library's). */
#define RDMAXFER_STRINGIFY_(x) #x
#define RDMAXFER_STRINGIFY(x) RDMAXFER_STRINGIFY_(x)
#define RDMAXFER_VERSION RDMAXFER_STRINGIFY(RDMAXFER_VERSION_MAJOR) "." RDMAXFER_STRINGIFY(RDMAXFER_VERSION_MINOR) "." RDMAXFER_STRINGIFY(RDMAXFER_VERSION_PATCH)
/* RDMAXFER_VERSION_NUMBER: 0xMMmmpp (major, minor, patch), for compile-time comparisons
 * (#if RDMAXFER_VERSION_NUMBER >= 0x000100), as LIBCURL_VERSION_NUM. */
#define RDMAXFER_VERSION_NUMBER ((RDMAXFER_VERSION_MAJOR << 16) | (RDMAXFER_VERSION_MINOR << 8) | RDMAXFER_VERSION_PATCH)

/**
 * Peers may RDMA READ the exposed buffer.
 */
#define RDMAXFER_ACCESS_READ 1

/**
 * Peers may RDMA WRITE the exposed buffer.
 */
#define RDMAXFER_ACCESS_WRITE 2

/**
 * Peers may RDMA READ and WRITE the exposed buffer.
 */
#define RDMAXFER_ACCESS_READ_WRITE 3

/**
 * Set up connections with RDMA CM (the default).
 */
#define RDMAXFER_TRANSPORT_CM 0

/**
 * Set up connections with ibv_rc_pingpong's out-of-band TCP exchange.
 */
#define RDMAXFER_TRANSPORT_OOB 1

/**
 * The most streams `rdmaxfer_config_set_streams` takes.
 */
#define RDMAXFER_MAX_STREAMS 64

/**
 * The default port (RDMA CM port, or TCP port of the out-of-band exchange).
 */
#define RDMAXFER_DEFAULT_PORT 18515

/**
 * As the `port` of `rdmaxfer_listen` and `rdmaxfer_connect`: the configured port
 * (`rdmaxfer_config_set_port`; default `RDMAXFER_DEFAULT_PORT`). The same in both calls, so a
 * server and client that both pass it meet.
 */
#define RDMAXFER_PORT_CONFIGURED 0

/**
 * As the port of `rdmaxfer_config_set_port`: any free port, which the system chooses when a
 * listener binds (`rdmaxfer_listener_port` tells which); a connect with it as its port fails
 * (`RDMAXFER_ERR_INVALID_ARGUMENT`).
 */
#define RDMAXFER_PORT_ANY 0

/**
 * The smallest (and default) message size (`rdmaxfer_config_set_msg_size`).
 */
#define RDMAXFER_MIN_MSG_SIZE 8192

/**
 * `rdmaxfer_recv_file`: allow a sender to replace existing files that differ (it asks with
 * `rdmaxfer send --force` or `--update`). Identical files are skipped either way.
 */
#define RDMAXFER_RECV_FORCE 1

/**
 * `rdmaxfer_recv_file`: keep partial files and continue them when a sender resumes.
 */
#define RDMAXFER_RECV_RESUME 2

/**
 * The most entries a report lists (it counts the rest in its totals).
 */
#define RDMAXFER_REPORT_MAX_FILES 1000

/**
 * Major version of the library; the header's copy is checked against Cargo.toml at build time.
 */
#define RDMAXFER_VERSION_MAJOR 0

/**
 * Minor version.
 */
#define RDMAXFER_VERSION_MINOR 1

/**
 * Patch version.
 */
#define RDMAXFER_VERSION_PATCH 0

/**
 * `rdmaxfer_send_options_set_flags`: replace entries that exist and differ (`send --force`;
 * the receiver must allow it).
 */
#define RDMAXFER_SEND_FORCE 1

/**
 * Skip entries newer on the receiver, replace older ones (`--update`).
 */
#define RDMAXFER_SEND_UPDATE 2

/**
 * Skip every entry that exists on the receiver (`--ignore-existing`).
 */
#define RDMAXFER_SEND_IGNORE_EXISTING 4

/**
 * Compare existing files by BLAKE3 instead of size and mtime (`--checksum`).
 */
#define RDMAXFER_SEND_CHECKSUM 8

/**
 * Continue partial files the receiver kept (`--resume`).
 */
#define RDMAXFER_SEND_RESUME 16

/**
 * Say what would be sent, skipped, replaced or deleted; change nothing (`--dry-run`).
 */
#define RDMAXFER_SEND_DRY_RUN 32

/**
 * Delete what the receiver has in the sent directories and the source does not (`--delete`;
 * the receiver must allow it, `RDMAXFER_RECV_ALLOW_DELETE`).
 */
#define RDMAXFER_SEND_DELETE 64

/**
 * Send what symlinks point to instead of the links (`--copy-links`).
 */
#define RDMAXFER_SEND_COPY_LINKS 128

/**
 * `rdmaxfer_recv_options_set_flags`: let a sender delete what its directories do not have
 * (`recv --allow-delete`).
 */
#define RDMAXFER_RECV_ALLOW_DELETE 4

/**
 * What happened to one entry (`rdmaxfer_file_result.outcome`).
 */
typedef enum rdmaxfer_outcome {
  /**
   * Verified and committed (a file), made (a directory or symlink).
   */
  RDMAXFER_OUTCOME_DELIVERED = 0,
  /**
   * Nothing to do: the receiver has it (identical), or the options say to skip it.
   */
  RDMAXFER_OUTCOME_SKIPPED = 1,
  /**
   * Refused or failed (`result` names the reason, `message` the detail); nothing of it was
   * committed.
   */
  RDMAXFER_OUTCOME_FAILED = 2,
  /**
   * Gone from the sender's source between its listing and its turn.
   */
  RDMAXFER_OUTCOME_VANISHED = 3,
  /**
   * A dry run (`RDMAXFER_SEND_DRY_RUN`): would be sent (`message`: "would create" or "would
   * replace").
   */
  RDMAXFER_OUTCOME_WOULD_SEND = 4,
} rdmaxfer_outcome;

/**
 * The result of every call that can fail. The numeric values are fixed: new codes are only
 * ever added at the end.
 */
typedef enum rdmaxfer_status {
  /**
   * Success.
   */
  RDMAXFER_OK = 0,
  /**
   * A required pointer argument was NULL.
   */
  RDMAXFER_ERR_NULL_ARGUMENT = 1,
  /**
   * An argument was out of range, not UTF-8, misaligned, or does not belong with the others
   * (e.g. a buffer registered on another connection).
   */
  RDMAXFER_ERR_INVALID_ARGUMENT = 2,
  /**
   * The handle is in use by another call (another thread, or a callback calling back in).
   */
  RDMAXFER_ERR_BUSY = 3,
  /**
   * The library panicked (a bug); the handle involved is poisoned and can only be freed.
   */
  RDMAXFER_ERR_PANIC = 4,
  /**
   * There is no RDMA device on this machine.
   */
  RDMAXFER_ERR_NO_DEVICE = 5,
  /**
   * The named RDMA device does not exist.
   */
  RDMAXFER_ERR_DEVICE_NOT_FOUND = 6,
  /**
   * A verbs or rdma_cm call failed.
   */
  RDMAXFER_ERR_VERBS = 7,
  /**
   * A work request completed with an error status.
   */
  RDMAXFER_ERR_COMPLETION = 8,
  /**
   * A step ran past its deadline.
   */
  RDMAXFER_ERR_TIMEOUT = 9,
  /**
   * An offset/length lies outside the peer's exposed region.
   */
  RDMAXFER_ERR_OUT_OF_BOUNDS = 10,
  /**
   * The peer broke the protocol.
   */
  RDMAXFER_ERR_PROTOCOL = 11,
  /**
   * The peer refused or ended the connection.
   */
  RDMAXFER_ERR_CONNECTION = 12,
  /**
   * A file transfer was refused or a file failed (reason in the last error message).
   */
  RDMAXFER_ERR_REFUSED = 13,
  /**
   * A file or socket operation failed.
   */
  RDMAXFER_ERR_IO = 14,
  /**
   * The object is not in a state that allows the call (e.g. a closed session), or the handle
   * was freed.
   */
  RDMAXFER_ERR_INVALID_STATE = 15,
  /**
   * The caller's buffer is too small for the result (the needed length is in the call's
   * length out-parameter, where it has one: see `rdmaxfer_recv`).
   */
  RDMAXFER_ERR_BUFFER_TOO_SMALL = 16,
  /**
   * A non-blocking call found nothing to do yet (no connection request, no message, no
   * send credit): wait for the handle's descriptor (`rdmaxfer_listener_fd`,
   * `rdmaxfer_conn_fd`) to become readable, then call again.
   */
  RDMAXFER_ERR_AGAIN = 17,
  /**
   * The listener was shut down (`rdmaxfer_listener_shutdown` or `rdmaxfer_listener_free`,
   * possibly from another thread) before or while the call waited.
   */
  RDMAXFER_ERR_SHUTDOWN = 18,
  /**
   * The caller stopped the call (a file transfer's progress callback returned non-zero):
   * nothing it had not verified whole was committed.
   */
  RDMAXFER_ERR_ABORTED = 19,
} rdmaxfer_status;

/**
 * Memory registered on one connection (local access only): the source of RDMA WRITEs and the
 * target of RDMA READs, without copies. Its bytes are reached through `rdmaxfer_buf_write`
 * and `rdmaxfer_buf_read`, never a pointer, so freeing a connection or a failed transfer can
 * never leave the caller holding a pointer to memory the device owns.
 */
typedef struct rdmaxfer_buf rdmaxfer_buf;

/**
 * Connection settings. Made by `rdmaxfer_config_new`, freed by `rdmaxfer_config_free`;
 * `rdmaxfer_listen` and `rdmaxfer_connect` copy what they need, so it may be freed (or changed)
 * right after.
 */
typedef struct rdmaxfer_config rdmaxfer_config;

/**
 * A connected peer. Made by `rdmaxfer_accept` or `rdmaxfer_connect`; ended by
 * `rdmaxfer_conn_close` (graceful) or `rdmaxfer_conn_free`.
 */
typedef struct rdmaxfer_conn rdmaxfer_conn;

/**
 * A connect under way. Made by `rdmaxfer_connect_start`, freed by `rdmaxfer_connecting_free`
 * (which abandons a connect not yet finished).
 */
typedef struct rdmaxfer_connecting rdmaxfer_connecting;

/**
 * A snapshot of the RDMA devices. Made by `rdmaxfer_devices`, freed by
 * `rdmaxfer_device_list_free`.
 */
typedef struct rdmaxfer_device_list rdmaxfer_device_list;

/**
 * A listening endpoint (RDMA CM or out-of-band TCP). Made by `rdmaxfer_listen`, freed by
 * `rdmaxfer_listener_free`.
 */
typedef struct rdmaxfer_listener rdmaxfer_listener;

/**
 * How `rdmaxfer_recv_files` receives: the options of `rdmaxfer recv` that apply to one
 * session. Made by `rdmaxfer_recv_options_new`, freed by `rdmaxfer_recv_options_free`; a
 * transfer copies it.
 */
typedef struct rdmaxfer_recv_options rdmaxfer_recv_options;

/**
 * The client's side of a one-sided session with a peer serving an exposure (`rdmaxfer_expose`
 * or `rdmaxfer expose`). Made by `rdmaxfer_remote_open`, ended by `rdmaxfer_remote_close`,
 * freed by `rdmaxfer_remote_free`.
 */
typedef struct rdmaxfer_remote rdmaxfer_remote;

/**
 * What a transfer did, entry by entry. Made by `rdmaxfer_report_new`, filled by a transfer
 * call it is passed to, freed by `rdmaxfer_report_free`.
 */
typedef struct rdmaxfer_report rdmaxfer_report;

/**
 * How `rdmaxfer_send_files` sends: the options of `rdmaxfer send` (connections, streams and
 * devices are the connection's configuration). Made by `rdmaxfer_send_options_new`, freed by
 * `rdmaxfer_send_options_free`; a transfer copies it, so it may be changed or freed after.
 */
typedef struct rdmaxfer_send_options rdmaxfer_send_options;

/**
 * What one peer did to an exposed buffer (`rdmaxfer_expose`).
 */
typedef struct rdmaxfer_expose_report {
  /**
   * In: `sizeof` the struct as the caller knows it. Out: the bytes written (see the
   * header's conventions: the struct can grow).
   */
  size_t struct_size;
  /**
   * Bytes the peer said it wrote.
   */
  uint64_t written;
  /**
   * Bytes the peer said it read.
   */
  uint64_t read;
  /**
   * 1 when the peer ended the session saying every transfer succeeded; 0 when it reported a
   * failure or vanished (the last error message then says why). What counts as a failure is
   * the peer's to say; an `rdmaxfer_remote_*` peer counts the RDMA READs and WRITEs that
   * were posted and failed (a completion error such as a remote access error, a timeout, a
   * lost connection), not the calls it refused before posting anything (a range outside
   * the exposed buffer or its own, an access the exposure lacks, a closed session): those
   * never reached this buffer, and the C caller already had their error status.
   */
  uint32_t ok;
  /**
   * Changed byte ranges (gaps under 16 bytes merged).
   */
  uint32_t changed_ranges;
  /**
   * Bytes inside those ranges.
   */
  uint64_t changed_bytes;
} rdmaxfer_expose_report;

/**
 * Results of `rdmaxfer_pingpong` (times in microseconds unless named otherwise).
 */
typedef struct rdmaxfer_pingpong_stats {
  /**
   * In: `sizeof` the struct as the caller knows it. Out: the bytes written (see the
   * header's conventions: the struct can grow).
   */
  size_t struct_size;
  /**
   * Message size in bytes.
   */
  uint64_t size;
  /**
   * Round trips.
   */
  uint64_t iters;
  /**
   * Bytes moved both ways (size × iters × 2, as ibv_rc_pingpong counts).
   */
  uint64_t bytes;
  /**
   * Wall time of the loop, seconds.
   */
  double seconds;
  /**
   * bytes × 8 / µs.
   */
  double mbit_per_sec;
  /**
   * µs per round trip (ibv_rc_pingpong's usec/iter).
   */
  double usec_per_iter;
  /**
   * CPU seconds (user + system) the process used during the loop.
   */
  double cpu_seconds;
  /**
   * Smallest round trip.
   */
  double rtt_min_us;
  /**
   * Median round trip.
   */
  double rtt_p50_us;
  /**
   * Mean round trip.
   */
  double rtt_mean_us;
  /**
   * 99th percentile round trip.
   */
  double rtt_p99_us;
  /**
   * 99.9th percentile round trip.
   */
  double rtt_p999_us;
  /**
   * Largest round trip.
   */
  double rtt_max_us;
  /**
   * 1 when every received message was checked (client: always; server: rdmaxfer peers).
   */
  uint32_t checked;
} rdmaxfer_pingpong_stats;

/**
 * One device of an `rdmaxfer_device_list`. The strings belong to the list and live until it
 * is freed.
 */
typedef struct rdmaxfer_device_info {
  /**
   * In: `sizeof` the struct as the caller knows it. Out: the bytes written (see the
   * header's conventions: the struct can grow).
   */
  size_t struct_size;
  /**
   * Device name, e.g. "rxe0".
   */
  const char *name;
  /**
   * Node GUID, "xxxx:xxxx:xxxx:xxxx".
   */
  const char *node_guid;
  /**
   * Transport: "InfiniBand", "iWARP", ...
   */
  const char *transport;
  /**
   * Number of ports.
   */
  uint32_t ports;
  /**
   * Ports whose state is ACTIVE.
   */
  uint32_t active_ports;
  /**
   * Populated GID table entries over all ports.
   */
  uint32_t gids;
} rdmaxfer_device_info;

/**
 * Called by `rdmaxfer_send_file` as data goes out: bytes sent so far, bytes in total, and the
 * caller's `user` pointer. It runs on the calling thread, inside the call, with the connection
 * in use: calling back into rdmaxfer on that connection returns `RDMAXFER_ERR_BUSY`.
 */
typedef void (*rdmaxfer_progress_cb)(uint64_t sent, uint64_t total, void *user);

/**
 * What `rdmaxfer_recv_file` received.
 */
typedef struct rdmaxfer_recv_summary {
  /**
   * In: `sizeof` the struct as the caller knows it. Out: the bytes written (see the
   * header's conventions: the struct can grow).
   */
  size_t struct_size;
  /**
   * Entries the sender announced: all verified and committed, or skipped (already here).
   */
  uint64_t files;
  /**
   * Bytes moved by RDMA.
   */
  uint64_t bytes;
} rdmaxfer_recv_summary;

/**
 * One entry of a report (`rdmaxfer_report_file`; `struct_size` as the header's conventions
 * say). The strings belong to the report: valid until it is freed or filled again.
 */
typedef struct rdmaxfer_file_result {
  /**
   * In: `sizeof` the struct as the caller knows it. Out: the bytes written.
   */
  size_t struct_size;
  /**
   * The entry's name, relative, as sent (control characters escaped).
   */
  const char *name;
  /**
   * "file", "dir", "symlink" or "other".
   */
  const char *kind;
  /**
   * What happened.
   */
  enum rdmaxfer_outcome outcome;
  /**
   * "ok", "skipped", "vanished", "would send", or the reason of a failure (e.g. "hash
   * mismatch", "exists").
   */
  const char *result;
  /**
   * The detail of a skip or a failure; NULL when there is none.
   */
  const char *message;
  /**
   * The file's size in bytes.
   */
  uint64_t bytes;
} rdmaxfer_file_result;

/**
 * A report's totals (`rdmaxfer_report_totals`; `struct_size` as the header's conventions
 * say).
 */
typedef struct rdmaxfer_totals {
  /**
   * In: `sizeof` the struct as the caller knows it. Out: the bytes written.
   */
  size_t struct_size;
  /**
   * Entries announced (all of them; the report lists the first `RDMAXFER_REPORT_MAX_FILES`).
   */
  uint64_t entries;
  /**
   * Entries skipped.
   */
  uint64_t skipped;
  /**
   * Entries refused or failed (refused and vanished ones included).
   */
  uint64_t failed;
  /**
   * Entries the receiver refused before any data.
   */
  uint64_t refused;
  /**
   * Entries gone from the sender's source before their turn.
   */
  uint64_t vanished;
  /**
   * Entries a dry run would send.
   */
  uint64_t planned;
  /**
   * Entries deleted on the receiver (`RDMAXFER_SEND_DELETE`; in a dry run, that would be).
   */
  uint64_t deleted;
  /**
   * File bytes moved by RDMA in the session.
   */
  uint64_t bytes;
} rdmaxfer_totals;

/**
 * Called by `rdmaxfer_send_files` as data goes out and as each entry's verdict comes, on the
 * calling thread: file bytes sent so far, the bytes of the files to send (less those the
 * receiver skipped so far: the last call of a re-run of files it has gives `done == total`),
 * and the caller's `user`. Return 0 to go on, anything
 * else to stop the transfer: it ends at its next chunk or entry with `RDMAXFER_ERR_ABORTED`,
 * the receiver told; nothing it had not verified whole is committed (files completed before
 * stay). Calls back into rdmaxfer on the same connection return `RDMAXFER_ERR_BUSY`.
 */
typedef int (*rdmaxfer_transfer_cb)(uint64_t done, uint64_t total, void *user);

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * The detail of the last failure on the calling thread: which call failed and why (never
 * NULL; "" before any failure). The text stays valid until the next failing call on this
 * thread; copy it to keep it.
 * Returns: never fails: never NULL.
 * Blocks: no.
 */
const char *rdmaxfer_last_error_message(void);

/**
 * The OS error number (errno, e.g. `ENOMEM` from a registration over the locked-memory
 * limit) behind the last failure on the calling thread; 0 when it had none (or before any).
 * Set with the last error message, by the same calls.
 * Returns: never fails: 0 when the last failure had no errno.
 * Blocks: no.
 */
int rdmaxfer_last_os_error(void);

/**
 * The work-completion status (`enum ibv_wc_status` of libibverbs, e.g. 10 for
 * `IBV_WC_REM_ACCESS_ERR`) behind the last failure on the calling thread; -1 when it had
 * none (or before any). Set with the last error message, by the same calls.
 * Returns: never fails: -1 when the last failure had no work completion.
 * Blocks: no.
 */
int rdmaxfer_last_wc_status(void);

/**
 * Registers a zeroed buffer of `len` bytes (at least 1) on `conn`'s protection domain.
 * Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of out_buf;
 * RDMAXFER_ERR_INVALID_ARGUMENT if len is 0 or too large; RDMAXFER_ERR_VERBS if the registration
 * fails (e.g. over the locked-memory limit: rdmaxfer_last_os_error).
 * Blocks: no (it waits for no peer).
 */
enum rdmaxfer_status rdmaxfer_buf_new(struct rdmaxfer_conn *conn,
                                      size_t len,
                                      struct rdmaxfer_buf **out_buf);

/**
 * Frees a buffer (NULL: nothing).
 * Returns: nothing (NULL: a no-op; a misaligned or already freed buf: only the last error message
 * says so).
 * Blocks: no.
 */
void rdmaxfer_buf_free(struct rdmaxfer_buf *buf);

/**
 * The buffer's length in bytes (0 for NULL).
 * Returns: the length; 0 for NULL (the last error message says nothing then), and for a
 * misaligned, freed, busy or poisoned buf (it says why).
 * Blocks: no.
 */
size_t rdmaxfer_buf_len(const struct rdmaxfer_buf *buf);

/**
 * Copies `len` bytes from `src` into the buffer at `offset`.
 * Returns: RDMAXFER_OK; the handle statuses of buf; the pointer statuses of src (NULL allowed when
 * len is 0); RDMAXFER_ERR_INVALID_ARGUMENT if offset + len is past the buffer's end;
 * RDMAXFER_ERR_INVALID_STATE also when a failed transfer lost the buffer.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_buf_write(struct rdmaxfer_buf *buf,
                                        size_t offset,
                                        const void *src,
                                        size_t len);

/**
 * Copies `len` bytes of the buffer at `offset` to `dst`.
 * Returns: RDMAXFER_OK; the handle statuses of buf; the pointer statuses of dst (NULL allowed when
 * len is 0); RDMAXFER_ERR_INVALID_ARGUMENT if offset + len is past the buffer's end;
 * RDMAXFER_ERR_INVALID_STATE also when a failed transfer lost the buffer.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_buf_read(const struct rdmaxfer_buf *buf,
                                       size_t offset,
                                       void *dst,
                                       size_t len);

/**
 * Opens a one-sided session on `conn`: asks the peer to expose its buffer and learns where it
 * is, how long, and what it allows.
 * Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of out_remote; the
 * network statuses.
 * Blocks: yes, until the peer exposes its buffer, each wait at most the configured timeout.
 */
enum rdmaxfer_status rdmaxfer_remote_open(struct rdmaxfer_conn *conn,
                                          struct rdmaxfer_remote **out_remote);

/**
 * The length in bytes of the peer's exposed buffer (0 for NULL).
 * Returns: the length; 0 for NULL (the last error message says nothing then), and for a
 * misaligned, freed, busy or poisoned remote (it says why).
 * Blocks: no.
 */
uint64_t rdmaxfer_remote_len(const struct rdmaxfer_remote *remote);

/**
 * What the peer allows: `RDMAXFER_ACCESS_READ`, `_WRITE` or `_READ_WRITE` (0 for NULL).
 * Returns: the access bits; 0 for NULL (the last error message says nothing then), and for a
 * misaligned, freed, busy or poisoned remote (it says why).
 * Blocks: no.
 */
uint32_t rdmaxfer_remote_access(const struct rdmaxfer_remote *remote);

/**
 * RDMA WRITEs `len` bytes of `buf` at `buf_offset` into the peer's buffer at `remote_offset`
 * (both ranges checked first), and waits until it is done.
 * Returns: RDMAXFER_OK; the handle statuses of conn, remote and buf; RDMAXFER_ERR_INVALID_ARGUMENT
 * if remote or buf was made on another conn, the exposure does not allow writes, or buf_offset +
 * len is past buf's end; RDMAXFER_ERR_OUT_OF_BOUNDS if remote_offset + len is past the exposed
 * buffer's end; RDMAXFER_ERR_INVALID_STATE also when the session was closed or a failed transfer
 * lost buf; the network statuses.
 * Blocks: yes, until the WRITE completes, at most the configured timeout.
 */
enum rdmaxfer_status rdmaxfer_rdma_write(struct rdmaxfer_conn *conn,
                                         struct rdmaxfer_remote *remote,
                                         uint64_t remote_offset,
                                         struct rdmaxfer_buf *buf,
                                         size_t buf_offset,
                                         size_t len);

/**
 * RDMA READs `len` bytes of the peer's buffer at `remote_offset` into `buf` at `buf_offset`
 * (both ranges checked first), and waits until they are there.
 * Returns: RDMAXFER_OK; the handle statuses of conn, remote and buf; RDMAXFER_ERR_INVALID_ARGUMENT
 * if remote or buf was made on another conn, the exposure does not allow reads, or buf_offset +
 * len is past buf's end; RDMAXFER_ERR_OUT_OF_BOUNDS if remote_offset + len is past the exposed
 * buffer's end; RDMAXFER_ERR_INVALID_STATE also when the session was closed or a failed transfer
 * lost buf; the network statuses.
 * Blocks: yes, until the READ completes, at most the configured timeout.
 */
enum rdmaxfer_status rdmaxfer_rdma_read(struct rdmaxfer_conn *conn,
                                        struct rdmaxfer_remote *remote,
                                        uint64_t remote_offset,
                                        struct rdmaxfer_buf *buf,
                                        size_t buf_offset,
                                        size_t len);

/**
 * Ends the session: tells the peer how many bytes were written and read and whether every
 * transfer succeeded, and waits until it has the message. The peer then revokes its exposure.
 * Returns: RDMAXFER_OK; the handle statuses of conn and remote; RDMAXFER_ERR_INVALID_ARGUMENT if
 * remote was opened on another conn; RDMAXFER_ERR_INVALID_STATE also when the session was already
 * closed; the network statuses.
 * Blocks: yes, until the peer has the message, at most the configured timeout.
 */
enum rdmaxfer_status rdmaxfer_remote_close(struct rdmaxfer_conn *conn,
                                           struct rdmaxfer_remote *remote);

/**
 * Frees a session (NULL: nothing). Freeing it without `rdmaxfer_remote_close` leaves the peer
 * waiting until the connection ends.
 * Returns: nothing (NULL: a no-op; a misaligned or already freed remote: only the last error
 * message says so).
 * Blocks: no.
 */
void rdmaxfer_remote_free(struct rdmaxfer_remote *remote);

/**
 * Serves one session on `conn` (from `rdmaxfer_accept`): exposes a copy of `data` (`len`
 * bytes) with `access`, waits until the peer ends the session (or goes away), revokes the
 * exposure and copies what the peer left in it back to `data`. As `rdmaxfer expose` does; the
 * peer may be `rdmaxfer write`/`read` or `rdmaxfer_remote_open`.
 * Returns: RDMAXFER_OK, also when the session ended early (then out_report->ok is 0 and the last
 * error message says why); the handle statuses of conn; the pointer statuses of data and
 * out_report; RDMAXFER_ERR_INVALID_ARGUMENT if len is 0 or access is unknown; the network
 * statuses.
 * Blocks: yes, until the peer ends the session, each wait at most the configured timeout.
 */
enum rdmaxfer_status rdmaxfer_expose(struct rdmaxfer_conn *conn,
                                     void *data,
                                     size_t len,
                                     uint32_t access,
                                     struct rdmaxfer_expose_report *out_report);

/**
 * Makes a configuration with the defaults: automatic device and GID, port 18515, RDMA CM,
 * busy-polling, 10 s per step, no token, messages up to 8192 bytes.
 * Returns: RDMAXFER_OK; the pointer statuses of out_cfg; RDMAXFER_ERR_PANIC.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_config_new(struct rdmaxfer_config **out_cfg);

/**
 * Frees a configuration (NULL: nothing).
 * Returns: nothing (NULL: a no-op; a misaligned or already freed cfg: only the last error message
 * says so).
 * Blocks: no.
 */
void rdmaxfer_config_free(struct rdmaxfer_config *cfg);

/**
 * Uses RDMA device `name` (e.g. "rxe0"); NULL: automatic (the first with an active port, or
 * with RDMA CM the one that routes to the peer). Replaces a list set by
 * `rdmaxfer_config_set_devices`.
 * Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT if name is empty
 * or not UTF-8.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_config_set_device(struct rdmaxfer_config *cfg, const char *name);

/**
 * Uses the `n` RDMA devices `names[0..n]` (e.g. {"rxe0", "rxe1"}): the streams of
 * `rdmaxfer_send_file` are placed on them in turn (stream i on `names[i % n]`, as
 * `rdmaxfer send --streams N -d dev1,dev2` does), and every other use of the configuration
 * (`rdmaxfer_connect`, whose connection is stream 0; `rdmaxfer_listen`) uses `names[0]`.
 * With RDMA CM each device must route to the address its streams connect to: give each rail's
 * receiver address with `rdmaxfer_config_set_stream_hosts`. A stream whose device cannot reach
 * its address (the routing table names another device's interface) is not used: it is dropped
 * before its connect request, and the others carry the transfer. A stream lost during a
 * transfer (its rail down, its connection broken) hands its work to the others. With `rdmaxfer_config_set_streams`
 * 0 the automatic stream count allows 2 per device. `n` 0 (`names` may then be NULL):
 * automatic, as `rdmaxfer_config_set_device(cfg, NULL)`. `names` NULL with `n` > 0, or a NULL
 * entry: `RDMAXFER_ERR_NULL_ARGUMENT`; more than `RDMAXFER_MAX_STREAMS` names, an empty one or
 * one that is not UTF-8: `RDMAXFER_ERR_INVALID_ARGUMENT`. On error the configuration is left
 * as it was. The names are copied.
 * Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_NULL_ARGUMENT or
 * RDMAXFER_ERR_INVALID_ARGUMENT for a bad or misaligned names (above).
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_config_set_devices(struct rdmaxfer_config *cfg,
                                                 const char *const *names,
                                                 size_t n);

/**
 * The receiver addresses (names or IP addresses) that the streams of `rdmaxfer_send_file`
 * connect to in turn, one per rail (as `rdmaxfer send HOST1,HOST2` does): stream i (i >= 1)
 * connects to `hosts[i % n]`, on the port of the connection; stream 0 is the connection
 * itself, made by `rdmaxfer_connect` to its `host` (normally `hosts[0]`). `n` 0 (`hosts` may
 * then be NULL, the default): every stream to the connection's host. `hosts` NULL with `n` > 0,
 * or a NULL entry: `RDMAXFER_ERR_NULL_ARGUMENT`; more than `RDMAXFER_MAX_STREAMS`, an empty one
 * or one that is not UTF-8: `RDMAXFER_ERR_INVALID_ARGUMENT`. On error the configuration is
 * left as it was. The strings are copied.
 * Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_NULL_ARGUMENT or
 * RDMAXFER_ERR_INVALID_ARGUMENT for a bad or misaligned hosts (above).
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_config_set_stream_hosts(struct rdmaxfer_config *cfg,
                                                      const char *const *hosts,
                                                      size_t n);

/**
 * Uses GID table entry `index`; -1: automatic (the IPv4-mapped RoCE v2 GID).
 * Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT if index is
 * below -1.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_config_set_gid_index(struct rdmaxfer_config *cfg, int32_t index);

/**
 * The port `rdmaxfer_listen` and `rdmaxfer_connect` use when their `port` argument is
 * `RDMAXFER_PORT_CONFIGURED` (default `RDMAXFER_DEFAULT_PORT`). `RDMAXFER_PORT_ANY`: listeners
 * take any free port (`rdmaxfer_listener_port` tells which), and a connect needs its port
 * given.
 * Returns: RDMAXFER_OK; the handle statuses of cfg.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_config_set_port(struct rdmaxfer_config *cfg, uint16_t port);

/**
 * `RDMAXFER_TRANSPORT_CM` (default) or `RDMAXFER_TRANSPORT_OOB` (ibv_rc_pingpong's TCP
 * exchange; a ping-pong peer may then be ibv_rc_pingpong itself).
 * Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT for another
 * transport.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_config_set_transport(struct rdmaxfer_config *cfg, uint32_t transport);

/**
 * Path MTU in bytes (256, 512, 1024, 2048 or 4096; out-of-band transport only: with RDMA CM,
 * `rdmaxfer_listen` and `rdmaxfer_connect` refuse a configuration that sets one); 0: default
 * (1024).
 * Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT for another
 * size.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_config_set_mtu(struct rdmaxfer_config *cfg, uint32_t bytes);

/**
 * Deadline of each step (resolve, connect, accept's wait for a peer, each message and
 * completion), in milliseconds (default 10000; must be positive).
 * Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT if ms is 0.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_config_set_timeout_ms(struct rdmaxfer_config *cfg, uint32_t ms);

/**
 * Non-zero: sleep on the completion channel while waiting; 0 (default): busy-poll.
 * Returns: RDMAXFER_OK; the handle statuses of cfg.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_config_set_event_mode(struct rdmaxfer_config *cfg, int enabled);

/**
 * The file-transfer token (a receiver requires senders to know it; a sender answers with it);
 * NULL: none (authentication off). An empty string is `RDMAXFER_ERR_INVALID_ARGUMENT` and
 * leaves the configuration as it was: it would otherwise turn authentication off silently.
 * Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT if token is
 * empty or not UTF-8.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_config_set_token(struct rdmaxfer_config *cfg, const char *token);

/**
 * Largest message `rdmaxfer_send` / ping-pong may use: 8192 (`RDMAXFER_MIN_MSG_SIZE`, the
 * default and the minimum, which the file and one-sided protocols need) to 1 GiB; a size
 * outside that is `RDMAXFER_ERR_INVALID_ARGUMENT` and leaves the configuration as it was.
 * Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT outside 8192 to
 * 1 GiB.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_config_set_msg_size(struct rdmaxfer_config *cfg, size_t bytes);

/**
 * Streams (connections) `rdmaxfer_send_file` carries a transfer over, on a connection made
 * by `rdmaxfer_connect` with this configuration: it connects `n - 1` more to the same host and
 * port (each with its own QP and staging ring); a tree's files are spread over them and files
 * of 8 MiB or more are striped across them. 1 (the default): the one connection; 0: the rule
 * `rdmaxfer send` uses without `--streams` (1 for small transfers, else the CPUs, at most 2 per
 * device and at most 4); at most 64 (`RDMAXFER_MAX_STREAMS`), else
 * `RDMAXFER_ERR_INVALID_ARGUMENT` and the configuration is left as it was. The receiver may
 * grant fewer (`rdmaxfer recv --max-streams`; `rdmaxfer_recv_file` grants 1): the transfer
 * then goes on with what it grants.
 * Returns: RDMAXFER_OK; the handle statuses of cfg; RDMAXFER_ERR_INVALID_ARGUMENT if n is over 64.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_config_set_streams(struct rdmaxfer_config *cfg, uint32_t n);

/**
 * Connects to `host` (name or IP address) at `port` (`RDMAXFER_PORT_CONFIGURED`, 0: the
 * configured port; `RDMAXFER_ERR_INVALID_ARGUMENT` when that is `RDMAXFER_PORT_ANY`).
 * Returns: RDMAXFER_OK; the handle statuses of cfg; the pointer statuses of host and out_conn;
 * RDMAXFER_ERR_INVALID_ARGUMENT for an MTU set with RDMA CM (rdmaxfer_config_set_mtu), no port
 * (above) or a host that resolves to no address; RDMAXFER_ERR_REFUSED when the server refused it
 * (busy, another version); the network statuses.
 * Blocks: yes: the name lookup, then each step of the connect at most the configured timeout.
 */
enum rdmaxfer_status rdmaxfer_connect(const struct rdmaxfer_config *cfg,
                                      const char *host,
                                      uint16_t port,
                                      struct rdmaxfer_conn **out_conn);

/**
 * Ends the connection gracefully (waits until what was sent has completed or the peer has
 * disconnected, then disconnects) and frees it, whatever the status (NULL: nothing to do,
 * `RDMAXFER_OK`). A connection that another call is using is left alone and
 * `RDMAXFER_ERR_BUSY` is returned; one already freed gives `RDMAXFER_ERR_INVALID_STATE`.
 *
 * `RDMAXFER_OK` does not prove that the peer received the last messages: a peer that
 * disconnects right after its last receive may cut the acknowledgement of it, and that
 * disconnect ends the wait without an error. Only a reply from the peer proves receipt (as
 * in every rdmaxfer protocol): have the peer answer the last message before closing.
 * Returns: RDMAXFER_OK, also for NULL; RDMAXFER_ERR_INVALID_ARGUMENT (misaligned),
 * RDMAXFER_ERR_INVALID_STATE (freed) or RDMAXFER_ERR_BUSY (in another call: left open);
 * RDMAXFER_ERR_PANIC (poisoned: freed without the graceful end); the network statuses of the end
 * (the connection is freed all the same).
 * Blocks: yes, until what was sent has completed or the peer has disconnected, at most the
 * configured timeout.
 */
enum rdmaxfer_status rdmaxfer_conn_close(struct rdmaxfer_conn *conn);

/**
 * Frees a connection without waiting for the peer (NULL: nothing). Buffers and sessions made
 * on it stay valid to free.
 * Returns: nothing (NULL: a no-op; a misaligned or already freed conn: only the last error message
 * says so).
 * Blocks: no.
 */
void rdmaxfer_conn_free(struct rdmaxfer_conn *conn);

/**
 * The largest message `rdmaxfer_send` takes on this connection (ours and the peer's limit).
 * Over the out-of-band transport this first switches the connection to rdmaxfer's flow
 * control, as `rdmaxfer_send` and `rdmaxfer_recv` do (the peer must be rdmaxfer).
 * Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of out_size; over OOB,
 * the network statuses of the switch to rdmaxfer's flow control.
 * Blocks: no, except over OOB on a connection not yet switched to rdmaxfer's flow control: it
 * first exchanges it with the peer, at most the configured timeout.
 */
enum rdmaxfer_status rdmaxfer_conn_max_msg_size(const struct rdmaxfer_conn *conn, size_t *out_size);

/**
 * The peer's address of `conn` (the client's, for a connection `rdmaxfer_accept` made), as
 * text ("198.18.0.1:41234"; "[::1]:41234" for IPv6), NUL-terminated, into `buf` (`cap`
 * bytes); `*out_len` is its length without the NUL. When it does not fit (`cap` must be
 * at least length + 1), `RDMAXFER_ERR_BUFFER_TOO_SMALL` with the length in `*out_len`, `buf`
 * untouched; 48 bytes always suffice. `RDMAXFER_ERR_INVALID_STATE` when the transport did not
 * tell it. Never blocks.
 * Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of buf (NULL allowed
 * when cap is 0); the pointer statuses of out_len; RDMAXFER_ERR_BUFFER_TOO_SMALL and
 * RDMAXFER_ERR_INVALID_STATE as above.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_conn_peer_addr(const struct rdmaxfer_conn *conn,
                                             char *buf,
                                             size_t cap,
                                             size_t *out_len);

/**
 * Sends `len` bytes at `data` as one message to an rdmaxfer peer (waits for flow-control
 * credit, at most the timeout). `len` may be 0.
 * Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of data (NULL allowed
 * when len is 0); RDMAXFER_ERR_INVALID_ARGUMENT if len is over rdmaxfer_conn_max_msg_size; the
 * network statuses.
 * Blocks: yes, for a flow-control credit (over OOB, first for the switch to it), at most the
 * configured timeout.
 */
enum rdmaxfer_status rdmaxfer_send(struct rdmaxfer_conn *conn, const void *data, size_t len);

/**
 * Waits (at most the timeout) for the next message and copies it to `buf` (`cap` bytes);
 * `*out_len` is its length. A message longer than `cap` is consumed and dropped, and
 * `RDMAXFER_ERR_BUFFER_TOO_SMALL` returned with its length in `*out_len` (the one exception to
 * "out-parameters are written only on success"): a buffer of `rdmaxfer_conn_max_msg_size`
 * bytes always suffices.
 * Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of buf (NULL allowed
 * when cap is 0); the pointer statuses of out_len; RDMAXFER_ERR_BUFFER_TOO_SMALL (above); the
 * network statuses (RDMAXFER_ERR_TIMEOUT when no message came).
 * Blocks: yes, until a message arrives, at most the configured timeout.
 */
enum rdmaxfer_status rdmaxfer_recv(struct rdmaxfer_conn *conn,
                                   void *buf,
                                   size_t cap,
                                   size_t *out_len);

/**
 * Ping-pong: `iters` round trips of `size`-byte messages. The connecting side sends the pings
 * and checks each pong; the accepting side answers. Both sides need the same size and count;
 * the peer may be `rdmaxfer pingpong` (or, over the out-of-band transport, ibv_rc_pingpong).
 * Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of out_stats;
 * RDMAXFER_ERR_INVALID_ARGUMENT if size or iters is 0; the network statuses.
 * Blocks: yes, each message at most the configured timeout.
 */
enum rdmaxfer_status rdmaxfer_pingpong(struct rdmaxfer_conn *conn,
                                       size_t size,
                                       uint64_t iters,
                                       struct rdmaxfer_pingpong_stats *out_stats);

/**
 * Starts connecting to `host`, a numeric IPv4 or IPv6 address (a name would need a DNS lookup,
 * which blocks: resolve it first, or use `rdmaxfer_connect`), at `port` (as for
 * `rdmaxfer_connect`), and returns at once. RDMA CM only (a configuration with
 * `RDMAXFER_TRANSPORT_OOB`: `RDMAXFER_ERR_INVALID_ARGUMENT`). Then wait for
 * `rdmaxfer_connecting_fd` to be readable and call `rdmaxfer_connecting_try_finish`, until it
 * gives the connection or an error. The configured timeout does not apply to the steps: the
 * event loop decides how long to wait. `RDMAXFER_ERR_INVALID_ARGUMENT` for a name, OOB, an
 * MTU set or `RDMAXFER_PORT_ANY`; `RDMAXFER_ERR_NO_DEVICE`, `_DEVICE_NOT_FOUND` or
 * `_VERBS` when it cannot start (no device, or `rdma_create_id` or `rdma_resolve_addr`
 * refused); what else a connect may fail with comes from `rdmaxfer_connecting_try_finish`.
 * Returns: RDMAXFER_OK; the handle statuses of cfg; the pointer statuses of host and
 * out_connecting; RDMAXFER_ERR_INVALID_ARGUMENT, RDMAXFER_ERR_NO_DEVICE,
 * RDMAXFER_ERR_DEVICE_NOT_FOUND and RDMAXFER_ERR_VERBS as above.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_connect_start(const struct rdmaxfer_config *cfg,
                                            const char *host,
                                            uint16_t port,
                                            struct rdmaxfer_connecting **out_connecting);

/**
 * The descriptor to `poll`/`select`/epoll for the connect's next step (`POLLIN`). It belongs
 * to the connect: do not read, write or close it; it is valid until
 * `rdmaxfer_connecting_free` and, once connected, no longer says anything (the connection has
 * its own, `rdmaxfer_conn_fd`). `RDMAXFER_ERR_INVALID_STATE` once the connect has ended.
 * Returns: RDMAXFER_OK; the handle statuses of connecting; the pointer statuses of out_fd;
 * RDMAXFER_ERR_INVALID_STATE also once the connect has ended; RDMAXFER_ERR_IO if the descriptor
 * cannot be made.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_connecting_fd(const struct rdmaxfer_connecting *connecting,
                                            int *out_fd);

/**
 * Takes every step of the connect whose event has come, without waiting: `RDMAXFER_OK` with
 * the connection in `*out_conn` once connected (then free the `rdmaxfer_connecting`);
 * `RDMAXFER_ERR_AGAIN` while it is under way (wait for `rdmaxfer_connecting_fd`); another
 * status when it failed as `rdmaxfer_connect` would (refused: `RDMAXFER_ERR_CONNECTION` or
 * `RDMAXFER_ERR_REFUSED`, unreachable, ...). After either end, `RDMAXFER_ERR_INVALID_STATE`.
 * Returns: RDMAXFER_OK; the handle statuses of connecting; the pointer statuses of out_conn;
 * RDMAXFER_ERR_AGAIN while the connect is under way; RDMAXFER_ERR_INVALID_STATE also after either
 * end; RDMAXFER_ERR_REFUSED when the server refused it (busy, another version); the network
 * statuses.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_connecting_try_finish(struct rdmaxfer_connecting *connecting,
                                                    struct rdmaxfer_conn **out_conn);

/**
 * Frees a connect (NULL: nothing); one not yet finished is abandoned. A connection it gave
 * stays.
 * Returns: nothing (NULL: a no-op; a misaligned or already freed connecting: only the last error
 * message says so).
 * Blocks: no.
 */
void rdmaxfer_connecting_free(struct rdmaxfer_connecting *connecting);

/**
 * Lists the RDMA devices with their ports and GIDs. Fails with `RDMAXFER_ERR_NO_DEVICE` (the
 * last error message says how to get a Soft-RoCE device) when there is none.
 * Returns: RDMAXFER_OK; the pointer statuses of out_list; RDMAXFER_ERR_NO_DEVICE when there is
 * none; RDMAXFER_ERR_VERBS or RDMAXFER_ERR_DEVICE_NOT_FOUND when one cannot be opened or queried;
 * RDMAXFER_ERR_PANIC.
 * Blocks: no (it queries the devices, not the network).
 */
enum rdmaxfer_status rdmaxfer_devices(struct rdmaxfer_device_list **out_list);

/**
 * Number of devices in `list` (0 for NULL).
 * Returns: the count; 0 for NULL (the last error message says nothing then), and for a misaligned,
 * freed, busy or poisoned list (it says why).
 * Blocks: no.
 */
size_t rdmaxfer_device_list_len(const struct rdmaxfer_device_list *list);

/**
 * Device `index` of `list`.
 * Returns: RDMAXFER_OK; the handle statuses of list; the pointer statuses of out_info;
 * RDMAXFER_ERR_INVALID_ARGUMENT if index is past the end.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_device_list_get(const struct rdmaxfer_device_list *list,
                                              size_t index,
                                              struct rdmaxfer_device_info *out_info);

/**
 * Frees a device list (NULL: nothing).
 * Returns: nothing (NULL: a no-op; a misaligned or already freed list: only the last error message
 * says so).
 * Blocks: no.
 */
void rdmaxfer_device_list_free(struct rdmaxfer_device_list *list);

/**
 * Sends the file or directory tree at `path` to an `rdmaxfer recv` / `rdmaxfer_recv_file`
 * peer, verified per chunk (XXH3-128, the protocol's default), with the configuration's
 * token, over the streams the configuration asks for (`rdmaxfer_config_set_streams`, placed
 * in turn on the devices of `rdmaxfer_config_set_devices` and the receiver addresses of
 * `rdmaxfer_config_set_stream_hosts`; a connection made by `rdmaxfer_accept` carries one). `progress` (may be NULL) is called with
 * the bytes sent so far (of all streams, on the calling thread); `user` is passed to it
 * untouched. Inside a tree, symlinks are sent as symlinks and empty directories as directories; files the receiver already has
 * (same size and modification time) are skipped. `RDMAXFER_OK` only when every entry was
 * delivered (verified and committed) or skipped.
 * Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of path;
 * RDMAXFER_ERR_INVALID_ARGUMENT for a path that is not a file or directory, or cannot be sent by
 * its name; RDMAXFER_ERR_IO for one that cannot be listed; RDMAXFER_ERR_REFUSED when an entry or
 * the session was refused or failed (the last error message names them); the network statuses.
 * Blocks: yes, until the transfer ends; each wait for the peer at most the configured timeout.
 */
enum rdmaxfer_status rdmaxfer_send_file(struct rdmaxfer_conn *conn,
                                        const char *path,
                                        rdmaxfer_progress_cb progress,
                                        void *user);

/**
 * Receives what one sender sends on `conn` into the existing directory `out_dir`. The
 * receiving side is the accepting one: `rdmaxfer_listen` + `rdmaxfer_accept`, then this call,
 * while the sender connects (`rdmaxfer send PATH... HOST`, or `rdmaxfer_connect` +
 * `rdmaxfer_send_file`); as with `rdmaxfer recv --out DIR`, one call serves one sender's
 * session. Where files land: each entry at the relative name the sender gives it under
 * `out_dir` (a sent file `a.bin` as `out_dir/a.bin`, a sent tree `photos/` as
 * `out_dir/photos/...`), directories made as needed; names that would leave `out_dir` (`..`,
 * absolute, control characters) and symlinks that would point out of it are refused. Each
 * file is written to a temporary file in its directory, verified per chunk, fsynced and only
 * then renamed into place (a failed file leaves nothing, unless `RDMAXFER_RECV_RESUME`).
 * `flags`: `RDMAXFER_RECV_FORCE`, `RDMAXFER_RECV_RESUME` or 0. With a token in the
 * configuration the sender must know it. Files already here (same size and modification time)
 * are skipped. `RDMAXFER_OK` only when every entry arrived verified or was skipped.
 * Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of out_dir and
 * out_summary; RDMAXFER_ERR_INVALID_ARGUMENT for unknown flags or an out_dir that is not a
 * directory; RDMAXFER_ERR_IO for one that cannot be read; RDMAXFER_ERR_REFUSED when an entry or
 * the session was refused or failed (the last error message names them); the network statuses.
 * Blocks: yes, until the sender's session ends; each wait for the peer at most the configured
 * timeout.
 */
enum rdmaxfer_status rdmaxfer_recv_file(struct rdmaxfer_conn *conn,
                                        const char *out_dir,
                                        uint32_t flags,
                                        struct rdmaxfer_recv_summary *out_summary);

/**
 * Listens on `addr` (an IP address, "0.0.0.0" for all) and `port`, with RDMA CM or the
 * out-of-band exchange as `cfg` says. `RDMAXFER_PORT_CONFIGURED` (0) listens on the configured
 * port (`rdmaxfer_config_set_port`), as `rdmaxfer_connect` connects to it; configure
 * `RDMAXFER_PORT_ANY` to let the system choose a free port (`rdmaxfer_listener_port` tells
 * which). The device, GID index and message size are checked now.
 * Returns: RDMAXFER_OK; the handle statuses of cfg; the pointer statuses of addr and out_listener;
 * RDMAXFER_ERR_INVALID_ARGUMENT for an addr that is not an IP address or an MTU set with RDMA CM;
 * the network statuses.
 * Blocks: no (it binds; it waits for no peer).
 */
enum rdmaxfer_status rdmaxfer_listen(const struct rdmaxfer_config *cfg,
                                     const char *addr,
                                     uint16_t port,
                                     struct rdmaxfer_listener **out_listener);

/**
 * The port `listener` listens on (the one the system chose for `RDMAXFER_PORT_ANY`).
 * Returns: RDMAXFER_OK; the handle statuses of listener; the pointer statuses of out_port.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_listener_port(const struct rdmaxfer_listener *listener,
                                            uint16_t *out_port);

/**
 * Waits for the next peer, at most the configured timeout (`rdmaxfer_config_set_timeout_ms`,
 * default 10 s: `RDMAXFER_ERR_TIMEOUT`, and the listener stays usable: call again to keep
 * waiting), and sets the connection up (each step within the timeout too). A listener shut
 * down before or during the wait (`rdmaxfer_listener_shutdown` or `rdmaxfer_listener_free`
 * from another thread) makes it return `RDMAXFER_ERR_SHUTDOWN` at once.
 * Returns: RDMAXFER_OK; the handle statuses of listener; the pointer statuses of out_conn;
 * RDMAXFER_ERR_TIMEOUT when no peer came; RDMAXFER_ERR_SHUTDOWN (above); the network statuses.
 * Blocks: yes: for a peer, at most the configured timeout, then each set-up step at most it too.
 */
enum rdmaxfer_status rdmaxfer_accept(struct rdmaxfer_listener *listener,
                                     struct rdmaxfer_conn **out_conn);

/**
 * The descriptor to `poll`/`select`/epoll for the next peer (`POLLIN`): readable when a
 * connection request is pending, or a connection `rdmaxfer_listener_try_accept` began to
 * accept has an event (RDMA CM) or bytes to read or room to write (OOB): then call
 * `rdmaxfer_listener_try_accept`. It does not wake for a deadline: to drop stalled clients on
 * time, also call it when the configured timeout has passed. It belongs to the listener:
 * do not read, write or close it; it stays valid until `rdmaxfer_listener_free` (take it out
 * of the event loop first). Level-triggered: it stays readable until the event is taken.
 * Returns: RDMAXFER_OK; the handle statuses of listener; the pointer statuses of out_fd;
 * RDMAXFER_ERR_IO if the descriptor cannot be made.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_listener_fd(const struct rdmaxfer_listener *listener, int *out_fd);

/**
 * Accepts a peer without waiting: `RDMAXFER_ERR_AGAIN` when none is ready (wait for
 * `rdmaxfer_listener_fd` to be readable, then call again). It never blocks: a pending peer is
 * answered (RDMA CM) or its TCP connection taken (OOB, whose exchange of connection
 * parameters then goes as its bytes arrive), and left to complete across calls, so a client
 * that stalls its handshake holds nobody up. A call after the configured timeout drops a
 * client that has not completed it; past 64 under way at once, new peers are refused as busy
 * (over OOB: told so in place of the server's address, then closed). A peer whose handshake
 * fails gives that error and the listener stays usable.
 * Returns: RDMAXFER_OK; the handle statuses of listener; the pointer statuses of out_conn;
 * RDMAXFER_ERR_AGAIN when no peer is ready; RDMAXFER_ERR_SHUTDOWN once shut down; the network
 * statuses of a peer whose set-up failed.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_listener_try_accept(struct rdmaxfer_listener *listener,
                                                  struct rdmaxfer_conn **out_conn);

/**
 * Shuts the listener down, from any thread, also while another thread is blocked in
 * `rdmaxfer_accept` on it: that call returns `RDMAXFER_ERR_SHUTDOWN` at once (within one
 * wake-up of its thread), as does every later accept. The listener still has to be freed;
 * connections accepted from it are not affected. Shutting down again changes nothing. (It
 * does not make `rdmaxfer_listener_fd` readable: an event loop that wants to be woken uses
 * its own descriptor.)
 * Returns: RDMAXFER_OK, also when already shut down; RDMAXFER_ERR_NULL_ARGUMENT (NULL),
 * RDMAXFER_ERR_INVALID_ARGUMENT (misaligned), RDMAXFER_ERR_INVALID_STATE (freed),
 * RDMAXFER_ERR_PANIC; never RDMAXFER_ERR_BUSY.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_listener_shutdown(const struct rdmaxfer_listener *listener);

/**
 * Frees a listener (NULL: nothing); connections accepted from it stay usable. It is shut down
 * first, so an `rdmaxfer_accept` blocked in it on another thread returns
 * `RDMAXFER_ERR_SHUTDOWN` at once (and the listener is released when that call has returned).
 * Returns: nothing (NULL: a no-op; a misaligned or already freed listener: only the last error
 * message says so).
 * Blocks: no.
 */
void rdmaxfer_listener_free(struct rdmaxfer_listener *listener);

/**
 * The descriptor to `poll`/`select`/epoll (`POLLIN`) for this connection: readable when a
 * completion or a connection event (the peer's disconnect) may be pending. Needs a
 * connection made in event mode (`rdmaxfer_config_set_event_mode(cfg, 1)` before
 * `rdmaxfer_connect` / `rdmaxfer_listen`): `RDMAXFER_ERR_INVALID_STATE` otherwise. It belongs
 * to the connection: do not read or close it; it stays valid until the connection is freed
 * (take it out of the event loop first). Use: after getting it, and whenever it is readable,
 * call `rdmaxfer_conn_try_recv` (or `_try_send`) until it returns `RDMAXFER_ERR_AGAIN`, then
 * poll again; a blocking call on the connection in between is fine, as long as a try call
 * ends the round. Over the out-of-band transport the first call switches the connection to
 * rdmaxfer's flow control (one exchange with the peer, as `rdmaxfer_send` does).
 * Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of out_fd;
 * RDMAXFER_ERR_INVALID_STATE also for a connection not made in event mode; RDMAXFER_ERR_IO or
 * RDMAXFER_ERR_VERBS if the descriptor cannot be made or armed; over OOB, the network statuses of
 * the switch to rdmaxfer's flow control.
 * Blocks: no, except over OOB on a connection not yet switched to rdmaxfer's flow control: it
 * first exchanges it with the peer, at most the configured timeout.
 */
enum rdmaxfer_status rdmaxfer_conn_fd(struct rdmaxfer_conn *conn, int *out_fd);

/**
 * Sends `len` bytes at `data` as one message if that needs no wait (a flow-control credit and
 * a send buffer are free now): `RDMAXFER_ERR_AGAIN` otherwise, with nothing sent (the credit
 * comes back with the peer's next message or its credit return: wait for `rdmaxfer_conn_fd`).
 * The message is posted, not yet acknowledged, when this returns.
 * Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of data (NULL allowed
 * when len is 0); RDMAXFER_ERR_AGAIN when no credit or send buffer is free;
 * RDMAXFER_ERR_INVALID_ARGUMENT if len is over rdmaxfer_conn_max_msg_size; the network statuses.
 * Blocks: no, except over OOB on a connection not yet switched to rdmaxfer's flow control: it
 * first exchanges it with the peer, at most the configured timeout.
 */
enum rdmaxfer_status rdmaxfer_conn_try_send(struct rdmaxfer_conn *conn,
                                            const void *data,
                                            size_t len);

/**
 * Takes the next message if one has arrived, as `rdmaxfer_recv` does (copied to `buf`,
 * `cap` bytes; its length in `*out_len`; too long for `cap`: dropped, its length in
 * `*out_len`, `RDMAXFER_ERR_BUFFER_TOO_SMALL`); `RDMAXFER_ERR_AGAIN` when none has, and
 * `RDMAXFER_ERR_CONNECTION` once the peer has disconnected and every message it sent before
 * was taken.
 * Returns: RDMAXFER_OK; the handle statuses of conn; the pointer statuses of buf (NULL allowed
 * when cap is 0); the pointer statuses of out_len; RDMAXFER_ERR_AGAIN when no message has arrived;
 * RDMAXFER_ERR_BUFFER_TOO_SMALL and RDMAXFER_ERR_CONNECTION as above; the network statuses.
 * Blocks: no, except over OOB on a connection not yet switched to rdmaxfer's flow control: it
 * first exchanges it with the peer, at most the configured timeout.
 */
enum rdmaxfer_status rdmaxfer_conn_try_recv(struct rdmaxfer_conn *conn,
                                            void *buf,
                                            size_t cap,
                                            size_t *out_len);

/**
 * Makes an empty report.
 * Returns: RDMAXFER_OK; the pointer statuses of out_report; RDMAXFER_ERR_PANIC.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_report_new(struct rdmaxfer_report **out_report);

/**
 * Frees a report and its strings (NULL: nothing).
 * Returns: nothing (NULL: a no-op; a misaligned or already freed report: only the last error
 * message says so).
 * Blocks: no.
 */
void rdmaxfer_report_free(struct rdmaxfer_report *report);

/**
 * The entries `report` lists (at most `RDMAXFER_REPORT_MAX_FILES`); 0 for NULL or a handle
 * in use.
 * Returns: the count; 0 for a NULL, misaligned, freed, busy or poisoned report (the last error
 * message says why).
 * Blocks: no.
 */
size_t rdmaxfer_report_len(const struct rdmaxfer_report *report);

/**
 * Entry `i` (0-based, below `rdmaxfer_report_len`) of `report` into `*out` (see
 * `rdmaxfer_file_result` for its `struct_size`). `RDMAXFER_ERR_INVALID_ARGUMENT` for an index
 * past the end or a `struct_size` below the first release's struct.
 * Returns: RDMAXFER_OK; the handle statuses of report; the pointer statuses of out;
 * RDMAXFER_ERR_INVALID_ARGUMENT if i is past the end.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_report_file(const struct rdmaxfer_report *report,
                                          size_t i,
                                          struct rdmaxfer_file_result *out);

/**
 * The totals of `report` into `*out` (`struct_size` as for `rdmaxfer_report_file`).
 * Returns: RDMAXFER_OK; the handle statuses of report; the pointer statuses of out.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_report_totals(const struct rdmaxfer_report *report,
                                            struct rdmaxfer_totals *out);

/**
 * The library's version, "MAJOR.MINOR.PATCH" (static; never NULL). Compare with
 * `RDMAXFER_VERSION` to detect a header/library mismatch.
 * Returns: never fails: a static string, never NULL.
 * Blocks: no.
 */
const char *rdmaxfer_version(void);

/**
 * A static, NUL-terminated description of `status` (never NULL; "unknown status" for a value
 * that is not an `rdmaxfer_status`, e.g. an integer cast to it).
 * Returns: never fails: a static string, never NULL.
 * Blocks: no.
 */
const char *rdmaxfer_strerror(enum rdmaxfer_status status);

/**
 * Makes send options with the defaults of `rdmaxfer send`: no flags, 1 MiB chunks, 16 in
 * flight, XXH3-128, no rate limit, no exclusions.
 * Returns: RDMAXFER_OK; the pointer statuses of out_opts; RDMAXFER_ERR_PANIC.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_send_options_new(struct rdmaxfer_send_options **out_opts);

/**
 * Frees send options (NULL: nothing).
 * Returns: nothing (NULL: a no-op; a misaligned or already freed opts: only the last error message
 * says so).
 * Blocks: no.
 */
void rdmaxfer_send_options_free(struct rdmaxfer_send_options *opts);

/**
 * Sets the `RDMAXFER_SEND_*` flags (replacing those set before). Unknown bits:
 * `RDMAXFER_ERR_INVALID_ARGUMENT`.
 * Returns: RDMAXFER_OK; the handle statuses of opts; RDMAXFER_ERR_INVALID_ARGUMENT for unknown
 * bits.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_send_options_set_flags(struct rdmaxfer_send_options *opts,
                                                     uint32_t flags);

/**
 * Chunk size: bytes per RDMA WRITE (`send -s`; the receiver may lower it). Outside
 * 4096..=8388608: `RDMAXFER_ERR_INVALID_ARGUMENT`.
 * Returns: RDMAXFER_OK; the handle statuses of opts; RDMAXFER_ERR_INVALID_ARGUMENT outside
 * 4096..=8388608.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_send_options_set_chunk_size(struct rdmaxfer_send_options *opts,
                                                          uint32_t bytes);

/**
 * Chunks in flight at most (`send --slots`; also capped by the receiver). Outside 1..=1024:
 * `RDMAXFER_ERR_INVALID_ARGUMENT`.
 * Returns: RDMAXFER_OK; the handle statuses of opts; RDMAXFER_ERR_INVALID_ARGUMENT outside
 * 1..=1024.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_send_options_set_slots(struct rdmaxfer_send_options *opts,
                                                     uint32_t slots);

/**
 * Chunk verification: "xxh3" (the default) or "blake3" (`send --verify`). Another name:
 * `RDMAXFER_ERR_INVALID_ARGUMENT`.
 * Returns: RDMAXFER_OK; the handle statuses of opts; the pointer statuses of algo;
 * RDMAXFER_ERR_INVALID_ARGUMENT for another name.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_send_options_set_verify(struct rdmaxfer_send_options *opts,
                                                      const char *algo);

/**
 * At most `bytes_per_second` bytes of file data per second over all streams (`send
 * --bwlimit`); 0: no limit.
 * Returns: RDMAXFER_OK; the handle statuses of opts.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_send_options_set_bwlimit(struct rdmaxfer_send_options *opts,
                                                       uint64_t bytes_per_second);

/**
 * Adds an exclusion rule (`send --exclude`, rsync's rules: `*`, `**`, `?`, `[..]`, a trailing
 * `/` for directories only, a leading `/` anchors). Rules apply in the order added, the first
 * that matches decides; with `RDMAXFER_SEND_DELETE` an excluded name is never deleted.
 * Returns: RDMAXFER_OK; the handle statuses of opts; the pointer statuses of pattern;
 * RDMAXFER_ERR_INVALID_ARGUMENT for a pattern that is empty or has an empty component.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_send_options_add_exclude(struct rdmaxfer_send_options *opts,
                                                       const char *pattern);

/**
 * Adds an inclusion rule (`send --include`): what it matches is sent even if a later
 * exclusion matches it.
 * Returns: RDMAXFER_OK; the handle statuses of opts; the pointer statuses of pattern;
 * RDMAXFER_ERR_INVALID_ARGUMENT for a pattern that is empty or has an empty component.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_send_options_add_include(struct rdmaxfer_send_options *opts,
                                                       const char *pattern);

/**
 * Sends the `n_paths` files and trees at `paths` to an `rdmaxfer recv` / `rdmaxfer_recv_files`
 * peer, as `rdmaxfer send` with `opts` (NULL: the defaults) does: verified per chunk, with the
 * configuration's token, streams, devices and receiver addresses (see `rdmaxfer_send_file`).
 * `progress` (may be NULL) is called as data goes out and may stop the transfer
 * (`RDMAXFER_ERR_ABORTED`). `report` (may be NULL; made by `rdmaxfer_report_new`) is filled
 * with every entry's outcome when the call returns, whether it succeeds or fails, unless it
 * fails before anything is sent (a bad argument, the report's own handle statuses included:
 * the report is checked first and held for the whole call, so calls on it meanwhile, from
 * `progress` or another thread, return `RDMAXFER_ERR_BUSY`). `RDMAXFER_OK` only when every entry was
 * delivered or skipped (or, in a dry run, every one could be); `RDMAXFER_ERR_REFUSED` when
 * some were refused or failed (the report says which and why), or the receiver refused the
 * session (busy, a wrong token: the last error message says); `RDMAXFER_ERR_ABORTED` when
 * `progress` stopped it; `RDMAXFER_ERR_INVALID_ARGUMENT` for no paths; `RDMAXFER_ERR_IO` for
 * a path that cannot be listed; and the statuses of the network (see the header's
 * conventions).
 * Returns: RDMAXFER_OK; the handle statuses of conn, opts and report (opts and report may be NULL;
 * a report freed, in use or poisoned fails the call before anything is sent, the report
 * untouched); the pointer statuses of paths and its entries (an empty entry:
 * RDMAXFER_ERR_INVALID_ARGUMENT); RDMAXFER_ERR_INVALID_ARGUMENT, _IO, _REFUSED and _ABORTED as
 * above (INVALID_ARGUMENT also for a path that is not a file or directory, or cannot be sent by
 * its name); the network statuses.
 * Blocks: yes, until the transfer ends; each wait for the peer at most the configured timeout.
 */
enum rdmaxfer_status rdmaxfer_send_files(struct rdmaxfer_conn *conn,
                                         const char *const *paths,
                                         size_t n_paths,
                                         const struct rdmaxfer_send_options *opts,
                                         rdmaxfer_transfer_cb progress,
                                         void *user,
                                         struct rdmaxfer_report *report);

/**
 * Makes receive options with the defaults of `rdmaxfer recv`: no flags, no size limit, any
 * verification, its idle timeout and rate floor.
 * Returns: RDMAXFER_OK; the pointer statuses of out_opts; RDMAXFER_ERR_PANIC.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_recv_options_new(struct rdmaxfer_recv_options **out_opts);

/**
 * Frees receive options (NULL: nothing).
 * Returns: nothing (NULL: a no-op; a misaligned or already freed opts: only the last error message
 * says so).
 * Blocks: no.
 */
void rdmaxfer_recv_options_free(struct rdmaxfer_recv_options *opts);

/**
 * Sets the flags: `RDMAXFER_RECV_FORCE`, `RDMAXFER_RECV_RESUME`,
 * `RDMAXFER_RECV_ALLOW_DELETE` (replacing those set before). Unknown bits:
 * `RDMAXFER_ERR_INVALID_ARGUMENT`.
 * Returns: RDMAXFER_OK; the handle statuses of opts; RDMAXFER_ERR_INVALID_ARGUMENT for unknown
 * bits.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_recv_options_set_flags(struct rdmaxfer_recv_options *opts,
                                                     uint32_t flags);

/**
 * Refuses files larger than `bytes` (`recv --max-size`); 0: no limit.
 * Returns: RDMAXFER_OK; the handle statuses of opts.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_recv_options_set_max_size(struct rdmaxfer_recv_options *opts,
                                                        uint64_t bytes);

/**
 * Accepts only this chunk verification, "xxh3" or "blake3" (`recv --verify`); NULL: any.
 * Returns: RDMAXFER_OK; the handle statuses of opts; RDMAXFER_ERR_INVALID_ARGUMENT for a name
 * other than those, or not UTF-8.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_recv_options_set_verify(struct rdmaxfer_recv_options *opts,
                                                      const char *algo);

/**
 * The session's budget (`recv --idle-timeout`, `--min-rate`): it ends after `idle_ms`
 * milliseconds without progress (0: never), or when its data comes slower than
 * `min_bytes_per_second` (0: no floor).
 * Returns: RDMAXFER_OK; the handle statuses of opts.
 * Blocks: no.
 */
enum rdmaxfer_status rdmaxfer_recv_options_set_budget(struct rdmaxfer_recv_options *opts,
                                                      uint64_t idle_ms,
                                                      uint64_t min_bytes_per_second);

/**
 * Receives one sender's session on `conn` into the existing directory `out_dir`, as
 * `rdmaxfer_recv_file` does (where files land, what is refused), with `opts` (NULL: the
 * defaults), and fills `report` (may be NULL) with every entry's outcome when the call
 * returns, whether it succeeds or fails, unless it fails before the session starts (a bad
 * argument, the report's own handle statuses included: the report is checked first and held
 * for the whole call, so calls on it meanwhile return `RDMAXFER_ERR_BUSY`). `RDMAXFER_OK` when every entry arrived verified or
 * was skipped; `RDMAXFER_ERR_REFUSED` when some were refused or failed (the report says which)
 * or the session was refused (a wrong token); `RDMAXFER_ERR_INVALID_ARGUMENT` for an
 * `out_dir` that is not a directory; `RDMAXFER_ERR_IO` for one that cannot be read; and the
 * statuses of the network.
 * Returns: RDMAXFER_OK; the handle statuses of conn, opts and report (opts and report may be NULL;
 * a report freed, in use or poisoned fails the call before the session starts, the report
 * untouched); the pointer statuses of out_dir; RDMAXFER_ERR_INVALID_ARGUMENT, _IO and _REFUSED as
 * above; the network statuses.
 * Blocks: yes, until the sender's session ends; each wait for the peer at most the configured
 * timeout.
 */
enum rdmaxfer_status rdmaxfer_recv_files(struct rdmaxfer_conn *conn,
                                         const char *out_dir,
                                         const struct rdmaxfer_recv_options *opts,
                                         struct rdmaxfer_report *report);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* RDMAXFER_H */
