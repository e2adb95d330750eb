/*
 * rdmaxfer C shim: one real, linkable function for each static-inline or
 * macro verb in rdma-core's headers that Rust calls. Each one only forwards.
 */
#ifndef RDMAXFER_SHIM_H
#define RDMAXFER_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

/* ibv_post_send(3) */
int shim_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
/* ibv_post_recv(3) */
int shim_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
/* ibv_poll_cq(3) */
int shim_ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
/* ibv_req_notify_cq(3) */
int shim_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only);
/* ibv_query_port(3) (a macro over ___ibv_query_port) */
int shim_ibv_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr);
/* ibv_reg_mr(3) (a macro over __ibv_reg_mr) */
struct ibv_mr *shim_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access);
/* ibv_query_gid_table(3): every valid entry of every port in one call */
ssize_t shim_ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
                                 size_t max_entries, uint32_t flags);

/* sizeof/offsetof as the C compiler sees them, for the bindgen layout cross-check test. */
size_t shim_sizeof(int which);
enum shim_sizeof_which {
	SHIM_SIZEOF_IBV_SEND_WR = 0,
	SHIM_SIZEOF_IBV_RECV_WR = 1,
	SHIM_SIZEOF_IBV_WC = 2,
	SHIM_SIZEOF_IBV_QP_ATTR = 3,
	SHIM_SIZEOF_IBV_PORT_ATTR = 4,
	SHIM_SIZEOF_IBV_GID_ENTRY = 5,
	SHIM_SIZEOF_IBV_QP_INIT_ATTR = 6,
	SHIM_SIZEOF_RDMA_CM_EVENT = 7,
	SHIM_SIZEOF_RDMA_CONN_PARAM = 8,
	SHIM_OFFSETOF_IBV_SEND_WR_WR = 9,
	SHIM_OFFSETOF_IBV_WC_IMM = 10,
	SHIM_SIZEOF_IBV_DEVICE_ATTR = 11,
	SHIM_SIZEOF_RDMA_CM_ID = 12,
};

#endif
