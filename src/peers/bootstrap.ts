/**
 * Start-up of the interface: use the configured WireGuard interface, or create it when it is
 * missing (DESIGN §3: one command gives a working service).
 */
import type { Ipv4Address, Kernel } from '../kernel/types';
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

/** Address and prefix of a CIDR text ("10.8.0.1/24"). */
function addressOf(cidr: string): Ipv4Address {
  const [address, prefixLength] = cidr.split('/');
  return { address, prefixLength: Number(prefixLength) };
}

/**
 * The key, port and address of the interface to create: the saved ones when the state directory
 * has them (every client config names that key and port), else new ones, saved first.
 */
async function settingsFor(
  options: InterfaceOptions,
  log: EventLogger,
): Promise<{ privateKey: Buffer; listenPort: number; address: Ipv4Address; restored: boolean }> {
  const saved = options.saved;
  const savedKey = saved?.iface ? await saved.readServerKey() : null;
  if (saved?.iface && savedKey !== null) {
    const address = addressOf(saved.iface.addresses[0]);
    const configured = `${options.address.address}/${options.address.prefixLength}`;
    if (saved.iface.listenPort !== options.listenPort || saved.iface.addresses[0] !== configured) {
      log.warn(
        {
          event: 'interface_settings_kept',
          interface: options.interfaceName,
          saved: { listenPort: saved.iface.listenPort, address: saved.iface.addresses[0] },
          configured: { listenPort: options.listenPort, address: configured },
        },
        'the state directory holds other interface settings than configured: recreating the interface as saved, so client configs keep working',
      );
    }
    return { privateKey: savedKey, listenPort: saved.iface.listenPort, address, restored: true };
  }
  const privateKey = generatePrivateKey(options.random);
  if (saved) {
    await saved.saveInterface(privateKey, {
      listenPort: options.listenPort,
      addresses: [`${options.address.address}/${options.address.prefixLength}`],
      publicKey: Buffer.from(publicKeyOf(privateKey)).toString('base64'),
    });
  }
  return { privateKey, listenPort: options.listenPort, address: options.address, restored: false };
}

async function createInterface(
  kernel: Pick<Kernel, 'wireguard' | 'link'>,
  options: InterfaceOptions,
  log: EventLogger,
): Promise<InterfaceState> {
  const ifname = options.interfaceName;
  const settings = await settingsFor(options, log);
  const { privateKey, listenPort, address } = settings;
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
      address: `${address.address}/${address.prefixLength}`,
      fromStateDir: settings.restored,
    },
    settings.restored
      ? 'interface was missing: created it again with the saved key, port and address'
      : 'interface was missing: created it',
  );
  return { created: true, ifindex, publicKey, listenPort, addresses: [address] };
}
