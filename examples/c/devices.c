/* devices: list the RDMA devices through librdmaxfer. */
#include "common.h"

int main(void)
{
    printf("librdmaxfer %s (header %s)\n", rdmaxfer_version(), RDMAXFER_VERSION);
    struct rdmaxfer_device_list *list = NULL;
    CHECK(rdmaxfer_devices(&list));
    for (size_t i = 0; i < rdmaxfer_device_list_len(list); i++) {
        struct rdmaxfer_device_info d = {.struct_size = sizeof d};
        CHECK(rdmaxfer_device_list_get(list, i, &d));
        printf("%s: node_guid %s, %s, %u ports (%u active), %u GIDs\n", d.name, d.node_guid,
               d.transport, d.ports, d.active_ports, d.gids);
    }
    rdmaxfer_device_list_free(list);
    return 0;
}
