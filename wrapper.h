/* bindgen input: the rdma-core headers rdmaxfer binds, plus the C shim. */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include "csrc/shim.h"
