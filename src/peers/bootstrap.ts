/**
 * Start-up of the interface: use the configured WireGuard interface, or create it when it is
 * missing (DESIGN §3: one command gives a working service).
 */
import type { Ipv4Address, Ipv6Address, Kernel } from '../kernel/types';
import { InterfaceMissingError as KernelInterfaceMissing } from '../kernel/errors';
import { InterfaceNotWireGuardError, translateKernelError } from './errors';
import { generatePrivateKey, publicKeyOf, type RandomSource } from './keys';
import type { EventLogger } from './service';
import type { SavedInterface } from '../state';

/** The state directory's part in a start: the interface to recreate, and where to save a new one. */
export interface SavedInterfaceStore {
  /** The interface as the daemon last created it, or null. */
  readonly iface: SavedInterface | null;
  readServerKey(): Promise<Buffer | null>;
  /** Saves a new interface's key and settings durably, BEFORE it is created. */
  saveInterface(privateKey: Buffer, iface: SavedInterface): Promise<void>;
}

export interface InterfaceOptions {
  interfaceName: string;
  /** Address and prefix given to a created interface. */
  address: Ipv4Address;
  /** IPv6 address and prefix given to a created interface (`--address6`); absent: none. */
  address6?: Ipv6Address | null;
  /** Listen port given to a created interface. */
  listenPort: number;
  random?: RandomSource;
  /** With a state directory: a missing interface is created again as saved (same key). */
  saved?: SavedInterfaceStore;
}

export interface InterfaceState {
  created: boolean;
  ifindex: number;
  publicKey: string | null;
  listenPort: number;
  addresses: Ipv4Address[];
  /** Global or unique-local IPv6 addresses: the first one's prefix makes peers dual-stack. */
  addresses6: Ipv6Address[];
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
    const [device, addresses, addresses6] = await Promise.all([
      kernel.wireguard.getDevice(ifname),
      kernel.link.getIpv4Addresses(link.index),
      kernel.link.getIpv6Addresses(link.index),
    ]);
    const state: InterfaceState = {
      created: false,
      ifindex: link.index,
      publicKey: device.publicKey,
      listenPort: device.listenPort,
      addresses,
      addresses6,
    };
    log.info(
      {
        event: 'interface_found',
        interface: ifname,
        publicKey: device.publicKey,
        listenPort: device.listenPort,
        addresses: [...addresses, ...addresses6].map((a) => `${a.address}/${a.prefixLength}`),
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

/** Address and prefix of a CIDR text ("10.8.0.1/24", "fd42::1/64"). */
function addressOf(cidr: string): Ipv4Address {
  const [address, prefixLength] = cidr.split('/');
  return { address, prefixLength: Number(prefixLength) };
}

const cidrOf = (address: Ipv4Address | Ipv6Address): string =>
  `${address.address}/${address.prefixLength}`;

/** The CIDR texts an interface is saved with: its IPv4 address, then its IPv6 one if any. */
function savedAddresses(address: Ipv4Address, address6: Ipv6Address | null): string[] {
  return address6 === null ? [cidrOf(address)] : [cidrOf(address), cidrOf(address6)];
}

/**
 * The key, port and address of the interface to create: the saved ones when the state directory
 * has them (every client config names that key and port), else new ones, saved first.
 */
async function settingsFor(
  options: InterfaceOptions,
  log: EventLogger,
): Promise<{
  privateKey: Buffer;
  listenPort: number;
  address: Ipv4Address;
  address6: Ipv6Address | null;
  restored: boolean;
}> {
  const saved = options.saved;
  const savedKey = saved?.iface ? await saved.readServerKey() : null;
  const configured6 = options.address6 ?? null;
  if (saved?.iface && savedKey !== null) {
    const address = addressOf(saved.iface.addresses[0]);
    // A state dir written before --address6 existed holds one address: IPv4-only as saved.
    const saved6 = saved.iface.addresses.find((cidr) => cidr.includes(':'));
    const address6 = saved6 === undefined ? null : addressOf(saved6);
    const configured = savedAddresses(options.address, configured6);
    const kept = savedAddresses(address, address6);
    if (saved.iface.listenPort !== options.listenPort || kept.join() !== configured.join()) {
      log.warn(
        {
          event: 'interface_settings_kept',
          interface: options.interfaceName,
          saved: { listenPort: saved.iface.listenPort, address: saved.iface.addresses[0] },
          configured: { listenPort: options.listenPort, address: configured[0] },
          ...(address6 !== null || configured6 !== null
            ? { saved6: saved6 ?? null, configured6: configured[1] ?? null }
            : {}),
        },
        'the state directory holds other interface settings than configured: recreating the interface as saved, so client configs keep working',
      );
    }
    return {
      privateKey: savedKey,
      listenPort: saved.iface.listenPort,
      address,
      address6,
      restored: true,
    };
  }
  const privateKey = generatePrivateKey(options.random);
  if (saved) {
    await saved.saveInterface(privateKey, {
      listenPort: options.listenPort,
      addresses: savedAddresses(options.address, configured6),
      publicKey: Buffer.from(publicKeyOf(privateKey)).toString('base64'),
    });
  }
  return {
    privateKey,
    listenPort: options.listenPort,
    address: options.address,
    address6: configured6,
    restored: false,
  };
}

async function createInterface(
  kernel: Pick<Kernel, 'wireguard' | 'link'>,
  options: InterfaceOptions,
  log: EventLogger,
): Promise<InterfaceState> {
  const ifname = options.interfaceName;
  const settings = await settingsFor(options, log);
  const { privateKey, listenPort, address, address6 } = settings;
  let ifindex: number;
  try {
    ifindex = await kernel.link.createWireGuard(ifname);
  } catch (error) {
    privateKey.fill(0);
    throw translateKernelError(error, 'wireguard', ifname);
  }
  const publicKey = Buffer.from(publicKeyOf(privateKey)).toString('base64');
  try {
    await kernel.wireguard.configureDevice(ifname, { privateKey, listenPort });
    await kernel.link.addIpv4Address(ifindex, address);
    if (address6 !== null) await kernel.link.addIpv6Address(ifindex, address6);
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
      listenPort,
      address: cidrOf(address),
      ...(address6 === null ? {} : { address6: cidrOf(address6) }),
      fromStateDir: settings.restored,
    },
    settings.restored
      ? 'interface was missing: created it again with the saved key, port and address'
      : 'interface was missing: created it',
  );
  return {
    created: true,
    ifindex,
    publicKey,
    listenPort,
    addresses: [address],
    addresses6: address6 === null ? [] : [address6],
  };
}
