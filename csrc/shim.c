/* rdmaxfer C shim: see shim.h. Compiled by build.rs with -Wall -Wextra -Werror. */
#include "shim.h"

int shim_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	return ibv_post_send(qp, wr, bad_wr);
}

int shim_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	return ibv_post_recv(qp, wr, bad_wr);
}

int shim_ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, num_entries, wc);
}

int shim_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return ibv_req_notify_cq(cq, solicited_only);
}

int shim_ibv_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr)
{
	return ibv_query_port(context, port_num, port_attr);
}

struct ibv_mr *shim_ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr(pd, addr, length, access);
}

ssize_t shim_ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
                                 size_t max_entries, uint32_t flags)
{
	return ibv_query_gid_table(context, entries, max_entries, flags);
}

size_t shim_sizeof(int which)
{
	switch (which) {
	case SHIM_SIZEOF_IBV_SEND_WR: return sizeof(struct ibv_send_wr);
	case SHIM_SIZEOF_IBV_RECV_WR: return sizeof(struct ibv_recv_wr);
	case SHIM_SIZEOF_IBV_WC: return sizeof(struct ibv_wc);
	case SHIM_SIZEOF_IBV_QP_ATTR: return sizeof(struct ibv_qp_attr);
	case SHIM_SIZEOF_IBV_PORT_ATTR: return sizeof(struct ibv_port_attr);
	case SHIM_SIZEOF_IBV_GID_ENTRY: return sizeof(struct ibv_gid_entry);
	case SHIM_SIZEOF_IBV_QP_INIT_ATTR: return sizeof(struct ibv_qp_init_attr);
	case SHIM_SIZEOF_RDMA_CM_EVENT: return sizeof(struct rdma_cm_event);
	case SHIM_SIZEOF_RDMA_CONN_PARAM: return sizeof(struct rdma_conn_param);
	case SHIM_OFFSETOF_IBV_SEND_WR_WR: return offsetof(struct ibv_send_wr, wr);
	case SHIM_OFFSETOF_IBV_WC_IMM: return offsetof(struct ibv_wc, imm_data);
	case SHIM_SIZEOF_IBV_DEVICE_ATTR: return sizeof(struct ibv_device_attr);
	case SHIM_SIZEOF_RDMA_CM_ID: return sizeof(struct rdma_cm_id);
	default: return 0;
	}
}
