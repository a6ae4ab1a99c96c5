/** The kernel modules the shaper needs, and the typed error that names the one a create lacked. */
import { FacilityUnavailableError, errnoOf, kernelMessageOf } from '../errors';

/** Kernel modules the shaper needs, named the way `modprobe` wants them. */
const MODULES = {
  htb: { module: 'sch_htb', what: 'the HTB qdisc' },
  ingress: { module: 'sch_ingress', what: 'the ingress qdisc' },
  u32: { module: 'cls_u32', what: 'the u32 classifier' },
  mirred: { module: 'act_mirred', what: 'the mirred action' },
  ifb: { module: 'ifb', what: 'IFB devices' },
} as const;

/**
 * A create that fails with ENOENT ("Specified qdisc kind is unknown", "TC classifier not found",
 * "Failed to load TC action module") or EOPNOTSUPP ("Unknown device type") means the kernel has
 * no such module and could not load one (sch_api.c qdisc_create, cls_api.c
 * tcf_proto_lookup_ops, act_api.c tcf_action_init_1, rtnetlink.c rtnl_newlink).
 */
export async function needing<T>(need: keyof typeof MODULES, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    const code = errnoOf(error);
    if (code === 'ENOENT' || code === 'EOPNOTSUPP') {
      const { module, what } = MODULES[need];
      const kernelMessage = kernelMessageOf(error);
      const said = kernelMessage ? ` (the kernel said: ${kernelMessage})` : '';
      throw new FacilityUnavailableError(
        `${what} (kernel module ${module}), needed for per-peer speed limits,`,
        `load it with \`modprobe ${module}\`${said}`,
        { cause: error },
      );
    }
    throw error;
  }
}
