/**
 * Start-up of the interface: use the configured WireGuard interface, or create it when it is
 * missing (DESIGN §3: one command gives a working service).
 */
import type { Ipv4Address, Kernel } from '../kernel/types';
import { InterfaceMissingError as KernelInterfaceMissing } from '../kernel/errors';
import { InterfaceNotWireGuardError, translateKernelError } from './errors';
import { generatePrivateKey, publicKeyOf, type RandomSource } from './keys';
import type { EventLogger } from './service';

export interface InterfaceOptions {
  interfaceName: string;
  /** Address and prefix given to a created interface. */
  address: Ipv4Address;
  /** Listen port given to a created interface. */
  listenPort: number;
  random?: RandomSource;
}

export interface InterfaceState {
  created: boolean;
  ifindex: number;
  publicKey: string | null;
  listenPort: number;
  addresses: Ipv4Address[];
}

/**
 * Throws InterfaceNotWireGuardError when the name is taken by another kind of link, and domain
 * errors (FacilityMissingError, KernelFailureError, ...) when the kernel refuses.
 */
export async function ensureInterface(
  kernel: Pick<Kernel, 'wireguard' | 'link'>,
  options: InterfaceOptions,
  log: EventLogger,
): Promise<InterfaceState> {
  const ifname = options.interfaceName;
  try {
    const link = await kernel.link.getLink(ifname);
    if (link.kind !== 'wireguard') throw new InterfaceNotWireGuardError(ifname, link.kind);
    const [device, addresses] = await Promise.all([
      kernel.wireguard.getDevice(ifname),
      kernel.link.getIpv4Addresses(link.index),
    ]);
    const state: InterfaceState = {
      created: false,
      ifindex: link.index,
      publicKey: device.publicKey,
      listenPort: device.listenPort,
      addresses,
    };
    log.info(
      {
        event: 'interface_found',
        interface: ifname,
        publicKey: device.publicKey,
        listenPort: device.listenPort,
        addresses: addresses.map((a) => `${a.address}/${a.prefixLength}`),
        up: link.up,
        peers: device.peers.length,
      },
      'using existing interface',
    );
    if (addresses.length === 0) {
      log.warn({ interface: ifname }, 'interface has no IPv4 address: creating peers will fail');
    }
    if (device.publicKey === null) {
      log.warn({ interface: ifname }, 'interface has no private key: creating peers will fail');
    }
    if (!link.up) log.warn({ interface: ifname }, 'interface is down');
    return state;
  } catch (error) {
    if (!(error instanceof KernelInterfaceMissing))
      throw translateKernelError(error, 'link', ifname);
  }
  return createInterface(kernel, options, log);
}

async function createInterface(
  kernel: Pick<Kernel, 'wireguard' | 'link'>,
  options: InterfaceOptions,
  log: EventLogger,
): Promise<InterfaceState> {
  const ifname = options.interfaceName;
  let ifindex: number;
  try {
    ifindex = await kernel.link.createWireGuard(ifname);
  } catch (error) {
    throw translateKernelError(error, 'wireguard', ifname);
  }
  const privateKey = generatePrivateKey(options.random);
  const publicKey = Buffer.from(publicKeyOf(privateKey)).toString('base64');
  try {
    await kernel.wireguard.configureDevice(ifname, {
      privateKey,
      listenPort: options.listenPort,
    });
    await kernel.link.addIpv4Address(ifindex, options.address);
    await kernel.link.setUp(ifindex);
  } catch (error) {
    // Leave no half-made interface behind: the next start tries again from scratch.
    await kernel.link.deleteLink(ifindex).catch(() => undefined);
    throw translateKernelError(error, 'link', ifname);
  } finally {
    privateKey.fill(0);
  }
  log.info(
    {
      event: 'interface_created',
      interface: ifname,
      publicKey,
      listenPort: options.listenPort,
      address: `${options.address.address}/${options.address.prefixLength}`,
    },
    'interface was missing: created it',
  );
  return {
    created: true,
    ifindex,
    publicKey,
    listenPort: options.listenPort,
    addresses: [options.address],
  };
}
