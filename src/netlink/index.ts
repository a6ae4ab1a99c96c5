/** The netlink layer: bytes and protocol only, no knowledge of any family's meaning. */
export * from './attributes';
export * from './constants';
export * from './errors';
export * from './genl';
export * from './message';
export * from './serial-queue';
export * from './socket';
export * from './struct';
export type { DatagramHandler, Transport } from './transport';

import { NativeTransport } from './native';
import type { Transport } from './transport';

/** Opens a transport for a protocol; kernel clients take one so tests can replay transcripts. */
export type TransportFactory = (protocol: number) => Transport;

export const openNativeTransport: TransportFactory = (protocol) => new NativeTransport(protocol);
