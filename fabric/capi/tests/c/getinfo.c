/* fi_getinfo and friends through libfabric's own headers: run by
 * tests/c_program.rs against this crate's libfabric.so.1. Prints one line per
 * check; exits non-zero at the first failure. */
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_domain.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAILED line %d: %s\n", __LINE__, #c); return 1; } } while (0)

int main(void)
{
	struct fi_info *hints, *info, *cur, *dup;
	struct fi_param *params;
	int ret, n = 0, count = 0, i;
	const char *s;

	hints = fi_allocinfo();
	CHECK(hints && hints->ep_attr && hints->domain_attr && hints->fabric_attr && hints->tx_attr && hints->rx_attr);
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = 0;
	/* Replace a hints string as programs do: libc's free and strdup. */
	hints->fabric_attr->prov_name = strdup("nosuch");
	free(hints->fabric_attr->prov_name);
	hints->fabric_attr->prov_name = strdup("tcp;ofi_rxm");

	ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
	CHECK(ret == 0 && info);
	for (cur = info; cur; cur = cur->next) {
		CHECK(cur->ep_attr->type == FI_EP_RDM);
		CHECK(cur->caps & FI_TAGGED);
		CHECK(strcmp(cur->fabric_attr->prov_name, "tcp;ofi_rxm") == 0);
		CHECK(cur->domain_attr->name && cur->fabric_attr->name);
		printf("entry %s %s %s\n", cur->fabric_attr->prov_name, cur->fabric_attr->name, cur->domain_attr->name);
		n++;
	}
	CHECK(n > 0);

	/* A program may take ownership of a string and put its own. */
	free(info->domain_attr->name);
	info->domain_attr->name = strdup("replaced");
	dup = fi_dupinfo(info);
	CHECK(dup && dup != info && dup->next == NULL);
	CHECK(strcmp(dup->domain_attr->name, "replaced") == 0);
	CHECK(dup->domain_attr->name != info->domain_attr->name);
	CHECK(dup->src_addrlen == info->src_addrlen);
	CHECK(!info->src_addr || memcmp(dup->src_addr, info->src_addr, info->src_addrlen) == 0);

	s = fi_tostr(dup, FI_TYPE_INFO);
	CHECK(s && strncmp(s, "fi_info:\n", 9) == 0);
	CHECK(strstr(s, "type: FI_EP_RDM") && strstr(s, "prov_name: tcp;ofi_rxm"));
	{
		char buf[64];
		enum fi_ep_type t = FI_EP_MSG;
		CHECK(fi_tostr_r(buf, sizeof buf, &t, FI_TYPE_EP_TYPE) == buf && strcmp(buf, "FI_EP_MSG") == 0);
	}
	printf("tostr ok\n");
	fi_freeinfo(dup);
	fi_freeinfo(info);

	/* Nothing fits: -FI_ENODATA, as libfabric's tests expect. */
	free(hints->fabric_attr->prov_name);
	hints->fabric_attr->prov_name = strdup("nosuch");
	info = (void *) 1;
	ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
	CHECK(ret == -FI_ENODATA && info == NULL);
	fi_freeinfo(hints);

	/* Open MPI's ofi BTL (one-sided MPI): RMA and atomics, FI_DELIVERY_COMPLETE,
	 * no provider name. It refuses any entry named "...ofi_rxm...", so tcp's
	 * RDM entries, which do complete at delivery, come as "tcp" to it; the
	 * same hints without FI_DELIVERY_COMPLETE get "tcp;ofi_rxm". */
	hints = fi_allocinfo();
	CHECK(hints);
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_RMA | FI_ATOMIC;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->mr_mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->tx_attr->iov_limit = 1;
	hints->rx_attr->iov_limit = 1;
	hints->rx_attr->op_flags = FI_COMPLETION;
	for (i = 0; i < 2; i++) {
		int tcp = 0, rxm = 0;
		hints->tx_attr->op_flags = FI_COMPLETION | (i ? FI_DELIVERY_COMPLETE : 0);
		ret = fi_getinfo(FI_VERSION(1, 5), NULL, NULL, 0, hints, &info);
		CHECK(ret == 0 && info);
		for (cur = info; cur; cur = cur->next) {
			CHECK((cur->caps & (FI_RMA | FI_ATOMIC)) == (FI_RMA | FI_ATOMIC));
			tcp += strcmp(cur->fabric_attr->prov_name, "tcp") == 0;
			rxm += strstr(cur->fabric_attr->prov_name, "ofi_rxm") != NULL;
		}
		CHECK(i ? tcp > 0 && rxm == 0 : tcp == 0 && rxm > 0);
		/* The entry opens under its name (fi_fabric looks the provider up). */
		if (i) {
			struct fid_fabric *fabric;
			for (cur = info; strcmp(cur->fabric_attr->prov_name, "tcp"); cur = cur->next)
				;
			CHECK(fi_fabric(cur->fabric_attr, &fabric, NULL) == 0);
			CHECK(fi_close(&fabric->fid) == 0);
		}
		fi_freeinfo(info);
		printf("delivery complete %d: %d tcp, %d ofi_rxm\n", i, tcp, rxm);
	}
	fi_freeinfo(hints);

	/* NULL hints, FI_SOURCE with a node. */
	ret = fi_getinfo(FI_VERSION(1, 5), "127.0.0.1", NULL, FI_SOURCE, NULL, &info);
	CHECK(ret == 0 && info);
	fi_freeinfo(info);
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, NULL, NULL) == -FI_EINVAL);
	fi_freeinfo(NULL);

	ret = fi_getparams(&params, &count);
	CHECK(ret == 0 && count > 0 && params);
	for (i = 0; i < count; i++)
		CHECK(params[i].name && params[i].help_string);
	CHECK(params[count].name == NULL);
	CHECK(strcmp(params[0].name, "FI_PROVIDER") == 0);
	fi_freeparams(params);
	printf("params ok %d\n", count);
	return 0;
}
