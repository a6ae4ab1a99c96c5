/**
 * Start-up of the interface: use the configured WireGuard interface, or create it when it is
 * missing (DESIGN §3: one command gives a working service). With a state directory, a missing
 * interface is created again as saved (same key, port and addresses), and a found one the
 * directory does not hold (nothing saved, or another key) is adopted: saved as it is, its private
 * key read back from the kernel, before the API answers anything (issue 28), so that from then on
 * a reboot puts it back as if the daemon had created it. Its peers are saved by the restore
 * (restore.ts), which logs the adoption once.
 */
import type { Ipv4Address, Ipv6Address, Kernel } from '../kernel/types';
import { InterfaceMissingError as KernelInterfaceMissing } from '../kernel/errors';
import { InterfaceNotWireGuardError, translateKernelError } from './errors';
import { generatePrivateKey, publicKeyOf, type RandomSource } from './keys';
import type { EventLogger } from './contracts';
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
  /**
   * With a state directory: a missing interface is created again as saved (same key), a found
   * one the directory does not hold is adopted (saved as it is).
   */
  saved?: SavedInterfaceStore;
}

/** A found interface the state directory did not hold, saved as its own in this start. */
export interface AdoptedInterface extends SavedInterface {
  /** The public key the state directory held before (another interface's), or null. */
  previousPublicKey: string | null;
}

export interface InterfaceState {
  created: boolean;
  /** Set when the interface was found and adopted in this start (`--state-dir`). */
  adopted: AdoptedInterface | null;
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
  let found: InterfaceState;
  try {
    found = await useExisting(kernel, ifname, log);
  } catch (error) {
    if (!(error instanceof KernelInterfaceMissing))
      throw translateKernelError(error, 'link', ifname);
    return createInterface(kernel, options, log);
  }
  if (options.saved && (await unsaved(options.saved, found.publicKey))) {
    found.adopted = await adoptInterface(kernel, ifname, found, options.saved);
  }
  return found;
}

/** Whether the state directory lacks the found interface: its settings (needsAdoption) or its key file. */
async function unsaved(saved: SavedInterfaceStore, publicKey: string | null): Promise<boolean> {
  if (needsAdoption(saved.iface, publicKey)) return true;
  if (publicKey === null) return false;
  // Saved, but server.key was removed since: without it a reboot would make a new key.
  const key = await saved.readServerKey();
  key?.fill(0);
  return key === null;
}

/** The interface as found, logged (info) with what would make creating peers fail (warn). */
async function useExisting(
  kernel: Pick<Kernel, 'wireguard' | 'link'>,
  ifname: string,
  log: EventLogger,
): Promise<InterfaceState> {
  const link = await kernel.link.getLink(ifname);
  if (link.kind !== 'wireguard') throw new InterfaceNotWireGuardError(ifname, link.kind);
  const [device, addresses, addresses6] = await Promise.all([
    kernel.wireguard.getDevice(ifname),
    kernel.link.getIpv4Addresses(link.index),
    kernel.link.getIpv6Addresses(link.index),
  ]);
  log.info(
    {
      event: 'interface_found',
      interface: ifname,
      publicKey: device.publicKey,
      listenPort: device.listenPort,
      addresses: [...addresses, ...addresses6].map(cidrOf),
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
  return {
    created: false,
    adopted: null,
    ifindex: link.index,
    publicKey: device.publicKey,
    listenPort: device.listenPort,
    addresses,
    addresses6,
  };
}

/**
 * A found interface is adopted when the state directory does not hold it: nothing saved, or
 * saved with another key (the interface was replaced, or its key changed). One without a key
 * has nothing a reboot could put back.
 */
export function needsAdoption(saved: SavedInterface | null, publicKey: string | null): boolean {
  return publicKey !== null && saved?.publicKey !== publicKey;
}

/**
 * Saves a found interface as the state directory's own (issue 28), as if the daemon had created
 * it: the private key read back from the kernel, its listen port and addresses. A reboot then
 * creates it again as it is. The key is zeroed once saved; the peers are saved by the restore.
 */
async function adoptInterface(
  kernel: Pick<Kernel, 'wireguard'>,
  ifname: string,
  found: InterfaceState,
  saved: SavedInterfaceStore,
): Promise<AdoptedInterface | null> {
  let privateKey: Buffer | null;
  try {
    privateKey = await kernel.wireguard.readPrivateKey(ifname);
  } catch (error) {
    throw translateKernelError(error, 'wireguard', ifname);
  }
  if (privateKey === null) return null; // its key was removed since the device was read
  try {
    const iface: SavedInterface = {
      listenPort: found.listenPort,
      addresses: [...found.addresses, ...found.addresses6].map(cidrOf),
      // Derived from the key saved, not from the first read: the two always go together.
      publicKey: Buffer.from(publicKeyOf(privateKey)).toString('base64'),
    };
    const previousPublicKey = saved.iface?.publicKey ?? null;
    await saved.saveInterface(privateKey, iface);
    found.publicKey = iface.publicKey;
    return { ...iface, previousPublicKey };
  } finally {
    privateKey.fill(0);
  }
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

/** The key, port and addresses an interface is created with. */
interface Settings {
  privateKey: Buffer;
  listenPort: number;
  /** IPv4 addresses (at least one), then IPv6 ones (none: IPv4-only). */
  addresses: Ipv4Address[];
  addresses6: Ipv6Address[];
  /** From the state directory (else new, and saved before the interface is made). */
  restored: boolean;
}

/**
 * The addresses of a saved interface: every one saved, IPv4 ones first as saved. A state dir
 * written before --address6 existed holds one address (IPv4-only as saved); an adopted
 * interface may hold several, or no IPv4 one: then the configured address is given.
 */
export function savedInterfaceAddresses(
  saved: SavedInterface,
  configured: Ipv4Address,
): { addresses: Ipv4Address[]; addresses6: Ipv6Address[] } {
  const addresses = saved.addresses.filter((cidr) => !cidr.includes(':')).map(addressOf);
  const addresses6 = saved.addresses.filter((cidr) => cidr.includes(':')).map(addressOf);
  return { addresses: addresses.length > 0 ? addresses : [configured], addresses6 };
}

/** Settings as the state directory holds them; warns when they are not the configured ones. */
function savedSettings(
  options: InterfaceOptions,
  saved: SavedInterface,
  privateKey: Buffer,
  log: EventLogger,
): Settings {
  const { addresses, addresses6 } = savedInterfaceAddresses(saved, options.address);
  const configured = savedAddresses(options.address, options.address6 ?? null);
  const kept = [...addresses, ...addresses6].map(cidrOf);
  if (saved.listenPort !== options.listenPort || kept.join() !== configured.join()) {
    log.warn(
      {
        event: 'interface_settings_kept',
        interface: options.interfaceName,
        saved: { listenPort: saved.listenPort, address: kept[0] },
        configured: { listenPort: options.listenPort, address: configured[0] },
        ...(addresses6.length > 0 || options.address6 != null
          ? {
              saved6: addresses6[0] ? cidrOf(addresses6[0]) : null,
              configured6: configured[1] ?? null,
            }
          : {}),
        ...(kept.length > (addresses6.length > 0 ? 2 : 1) ? { savedAddresses: kept } : {}),
      },
      'the state directory holds other interface settings than configured: recreating the interface as saved, so client configs keep working',
    );
  }
  return { privateKey, listenPort: saved.listenPort, addresses, addresses6, restored: true };
}

/**
 * The key, port and addresses of the interface to create: the saved ones when the state
 * directory has them (every client config names that key and port), else new ones, saved first.
 */
async function settingsFor(options: InterfaceOptions, log: EventLogger): Promise<Settings> {
  const saved = options.saved;
  const savedKey = saved?.iface ? await saved.readServerKey() : null;
  if (saved?.iface && savedKey !== null) return savedSettings(options, saved.iface, savedKey, log);
  const configured6 = options.address6 ?? null;
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
    addresses: [options.address],
    addresses6: configured6 === null ? [] : [configured6],
    restored: false,
  };
}

/** Key, port, addresses, up; on any failure the half-made link is deleted. The key is zeroed. */
async function configureCreated(
  kernel: Pick<Kernel, 'wireguard' | 'link'>,
  ifname: string,
  ifindex: number,
  settings: Settings,
): Promise<void> {
  const { privateKey, listenPort } = settings;
  try {
    await kernel.wireguard.configureDevice(ifname, { privateKey, listenPort });
    for (const address of settings.addresses) await kernel.link.addIpv4Address(ifindex, address);
    for (const address of settings.addresses6) await kernel.link.addIpv6Address(ifindex, address);
    await kernel.link.setUp(ifindex);
  } catch (error) {
    // Leave no half-made interface behind: the next start tries again from scratch.
    await kernel.link.deleteLink(ifindex).catch(() => undefined);
    throw translateKernelError(error, 'link', ifname);
  } finally {
    privateKey.fill(0);
  }
}

async function createInterface(
  kernel: Pick<Kernel, 'wireguard' | 'link'>,
  options: InterfaceOptions,
  log: EventLogger,
): Promise<InterfaceState> {
  const ifname = options.interfaceName;
  const settings = await settingsFor(options, log);
  const { listenPort, addresses, addresses6 } = settings;
  const publicKey = Buffer.from(publicKeyOf(settings.privateKey)).toString('base64');
  let ifindex: number;
  try {
    ifindex = await kernel.link.createWireGuard(ifname);
  } catch (error) {
    settings.privateKey.fill(0);
    throw translateKernelError(error, 'wireguard', ifname);
  }
  await configureCreated(kernel, ifname, ifindex, settings);
  log.info(
    {
      event: 'interface_created',
      interface: ifname,
      publicKey,
      listenPort,
      address: cidrOf(addresses[0]!),
      ...(addresses6.length === 0 ? {} : { address6: cidrOf(addresses6[0]!) }),
      ...(addresses.length + addresses6.length > (addresses6.length > 0 ? 2 : 1)
        ? { addresses: [...addresses, ...addresses6].map(cidrOf) }
        : {}),
      fromStateDir: settings.restored,
    },
    settings.restored
      ? 'interface was missing: created it again with the saved key, port and address'
      : 'interface was missing: created it',
  );
  return { created: true, adopted: null, ifindex, publicKey, listenPort, addresses, addresses6 };
}
